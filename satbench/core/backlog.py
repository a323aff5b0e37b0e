"""The backlog of an open-loop rung (requests meant to be sent by an instant and not ended by it) and whether
it grows: over the window (``backlog_growth``, a stationary rate rung) or from one pass of a replayed schedule
to the next (``pass_growth``, a trace rung). ``core.attainment.rate_verdict`` judges either by one rule; the
pass-paired attainment (``core.passes``) reads where two passes meet from the same count.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence

from satbench.core.statistics import MeanEstimate

__all__ = ["BACKLOG_SAMPLES", "PASS_SAMPLES", "backlog_counter", "backlog_growth", "pass_growth"]

BACKLOG_SAMPLES = 64
PASS_SAMPLES = 32


def backlog_counter(times: Sequence[tuple[float, float]]) -> Callable[[float], int]:
    """The backlog at any instant, from each request's ``(intended send, end)`` (``inf``: not ended)."""
    sends = sorted(t for t, _ in times)
    ends = sorted(e for _, e in times)

    def backlog(t: float) -> int:
        return bisect.bisect_right(sends, t) - bisect.bisect_right(ends, t)

    return backlog


def backlog_growth(times: Sequence[tuple[float, float]], start: float, end: float) -> MeanEstimate | None:
    """How fast the backlog (requests meant to be sent by t and not ended by t) grew over ``[start, end]``, per
    second, as ``MeanEstimate(slope, se, dof)``, from each request's ``(intended send, end)`` (``inf``: not
    ended). The slope is the least-squares line through the backlog sampled at 64 points; ``se`` is sqrt(2)
    times the residuals' standard deviation over the window's length: the spread of the change between two
    instants of a queue that is stable (its level wanders and comes back; arrival noise does not accumulate),
    so a slope whose interval lies above zero is growth no stable queue shows. An overloaded queue grows by
    the excess rate, a line far above its wander within a few seconds. ``None`` without a request."""
    length = end - start
    if not times or length <= 0:
        return None
    backlog = backlog_counter(times)
    xs = [start + length * i / (BACKLOG_SAMPLES - 1) for i in range(BACKLOG_SAMPLES)]
    ys = [backlog(t) for t in xs]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    residual = math.sqrt(sum((y - my - slope * (x - mx)) ** 2 for x, y in zip(xs, ys, strict=True))
                         / (len(xs) - 2))
    return MeanEstimate(slope, max(math.sqrt(2.0) * residual, 0.5) / length, float(len(xs) - 2))


def pass_growth(times: Sequence[tuple[float, float]], start: float, end: float,
                period: float) -> MeanEstimate | None:
    """How fast the backlog grew from one pass to the next of a schedule replayed in whole passes (a trace
    rung, ``loadgen.trace_step``: its window ``[start, end]`` is whole passes of ``period`` seconds after at
    least one whole pass of warm-up), per second, from each request's ``(intended send, end)`` (``inf``: not
    ended). ``None`` without a request, or where the window is shorter than a pass.

    A recorded schedule is not stationary: a trace that ramps up holds more requests in flight at its end
    than at its start on any server, an ideal one too (Little's law: in flight = rate x latency), so the
    backlog's slope over the window (``backlog_growth``) reads a rising rate as a growing queue. What the
    schedule itself implies is that at the same moment of two passes the backlog is the same where the node
    keeps up: the sends are the same, and what one pass began from (the warm-up's idle start, or the last
    pass's end) has relaxed by the next pass's end. A node that does not keep up carries more from each pass
    into the next, and the difference does not relax. So the figure is ``D(t) = B(t) - B(t - period)``, the
    backlog against itself one pass earlier, averaged over the last pass's second half (32 instants) and
    divided by the period: the carry-over's growth per pass, in requests/s like ``backlog_growth``'s slope,
    so ``rate_verdict`` judges it by the same rule (significant, and more than a tenth of the rate: that is,
    the backlog grows each pass by more than a tenth of a pass's requests). Its standard error is the spread of
    ``D`` over those instants (at least half a request) over the period: the wander of a backlog against its
    own earlier pass, which is all a node that keeps up shows there."""
    if not times or period <= 0 or end - start < period * (1 - 1e-9):
        return None
    backlog = backlog_counter(times)
    xs = [end - period / 2 + period / 2 * i / (PASS_SAMPLES - 1) for i in range(PASS_SAMPLES)]
    ds = [backlog(t) - backlog(t - period) for t in xs]
    mean = sum(ds) / len(ds)
    spread = math.sqrt(sum((d - mean) ** 2 for d in ds) / (len(ds) - 1))
    return MeanEstimate(mean / period, max(spread, 0.5) / period, float(len(ds) - 1))
