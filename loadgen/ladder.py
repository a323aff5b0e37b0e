"""Ladder stepping as a pure function: which concurrency to measure next, given the figures so far.

``next_step(previous, config)`` walks the configured rungs in order. With ``plateau_stop`` it stops early
once throughput has plateaued: the gain per doubling of concurrency,
``(T_b / T_a) ** (1 / log2(b / a)) - 1`` between successive valid rungs a < b, stayed below
``plateau_min_gain`` for ``plateau_patience`` consecutive pairs. With ``refine`` it then measures, up to
``refine_steps`` times, the midpoint between the last rung that still gained and the first that did not
(the knee), when that midpoint is a new integer concurrency. Invalid steps never count as a plateau.
"""

from __future__ import annotations

from collections.abc import Sequence

from core.figures import StepFigures
from core.statistics import gain_per_doubling
from loadgen.config import LadderConfig, LoadgenConfig

__all__ = ["next_step", "plateau_pair"]


def _valid_sorted(previous: Sequence[StepFigures]) -> list[StepFigures]:
    return sorted((f for f in previous if f.valid), key=lambda f: f.concurrency)


def plateau_pair(previous: Sequence[StepFigures], ladder: LadderConfig) -> tuple[int, int] | None:
    """The (last gaining, first flat) rungs once ``plateau_patience`` successive pairs gained too little."""
    steps = _valid_sorted(previous)
    flat = 0
    for i in range(1, len(steps)):
        a, b = steps[i - 1], steps[i]
        if b.concurrency <= a.concurrency:
            continue
        gain = gain_per_doubling(a.concurrency, a.throughput_tok_s, b.concurrency, b.throughput_tok_s)
        if gain < ladder.plateau_min_gain:
            flat += 1
            if flat >= ladder.plateau_patience:
                knee = i - ladder.plateau_patience
                return steps[knee].concurrency, steps[knee + 1].concurrency
        else:
            flat = 0
    return None


def next_step(previous: Sequence[StepFigures], config: LoadgenConfig | LadderConfig) -> int | None:
    """The next concurrency to measure, or ``None`` when the walk is over."""
    ladder = config.ladder if isinstance(config, LoadgenConfig) else config
    done = {f.concurrency for f in previous}
    pair = plateau_pair(previous, ladder) if (ladder.plateau_stop or ladder.refine) else None
    if not (ladder.plateau_stop and pair is not None):
        for c in ladder.concurrency:
            if c not in done:
                return c
    if not ladder.refine or pair is None:
        return None
    refined = len(done - set(ladder.concurrency))
    if refined >= ladder.refine_steps:
        return None
    lo, hi = pair
    mid = (lo + hi) // 2
    if mid in done or mid <= lo or mid >= hi:
        return None
    return mid
