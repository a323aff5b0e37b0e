"""The ITL p95's interval: a quantile of values that come in clumps over time, and the step figures that carry it.

``clustered_quantile_interval`` states the interval of a quantile of values that come in clumps over time, such as
a window's per-token gaps: every user decoding in one engine step waits that step's time, so one prefill
lengthens a gap in every stream at once, and the thousands of gaps hold as many independent pieces as the
window holds such events, not thousands. Woodruff's method (Woodruff 1952; the survey statistician's
quantile interval under clustered sampling, Francisco and Fuller 1991): the share of values at or below the
point quantile is a ratio estimate whose standard error comes from batch means over ``bins`` equal spans of
time (the AR(1) correction of ``batch_mean_estimate`` over them, so clumps longer than a span count too),
never below the standard error of independent values; the quantile's interval is the values' quantiles at
that share plus and minus its half-width. ``None`` with fewer than five spans' worth of values
(``min_per_bin`` a span) or fewer than five spans holding any.

``itl_interval_figures`` puts each per-token gap in time at its end and publishes the p95's interval at
``ITL_CONFIDENCE`` with its degrees of freedom (``itl_p95_low_s``, ``itl_p95_high_s``, ``itl_p95_dof``); the
recommender rebuilds it at its own confidence (``answer.itl_judge``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from satbench.core.statistics import batch_mean_estimate, quantile, t_quantile

__all__ = ["ITL_CONFIDENCE", "QUANTILE_BINS", "QuantileInterval", "clustered_quantile_interval",
           "itl_interval_figures"]

ITL_CONFIDENCE = 0.95  # the level the ITL p95's interval is published at (the recommender rebuilds its own)
QUANTILE_BINS = 20  # spans of a window a quantile's share is batched over (10 to 30 batches: Schmeiser 1982)


@dataclass(frozen=True, slots=True)
class QuantileInterval:
    """A quantile's point, its interval at ``confidence`` and the degrees of freedom of the share's batch means
    (``clustered_quantile_interval``); ``at`` rebuilds the interval at another confidence."""

    point: float
    low: float
    high: float
    dof: float
    confidence: float

    def at(self, confidence: float) -> tuple[float, float]:
        """The interval at ``confidence``: each side's width scaled by the ratio of the Student quantiles (the
        values' quantile function taken as straight across the interval, Woodruff's own first-order step)."""
        if confidence == self.confidence:
            return self.low, self.high
        scale = t_quantile(confidence, self.dof) / t_quantile(self.confidence, self.dof)
        return self.point - (self.point - self.low) * scale, self.point + (self.high - self.point) * scale


def clustered_quantile_interval(timed: Sequence[tuple[float, float]], q: float, start: float, end: float,
                                confidence: float = 0.95, bins: int = QUANTILE_BINS,
                                min_per_bin: int = 5) -> QuantileInterval | None:
    """The ``q`` quantile of the values of ``timed`` (each a time and a value) over ``[start, end]`` with its
    interval from batch means over time (module docstring); ``None`` where there are too few."""
    mine = [(t, v) for t, v in timed if start <= t <= end and math.isfinite(v)]
    n = len(mine)
    if n < bins * min_per_bin or end <= start or not 0 < q < 1:
        return None
    ordered = sorted(v for _, v in mine)
    point = quantile(ordered, q)
    assert point is not None
    width = (end - start) / bins
    counts, below = [0] * bins, [0] * bins
    for t, v in mine:
        i = min(bins - 1, int((t - start) / width))
        counts[i] += 1
        below[i] += v <= point
    if sum(1 for c in counts if c) < 5:
        return None
    share = sum(below) / n
    per_bin = n / bins
    estimate = batch_mean_estimate([(b - share * c) / per_bin for b, c in zip(below, counts, strict=True)])
    if estimate is None:
        return None
    se = max(estimate.se, math.sqrt(q * (1 - q) / n))
    half = t_quantile(confidence, estimate.dof) * se
    low = quantile(ordered, max(0.0, q - half))
    high = quantile(ordered, min(1.0, q + half))
    assert low is not None and high is not None
    return QuantileInterval(point, low, high, estimate.dof, confidence)


def itl_interval_figures(window_gaps: Sequence[tuple[float, float]], start: float, end: float) -> dict[str, Any]:
    """The ITL p95's interval at ``ITL_CONFIDENCE`` over the window's gaps (each a start and an end), placed in
    time at their ends, as step figures (module docstring)."""
    est = clustered_quantile_interval([(b, b - a) for a, b in window_gaps], 0.95, start, end, ITL_CONFIDENCE)
    if est is None:
        return {"itl_p95_low_s": None, "itl_p95_high_s": None, "itl_p95_dof": None}
    return {"itl_p95_low_s": est.low, "itl_p95_high_s": est.high, "itl_p95_dof": est.dof}
