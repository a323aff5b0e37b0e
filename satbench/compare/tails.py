"""Latency tails compared: how many requests of each side lie above a limit, exactly or within bounds, the test
of that count, its power, and an interval for the ratio of two p95s.

A document keeps 16 values of each tail a rung (``core.figures.TAIL_SIZE``); above about 320 requests a rung
more than 16 lie above the p95, and a count read from those 16 is "at least 16". Reading that as 16 made a
+146 % TTFT p95 "16 of 404 against 16 of 418, not significant". So a side's count above a limit is a pair
``(at least, at most)``:

- from every value (a run folder's records, ``satbench.compare.runs``): exact;
- from a document's summary, its ``Tail`` and its quantiles ``(p50, p95, p99)`` over ``n`` requests: the tail
  count where it is exact; otherwise at least the tail's count and, for each quantile ``Q(q) > L``, at least
  ``n - ceil((n - 1) q)`` (quantiles interpolate linearly between order statistics, so every value from rank
  ``ceil((n - 1) q)`` on exceeds ``L``), and at most ``n - 1 - floor((n - 1) q)`` for each ``Q(q) <= L``.

The regression test (Fisher's exact test, one-sided, ``core.statistics.exceedances_differ``) takes B's count
at its least and A's at its most: its p-value is then at least the exact one's, so a change it calls
significant is significant (the bound honoured), and with every value it is the exact test. From documents
alone a scaled tail hides above the 16 kept values of B, but B's p95 then lies inside A's kept tail, where
A's count above it is exact: the test is also made the other way round (A's share above B's p95 against B's
own, at least its values ranked above its p95, values being distinct), and the smaller p-value, doubled
(Bonferroni over the two), is the test's.

Power: B's p95 at A's p90 (twice A's share above A's p95, 5 % -> 10 %) is the regression a tail test must
see; ``tail_power`` is the normal approximation of the one-sided two-proportion test at the family's level,
distribution-free (it depends on the shares, not on the latency's shape), so a verdict can say what it could
have found at its own sample sizes. ``bench/compare_power.py`` measures it by simulation beside this figure.

The interval of ``p95_B / p95_A`` (``ratio_interval``): each p95's distribution-free interval from order
statistics (the binomial ranks around ``(n - 1) q``; Conover, *Practical Nonparametric Statistics*, 3.2),
combined on the log scale in quadrature: available where both sides kept every value (or the ranks lie in
the kept tail), else ``None`` and the verdict says so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from satbench.core.figures import Quantiles, Tail
from satbench.core.statistics import exceedances_differ, quantile

__all__ = ["Count", "TailSide", "exceedance_test", "quantile_interval", "ratio_interval", "tail_power"]

QUANTILE_POINTS = (0.50, 0.95, 0.99)


@dataclass(frozen=True, slots=True)
class Count:
    """Requests above a limit: at least ``low``, at most ``high`` (equal: exact), of ``n``."""

    low: int
    high: int
    n: int

    @property
    def exact(self) -> bool:
        return self.low == self.high

    def __str__(self) -> str:
        return f"{self.low} of {self.n}" if self.exact else f"{self.low}-{self.high} of {self.n}"

    def __add__(self, other: Count) -> Count:
        return Count(self.low + other.low, self.high + other.high, self.n + other.n)


def _summary_count(tail: Tail, q: Quantiles, limit: float) -> Count:
    kept, exact = tail.above(limit)
    n = tail.n
    if exact:
        return Count(kept, kept, n)
    low, high = kept, n
    for point, value in zip(QUANTILE_POINTS, (q.p50, q.p95, q.p99), strict=True):
        if value is None or n < 2:
            continue
        rank = (n - 1) * point
        if value > limit:
            low = max(low, n - math.ceil(rank))
        elif value == limit:  # the side's own quantile: every value ranked above it exceeds (values distinct)
            low = max(low, n - 2 - math.floor(rank))
        if value <= limit:
            high = min(high, n - 1 - math.floor(rank))
    return Count(low, max(low, high), n)


@dataclass(frozen=True, slots=True)
class TailSide:
    """One side's per-request figure at one rung, over one or more runs (pooled): every value, descending, where
    each run gave its records, else each run's ``(Tail, Quantiles)`` summary."""

    values: tuple[float, ...] | None
    summaries: tuple[tuple[Tail, Quantiles], ...] = ()

    @classmethod
    def pooled(cls, parts: Sequence[tuple[Tail, Quantiles]]) -> TailSide:
        """The runs' tails as one side: every value where every tail kept every value, else the summaries."""
        if parts and all(len(t.top) == t.n for t, _ in parts):
            return cls(tuple(sorted((v for t, _ in parts for v in t.top), reverse=True)))
        return cls(None, tuple(parts))

    @property
    def n(self) -> int:
        return len(self.values) if self.values is not None else sum(t.n for t, _ in self.summaries)

    @property
    def p95(self) -> float | None:
        """The side's p95: exact over every value, else the runs' p95s weighted by their requests."""
        if self.values is not None:
            return quantile(self.values[::-1], 0.95)
        known = [(t.n, q.p95) for t, q in self.summaries if q.p95 is not None and t.n]
        if len(known) == 1:
            return known[0][1]
        total = sum(n for n, _ in known)
        return sum(n * v for n, v in known) / total if total else None

    def above(self, limit: float) -> Count:
        if self.values is not None:
            k = sum(1 for v in self.values if v > limit)
            return Count(k, k, len(self.values))
        out = Count(0, 0, 0)
        for tail, q in self.summaries:
            out = out + _summary_count(tail, q, limit)
        return out

    def interval(self, confidence: float) -> tuple[float, float] | None:
        """The p95's interval where the ranks it needs were kept (module docstring)."""
        if self.values is not None:
            return quantile_interval(self.values, 0.95, confidence)
        if len(self.summaries) == 1:
            tail, _ = self.summaries[0]
            return quantile_interval(tail.top, 0.95, confidence, n=tail.n)
        return None


