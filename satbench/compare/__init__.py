"""``satbench compare A B``: two runs' answers lane by lane, each change judged against the runs' own intervals
(``judge``), read from run folders, documents or a recommender (``cli``): the gate after an upgrade."""
