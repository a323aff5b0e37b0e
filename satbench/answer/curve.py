"""The throughput curve of one lane and where it bends.

Two questions are asked of the curve (concurrency c -> output tokens per second T):

* **Gain per doubling** (``core.statistics.gain_per_doubling``). Between rungs c1 < c2, the relative gain
  normalised to one doubling of concurrency is ``(T2/T1) ** (1 / log2(c2/c1)) - 1``, so ladders with
  uneven spacing (1, 2, 3, 4, 8) are judged on the same scale. A rung "still gains enough" when this
  reaches the policy's ``min_gain_per_doubling``.
* **The knee.** Kneedle (Satopää et al., 2011) on ``x = log2(c)``: the measured throughputs are first made
  monotone non-decreasing by isotonic regression (``scipy.optimize.isotonic_regression``, pool adjacent
  violators), so one noisy dip cannot create a false knee; both axes are normalised to [0, 1]; the knee is
  the rung maximising the difference between the normalised curve and the diagonal. A curve with no
  positive difference (straight or convex on the log axis: it never bends) has no knee. The method has no
  tuning constant: Kneedle's sensitivity ``S`` is only needed for online detection, which this is not.

``saturation_rung`` applies the gain rule to the monotone fit: the first rung after which a doubling no
longer buys ``min_gain_per_doubling``; ``None`` when the ladder ended while throughput still grew.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from satbench.core.statistics import gain_per_doubling

__all__ = ["CurvePoint", "Knee", "kneedle", "monotone_fit", "saturation_rung"]


@dataclass(frozen=True, slots=True)
class CurvePoint:
    concurrency: int
    throughput_tok_s: float


@dataclass(frozen=True, slots=True)
class Knee:
    concurrency: int
    difference: float
    method: str = "kneedle_isotonic_log2"


def monotone_fit(points: Sequence[CurvePoint]) -> list[float]:
    """Throughputs made non-decreasing in concurrency (isotonic regression, pool adjacent violators)."""
    if not points:
        return []
    ys = np.asarray([p.throughput_tok_s for p in points], dtype=float)
    from scipy.optimize import isotonic_regression  # here: scipy costs every command's start

    return [float(v) for v in isotonic_regression(ys, increasing=True).x]


def kneedle(points: Sequence[CurvePoint]) -> Knee | None:
    """The knee of a concave-increasing throughput curve on a log2(concurrency) axis, or ``None``."""
    pts = sorted(points, key=lambda p: p.concurrency)
    if len(pts) < 3:
        return None
    xs = np.log2(np.asarray([p.concurrency for p in pts], dtype=float))
    ys = np.asarray(monotone_fit(pts))
    x_span, y_span = xs[-1] - xs[0], ys[-1] - ys[0]
    if x_span <= 0 or y_span <= 0:
        return None
    diff = (ys - ys[0]) / y_span - (xs - xs[0]) / x_span
    best = int(np.argmax(diff))
    if diff[best] <= 0:
        return None
    return Knee(concurrency=pts[best].concurrency, difference=float(diff[best]))


def saturation_rung(points: Sequence[CurvePoint], min_gain_per_doubling: float) -> int | None:
    """First rung of the monotone fit whose next doubling gains less than the policy asks, else ``None``."""
    pts = sorted(points, key=lambda p: p.concurrency)
    fit = monotone_fit(pts)
    for i in range(len(pts) - 1):
        gain = gain_per_doubling(pts[i].concurrency, fit[i], pts[i + 1].concurrency, fit[i + 1])
        if gain < min_gain_per_doubling:
            return pts[i].concurrency
    return None
