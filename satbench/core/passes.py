"""A trace rung's attainment, read pass against pass (``paired_attainment``): a recorded schedule replayed in
whole passes (``loadgen.trace_step``) varies about the long run of the same schedule by the engine's noise and
the state a pass inherits, never by the schedule itself, and two passes of it show that directly. The
stationary rate rung's estimate is ``core.attainment.attainment_estimate``; both give a
``core.attainment.AttainmentEstimate``, which the figures carry and ``rate_verdict`` judges alike.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from satbench.core.attainment import PER_BIN, AttainmentEstimate
from satbench.core.backlog import backlog_counter
from satbench.core.statistics import batch_mean_estimate, poisson_upper, t_quantile

__all__ = ["PAIRED_BINS", "PAIR_S", "SNAP_S", "paired_attainment"]

PAIRED_BINS = 32
SNAP_S = 1e-6  # a request this near a pass's boundary is of the pass it opens (a clock's rounding, not a moment)
PAIR_S = 5e-6  # two passes' requests this near the same moment of the schedule are one request replayed


def paired_attainment(outcomes: Sequence[tuple[float, bool]], earlier: Sequence[tuple[float, bool]],
                      start: float, end: float, period: float,
                      times: Sequence[tuple[float, float]] = ()) -> AttainmentEstimate | None:
    """The attainment of a schedule replayed in whole passes (a trace rung, ``loadgen.trace_step``: its window
    ``[start, end]`` is whole passes of ``period`` seconds after at least one of warm-up), its interval read
    pass against pass: ``outcomes`` are the window's requests (intended send time, attained), ``earlier`` those
    of the pass before it, ``times`` every request's (intended send, end; ``inf`` without one), for the
    backlog. ``None`` where there is no earlier pass, the window is not whole passes, or fewer than five bins'
    differences are read.

    What a trace rung's share is meant to estimate is the long run of the *same* schedule sent again and again
    (``testkit.accuracy.truth``'s factor truth, the operator's "traffic like this"), so the schedule is no
    source of error: only the engine's noise and the state each pass inherits are. The stationary estimate
    (``attainment_estimate``) reads the waits' swings over the window as noise, and on a recorded schedule they
    are mostly the schedule itself (a burst's queue comes round every pass): its intervals held the long-run
    share of 99.8 % of the datasheet's trace rungs, and a factor interval drawn from them settled 1 of 188
    answers. Two passes of one schedule differ by the noise alone once they are *coupled*: request j of one
    pass and request j of the next are sent at the same moment of it, and from a moment at which both passes
    hold the same backlog (a queue's future is its backlog and its arrivals; Lindley's recursion couples two
    copies fed the same arrivals once both are empty) their outcomes differ only as the engine's noise makes
    them. Before it, the pass before the window differs by what it began from (the warm-up's idle start, which
    the long run never has): that difference is no noise of the window's. So the passes are paired from the
    first moment of the schedule at which the window's first pass held no more backlog than the pass before
    it; binned there by the moment of the schedule (``PAIRED_BINS`` bins a pass at most, about ``PER_BIN``
    requests a bin), each pass's hits less its share of the paired part times the bin's count, the
    differences of consecutive passes bin by bin are one series in time order. Their batch-means variance
    (``core.statistics.batch_mean_estimate``, its AR(1) correction for a queue's memory across bins) is twice
    a pass's, per bin; a whole pass of ``B`` bins has ``B`` times it, so the window's share over ``k`` passes
    has the standard error ``sqrt(k B v / 2) / n`` (``v`` the variance of one bin's difference, ``n`` requests
    judged), widened by the Student quantile of the series' degrees of freedom over the normal one (the
    interval is built at the normal quantile; a few bins' variance is itself uncertain).

    Where the passes never couple (the window's first pass carries more backlog than the pass before all
    through), the node does not forget within a pass: the backlog may be growing pass to pass (then the long
    run lies lower still) or the idle start's advantage lasts the whole pass, which two passes cannot tell
    apart. Then every bin pairs, and a window that attained less than the pass before has that shift taken as
    one more standard error of its own size, root-sum-square (an allowance for a systematic error of unknown
    size, conservative where the idle start is all it was).

    A schedule whose outcomes barely vary between passes (a quiet engine) pairs with few or no requests that
    differ, and a variance read from few differences is no bound: the pass's variance is at least half
    Garwood's one-sided 95 % upper limit (``core.statistics.poisson_upper``: 3 where none differ, the rule of
    three) of the number of paired requests that attained in one pass and not the other (each such pair adds
    one to the squared difference of the totals), scaled to the whole pass where only part of it paired. The
    effective count is ``p (1 - p) / se^2``, more than ``n`` where the outcomes vary less than coin flips would
    (Wilson's ``n`` where the share is 0 or 1), so ``AttainmentEstimate.interval`` is the hull of Wilson's score
    interval at that count and ``p +- z se``."""
    passes = round((end - start) / period) if period > 0 else 0
    if passes < 1 or abs(end - start - passes * period) > 1e-6 * period + 1e-9:
        return None
    base = start - period
    # each request's pass and its moment in the schedule (s); a clock's rounding (1e-7 s at a wall time) never
    # moves a request sent on a pass's boundary into the pass before
    rows = [(0, t - base, ok) for t, ok in earlier if base - SNAP_S <= t < start - SNAP_S]
    for t, ok in outcomes:
        if start - SNAP_S <= t <= end + SNAP_S:
            m = min(passes, max(1, math.floor((t - base + SNAP_S) / period)))
            rows.append((m, t - base - m * period, ok))
    mine = [ok for m, _, ok in rows if m > 0]
    judged, attained = len(mine), sum(mine)
    if judged == 0 or len(rows) == judged:
        return None
    bins = max(2, min(PAIRED_BINS, int(judged / passes / PER_BIN)))
    coupled = _coupling(times, base, period, bins)
    first = bins if coupled is None else coupled
    if bins - first < 5:  # too little of the pass paired: all of it, with the shift's allowance
        first = 0
    hits = [[0] * bins for _ in range(passes + 1)]
    counts = [[0] * bins for _ in range(passes + 1)]
    for m, phase, ok in rows:
        b = min(bins - 1, max(0, int(phase / period * bins)))
        hits[m][b] += ok
        counts[m][b] += 1
    discordant = _discordant(rows, passes, first / bins * period)
    shares = [sum(h[first:]) / sum(c[first:]) if sum(c[first:]) else 0.0 for h, c in zip(hits, counts, strict=True)]
    residual = [[h - s * c for h, c in zip(hs, cs, strict=True)] for hs, cs, s in zip(hits, counts, shares,
                                                                                      strict=True)]
    series = [residual[m][b] - residual[m - 1][b] for m in range(1, passes + 1) for b in range(first, bins)]
    estimate = batch_mean_estimate(series)
    if estimate is None:
        return None
    # at least what the pairs that differed show, the paired part's count scaled to the whole pass
    noise = math.sqrt(poisson_upper(discordant) * bins / (bins - first) / 2.0) / judged
    if estimate.se > 0:
        variance = estimate.se * estimate.se * len(series)  # of one bin's difference
        widen = t_quantile(0.95, max(1.0, estimate.dof)) / t_quantile(0.95, math.inf)
        noise = max(noise, math.sqrt(passes * bins * variance / 2.0) / judged * widen)
    share = attained / judged
    # the shift is no error where the passes are paired from their meeting on (or met from the start)
    shift = 0.0 if first > 0 or coupled == 0 else min(0.0, share - sum(hits[0]) / max(1, sum(counts[0])))
    se = math.sqrt(noise * noise + shift * shift)
    effective = share * (1 - share) / (se * se) if se > 0 and 0 < share < 1 else float(judged)
    return AttainmentEstimate(attained, judged, se, max(1.0, effective - 1.0))


def _discordant(rows: Sequence[tuple[int, float, bool]], passes: int, from_s: float) -> float:
    """How many requests attained in one pass and not in the pass before (or the other way round), from
    ``from_s`` into the schedule on: each row ``(pass, moment in the schedule, attained)``, request j of a pass
    paired with the request sent at the same moment (within ``PAIR_S``) of the pass before. Requests sent at the
    same moment cannot be told apart: such a group counts the difference of its attained requests, at least.
    A request without its partner (a pass lacking it) pairs with nothing."""
    total = 0.0
    for m in range(1, passes + 1):
        moments = sorted((phase, m2 == m, ok) for m2, phase, ok in rows if m2 in (m - 1, m) and phase >= from_s)
        group: list[tuple[bool, bool]] = []
        last = -math.inf
        for phase, later, ok in [*moments, (math.inf, False, False)]:
            if phase - last > PAIR_S and group:
                before = [o for late, o in group if not late]
                after = [o for late, o in group if late]
                if before and after:
                    total += abs(sum(after) - sum(before))
                group = []
            group.append((later, ok))
            last = phase
    return total


def _coupling(times: Sequence[tuple[float, float]], base: float, period: float, bins: int) -> int | None:
    """The first bin edge of the schedule at which the window's first pass (from ``base + period``) held no
    more backlog than the pass before it (from ``base``), ``None`` where it never did or nothing tells."""
    if not times:
        return None
    backlog = backlog_counter(times)
    for b in range(bins):
        at = base + period * b / bins
        if backlog(at + period) <= backlog(at):
            return b
    return None
