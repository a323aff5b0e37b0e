"""Ladder stepping as a pure function: which concurrency to measure next, given the figures so far.

``next_step(previous, config)`` walks the configured rungs in order. With ``plateau_stop`` it stops early
once throughput has plateaued: the gain per doubling of concurrency,
``(T_b / T_a) ** (1 / log2(b / a)) - 1`` between successive valid rungs a < b, stayed below
``plateau_min_gain`` for ``plateau_patience`` consecutive pairs. With ``refine`` it then measures, up to
``refine_steps`` times, the midpoint between the last rung that still gained and the first that did not
(the knee), when that midpoint is a new integer concurrency. Invalid steps never count as a plateau.

With ``extend``, once every listed rung is measured (and ``plateau_stop`` has not ended the walk), it keeps
doubling past the highest rung measured (top*2, top*4, ...) for as long as ``extension_stop`` finds the
newest rung still worth it, never above ``max_concurrency``; refinement, if asked for, comes after.
``extension_stop`` returns why the extension ends, as a short sentence for the progress line and the logs.

A doubling counts as flat only where its gain is *significantly* below the threshold (the gain's interval,
from the two rungs' throughput intervals, lies below it: ``core.statistics.doubling_decision``, the rule the
recommender's answer uses); a gain whose interval straddles the threshold is not a plateau, so the walk goes
on rather than stop below the truth on noise. Without intervals the point gain decides.
"""

from __future__ import annotations

from collections.abc import Sequence

from satbench.core.figures import StepFigures
from satbench.core.statistics import doubling_decision, gain_interval, gain_per_doubling
from satbench.loadgen.config import LadderConfig, LoadgenConfig

__all__ = ["extension_stop", "next_step", "plateau_pair"]


def _valid_sorted(previous: Sequence[StepFigures]) -> list[StepFigures]:
    return sorted((f for f in previous if f.valid), key=lambda f: f.concurrency)


def _flat(a: StepFigures, b: StepFigures, min_gain: float) -> tuple[bool, float]:
    """Is the doubling from ``a`` to ``b`` a plateau (significantly below ``min_gain``)? And its point gain."""
    gain = gain_per_doubling(a.concurrency, a.throughput_tok_s, b.concurrency, b.throughput_tok_s)
    interval = gain_interval(a.concurrency, a.throughput_ci_tok_s, b.concurrency, b.throughput_ci_tok_s)
    return doubling_decision(gain, interval, min_gain) == "plateau", gain


def plateau_pair(previous: Sequence[StepFigures], ladder: LadderConfig) -> tuple[int, int] | None:
    """The (last gaining, first flat) rungs once ``plateau_patience`` successive pairs gained too little."""
    steps = _valid_sorted(previous)
    flat = 0
    for i in range(1, len(steps)):
        a, b = steps[i - 1], steps[i]
        if b.concurrency <= a.concurrency:
            continue
        if _flat(a, b, ladder.plateau_min_gain)[0]:
            flat += 1
            if flat >= ladder.plateau_patience:
                knee = i - ladder.plateau_patience
                return steps[knee].concurrency, steps[knee + 1].concurrency
        else:
            flat = 0
    return None


def _pct(ratio: float) -> str:
    return f"{ratio * 100:.1f}".rstrip("0").rstrip(".") + "%"


def _secs(value: float) -> str:
    return f"{value:.3g} s"


def extension_stop(previous: Sequence[StepFigures], ladder: LadderConfig) -> str | None:
    """Why the walk should not measure one more doubling past the newest rung, or ``None`` when it should.

    The newest rung is the highest concurrency measured. In order: it is invalid; its error ratio, TTFT p95,
    share of requests past their own TTFT deadline or ITL p95 broke ``extend_max_error_ratio``,
    ``extend_ttft_p95_s``, ``extend_ttft_late_share`` or ``extend_itl_p95_s`` (an unknown figure is not a
    breach); its throughput gained significantly less than ``extend_min_gain`` per doubling
    over the highest valid rung below it (no such rung: nothing to compare, not a stop); its doubling would pass
    ``max_concurrency``. It does not look at ``ladder.extend`` or at which listed rungs are still to come:
    ``next_step`` decides when to ask.
    """
    if not previous:
        return None
    newest = max(previous, key=lambda f: f.concurrency)
    c = newest.concurrency
    if not newest.valid:
        return f"rung c={c} invalid" + (f": {newest.reason}" if newest.reason else "")
    if newest.error_ratio > ladder.extend_max_error_ratio:
        return f"errors {_pct(newest.error_ratio)} above {_pct(ladder.extend_max_error_ratio)}"
    ttft, itl = newest.ttft_s.p95, newest.itl_s.p95
    if ladder.extend_ttft_p95_s is not None and ttft is not None and ttft > ladder.extend_ttft_p95_s:
        return f"TTFT p95 {_secs(ttft)} above {_secs(ladder.extend_ttft_p95_s)}"
    late, judged = ladder.extend_ttft_late_share, newest.judged_requests
    if late is not None and judged and newest.objective_misses.get("ttft", 0) / judged > late:
        return (f"{newest.objective_misses['ttft']} of {judged} requests past their own TTFT deadline, more than "
                f"{_pct(late)}")
    if ladder.extend_itl_p95_s is not None and itl is not None and itl > ladder.extend_itl_p95_s:
        return f"ITL p95 {_secs(itl)} above {_secs(ladder.extend_itl_p95_s)}"
    below = [f for f in previous if f.valid and f.concurrency < c]
    if below:
        prev = max(below, key=lambda f: f.concurrency)
        flat, gain = _flat(prev, newest, ladder.extend_min_gain)
        if flat:
            return f"throughput gained {_pct(gain)} per doubling, less than {_pct(ladder.extend_min_gain)}"
    if c >= ladder.max_concurrency:
        return f"reached ladder.max_concurrency {ladder.max_concurrency}"
    if c * 2 > ladder.max_concurrency:
        return f"next doubling c={c * 2} above ladder.max_concurrency {ladder.max_concurrency}"
    return None


def _extension_rungs(ladder: LadderConfig) -> set[int]:
    rungs, c = set(), max(ladder.concurrency) * 2
    while c <= ladder.max_concurrency:
        rungs.add(c)
        c *= 2
    return rungs


def next_step(previous: Sequence[StepFigures], config: LoadgenConfig | LadderConfig) -> int | None:
    """The next concurrency to measure, or ``None`` when the walk is over."""
    ladder = config.ladder if isinstance(config, LoadgenConfig) else config
    done = {f.concurrency for f in previous}
    # Refined rungs: neither listed nor doublings of the top one. Once one is measured the extension is over
    # (it would otherwise compare its newest rung with the midpoint just below it and start again).
    refined = len(done - set(ladder.concurrency) - _extension_rungs(ladder))
    pair = plateau_pair(previous, ladder) if (ladder.plateau_stop or ladder.refine) else None
    if not (ladder.plateau_stop and pair is not None):
        for c in ladder.concurrency:
            if c not in done:
                return c
        if ladder.extend and not refined and extension_stop(previous, ladder) is None:
            return max(done) * 2
    if not ladder.refine or pair is None:
        return None
    if refined >= ladder.refine_steps:
        return None
    lo, hi = pair
    mid = (lo + hi) // 2
    if mid in done or mid <= lo or mid >= hi:
        return None
    return mid
