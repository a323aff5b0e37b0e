"""Confidence in a step's throughput, by the method of batch means.

A step window is cut into ``n`` equal batches; each batch's throughput is one observation. Consecutive
batches of a closed loop are nearly independent when a batch is long against a request, so the Student-t
interval over the batch means is an honest interval for the window's mean throughput.

Two rungs "cannot be told apart" when the interval of the *difference* of their means contains zero. With
half-widths ``h_a`` and ``h_b`` at the same confidence, that interval's half-width is
``sqrt(h_a**2 + h_b**2)`` (independent estimates: variances add; the Student quantiles of the two intervals
are taken as equal, which errs on the wide side for the one with more batches). This is less conservative
than asking the two intervals not to overlap (which needs a gap of ``h_a + h_b``) and is the usual
two-sample comparison. The analysis then prefers the smaller rung and says so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from scipy import stats

__all__ = ["batch_means_ci", "indistinguishable", "intervals_overlap", "relative_half_width"]


def batch_means_ci(batch_values: Sequence[float], confidence: float) -> tuple[float, float] | None:
    """Student-t interval of the mean of ``batch_values``; ``None`` with fewer than 2 batches."""
    values = [float(v) for v in batch_values if math.isfinite(v)]
    n = len(values)
    if n < 2:
        return None
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    mean = sum(values) / n
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    half = float(stats.t.ppf(0.5 + confidence / 2, n - 1)) * math.sqrt(var / n)
    return (mean - half, mean + half)


def relative_half_width(ci: tuple[float, float], mean: float) -> float:
    """Half-width of ``ci`` over ``mean`` (infinite when the mean is not positive)."""
    if mean <= 0:
        return math.inf
    return (ci[1] - ci[0]) / 2 / mean


def intervals_overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


def indistinguishable(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """True when the interval of the difference of the two means (see module docstring) contains zero."""
    mean_a, mean_b = (a[0] + a[1]) / 2, (b[0] + b[1]) / 2
    half = math.hypot((a[1] - a[0]) / 2, (b[1] - b[0]) / 2)
    return abs(mean_b - mean_a) <= half
