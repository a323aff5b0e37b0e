"""``satbench.compare.tails``: the counts above a limit a document's summary bounds, checked against the count
of the values themselves; the tests' false-alarm rate and the quantile interval's coverage over seeded draws
whose truth is the distribution's (a lognormal's p95 is ``exp(mu + 1.645 sigma)``)."""

from __future__ import annotations

import math
import random

import pytest

from satbench.compare.tails import Count, TailSide, exceedance_test, quantile_interval, tail_power
from satbench.core.figures import Tail
from satbench.core.statistics import quantiles


def _summary(values: list[float]) -> TailSide:
    return TailSide(None, ((Tail.of(values), quantiles(values)),))


@pytest.mark.parametrize("n", [10, 60, 320, 420, 1000])
def test_a_summarys_bounds_hold_the_exact_count(n: int) -> None:
    rng = random.Random(n)
    for _ in range(20):
        values = [rng.lognormvariate(0.0, 0.5) for _ in range(n)]
        ordered = sorted(values)
        q = quantiles(values)
        limits = [q.p50, q.p95, q.p99, ordered[n // 3], ordered[-1] * 1.01, ordered[0] * 0.5, q.p95 * 0.9]
        for limit in limits:
            assert limit is not None
            exact = sum(1 for v in values if v > limit)
            got = _summary(values).above(limit)
            assert got.low <= exact <= got.high, (n, limit, exact, got)
            if exact < 16 or n <= 16:  # inside the kept tail: exact
                assert got.exact, (n, limit, got)


def test_a_busy_rungs_count_is_not_read_as_the_16_kept() -> None:
    rng = random.Random(1)
    a = [rng.lognormvariate(math.log(0.04), 0.3) for _ in range(420)]
    b = [v + 0.060 for v in a]  # every request 60 ms later: all of B above A's p95 but a few
    limit = quantiles(a).p95
    assert limit is not None
    count = _summary(b).above(limit)
    assert count.low >= 210 and not count.exact  # B's p50 lies above it: at least half
    assert str(count).startswith(f"{count.low}-")
    assert TailSide(tuple(sorted(b, reverse=True))).above(limit) == Count(*(2 * [sum(v > limit for v in b)]), 420)


@pytest.mark.slow
@pytest.mark.parametrize("reading", ["records", "document"])
def test_the_same_distribution_is_called_worse_at_most_at_the_tests_level(reading: str) -> None:
    rng = random.Random(reading)
    alarms, reps, alpha = 0, 300, 0.05
    for _ in range(reps):
        a = [rng.lognormvariate(0.0, 0.4) for _ in range(400)]
        b = [rng.lognormvariate(0.0, 0.4) for _ in range(400)]
        sides = [TailSide(tuple(sorted(x, reverse=True))) if reading == "records" else _summary(x) for x in (a, b)]
        tested = exceedance_test(*sides)
        assert tested is not None
        alarms += tested[0] < alpha
    assert alarms / reps <= alpha + 0.025, alarms  # binomial slack of ~2 sd over 300 draws


@pytest.mark.slow
def test_the_p95_interval_covers_the_distributions_p95() -> None:
    rng = random.Random(7)
    truth = math.exp(1.6449 * 0.4)
    covered = reps = 0
    for _ in range(300):
        values = sorted((rng.lognormvariate(0.0, 0.4) for _ in range(400)), reverse=True)
        interval = quantile_interval(values, 0.95, 0.95)
        assert interval is not None
        reps += 1
        covered += interval[0] <= truth <= interval[1]
    assert covered / reps >= 0.93, covered
    assert quantile_interval(values[:16], 0.95, 0.95, n=400) is None  # a rank it needs was not kept


def test_the_power_grows_with_the_sample_and_is_the_level_without_an_effect() -> None:
    powers = [tail_power(n, n, 0.0125) for n in (60, 200, 400, 800, 3200)]
    assert powers == sorted(powers) and powers[-1] > 0.99 and powers[0] < 0.2
    assert tail_power(400, 400, 0.0125, share_b=0.05) == pytest.approx(0.0125, rel=0.05)
    assert tail_power(0, 400, 0.0125) == 0.0
