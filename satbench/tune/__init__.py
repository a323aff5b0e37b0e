"""``satbench tune``: find each lane's server settings (slots, batch, micro-batch, context, KV layout), not only
its concurrency. ``config`` (the ``[tune]`` table), ``grid`` (candidates, their walk order and their rank),
``context`` (each slot's context from the server's own count), ``memory`` (what a candidate needs, from the
GGUF, against a budget), ``search`` (the pruned walk over the grid, pure), ``answer`` (the pairwise winner,
runner-up, margin, Pareto front), ``evidence`` (longer walks where the deciding comparison is undecided),
``readback`` (what a started server built, against the candidate), ``models`` (``tune.json``'s one shape and
``read_tune``, its edge), ``document`` (``tune.json`` built as those models, and ``tuned_block``), ``walk``
(one candidate: check, start, read back, ladder walk, judge), ``render`` (tables, SVG), ``run`` and ``cli``.
See docs/tune.md.
"""

from __future__ import annotations

from satbench.tune.document import tuned_block
from satbench.tune.models import TuneDocument, read_tune

__all__ = ["TuneDocument", "read_tune", "tuned_block"]