def quantile_interval(descending: Sequence[float], q: float, confidence: float, *, n: int | None = None
                      ) -> tuple[float, float] | None:
    """The distribution-free interval of the ``q``-quantile of ``n`` values from their largest ones
    (``descending``, all ``n`` of them or the top few): the order statistics at the binomial's ranks; None where
    a rank needed was not kept or the sample is too small to bound it."""
    from scipy import stats

    n = len(descending) if n is None else n
    if n < 2:
        return None
    tail = (1 - confidence) / 2
    lo_rank = int(stats.binom.ppf(tail, n, q))  # 1-based ranks from the bottom, order statistics x_(r)
    hi_rank = int(stats.binom.ppf(1 - tail, n, q)) + 1
    if lo_rank < 1 or hi_rank > n:
        return None
    lo_top, hi_top = n - lo_rank, n - hi_rank  # 0-based positions from the top
    if lo_top >= len(descending):
        return None
    return descending[lo_top], descending[hi_top]


def ratio_interval(a: TailSide, b: TailSide, confidence: float) -> tuple[float, float] | None:
    """Interval of ``p95_B / p95_A`` (module docstring), None where either p95's interval is unknown."""
    qa, qb = a.p95, b.p95
    ia, ib = a.interval(confidence), b.interval(confidence)
    if qa is None or qb is None or ia is None or ib is None or min(qa, qb, ia[0], ib[0]) <= 0:
        return None
    centre = math.log(qb / qa)
    up = math.hypot(math.log(ib[1] / qb), math.log(qa / ia[0]))
    down = math.hypot(math.log(qb / ib[0]), math.log(ia[1] / qa))
    return math.exp(centre - down), math.exp(centre + up)


def exceedance_test(a: TailSide, b: TailSide) -> tuple[float, str] | None:
    """One-sided p-value that B's p95 is worse than A's, with each count at its least favourable bound (module
    docstring), and the counts in words; None without a p95."""
    qa, qb = a.p95, b.p95
    if qa is None or qb is None or not a.n or not b.n:
        return None
    ka, kb = a.above(qa), b.above(qa)
    p = exceedances_differ(ka.high, ka.n, kb.low, kb.n)
    said = f"{kb} above A's p95 against {ka}"
    if ka.exact and kb.exact:
        return p, f"{said}, p={p:.2g}"
    ja, jb = a.above(qb), b.above(qb)
    p_b = exceedances_differ(ja.high, ja.n, jb.low, jb.n)
    both = min(1.0, 2 * min(p, p_b))
    return both, (f"{said}; {ja} of A above B's p95 against {jb}; p={both:.2g} (the better of the two, doubled: "
                  "bounds from the documents' tails and quantiles)")


def tail_power(n_a: int, n_b: int, alpha: float, *, share_a: float = 0.05, share_b: float = 0.10) -> float:
    """Power of the one-sided tail test at level ``alpha`` to see B's share above A's p95 grow from ``share_a``
    to ``share_b`` (B's p95 at A's p90 by default): the two-proportion normal approximation."""
    from scipy import stats

    if n_a <= 0 or n_b <= 0:
        return 0.0
    pooled = (share_a * n_a + share_b * n_b) / (n_a + n_b)
    null_se = math.sqrt(pooled * (1 - pooled) * (1 / n_a + 1 / n_b))
    alt_se = math.sqrt(share_a * (1 - share_a) / n_a + share_b * (1 - share_b) / n_b)
    z = float(stats.norm.ppf(1 - alpha))
    return float(stats.norm.cdf((share_b - share_a - z * null_se) / alt_se))
