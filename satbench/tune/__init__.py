"""``satbench tune``: find each lane's server settings (slots, batch, micro-batch, context), not only its
concurrency. ``config`` (the ``[tune]`` table), ``grid`` (candidates and their order), ``search`` (the pruned
walk over the grid, pure), ``answer`` (winner, runner-up, margin, Pareto front), ``document`` (``tune.json``
and ``tuned_lane``), ``walk`` (one candidate: start, ladder walk, judge), ``render`` (tables, SVG), ``run``
and ``cli``. See docs/tune.md.
"""

from __future__ import annotations

from satbench.tune.document import tuned_lane

__all__ = ["tuned_lane"]
