"""``satbench plan``: how many nodes of each kind meet a target load (requests/s or concurrent users) within the
objectives, read from the fleet's answers at the conservative end of their intervals (``answers``), counted by
first-principles arithmetic (``planner``), printed by the command (``cli``)."""
