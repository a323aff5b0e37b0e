"""Arrival schedules: seeded, reproducible, and distributed as the process asked (a goodness-of-fit test with
its power shown against the wrong process)."""

from __future__ import annotations

import itertools
import math

import pytest
from scipy import stats

from satbench.core.arrivals import ArrivalStream, gamma_shape, schedule


def _gaps(offsets: list[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(offsets)]


def test_the_same_seed_gives_the_same_schedule_and_the_stream_draws_it() -> None:
    a = schedule("poisson", 20.0, 50.0, seed="lane:1")
    assert a == schedule("poisson", 20.0, 50.0, seed="lane:1")
    assert a != schedule("poisson", 20.0, 50.0, seed="lane:2")
    stream = ArrivalStream("poisson", 20.0, "lane:1")
    assert [stream.next_offset() for _ in range(len(a))] == a


def test_constant_gaps_are_exact() -> None:
    gaps = _gaps(schedule("constant", 8.0, 10.0))
    assert all(math.isclose(g, 0.125) for g in gaps)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_poisson_gaps_are_exponential_and_gamma_ones_are_not(seed: int) -> None:
    """KS at 4000 gaps: the Poisson schedule fits its exponential (p > 0.001 for each of three seeds, a false
    rejection 0.1 % of the time); a gamma schedule of shape 0.5 (CV 1.41) is rejected against the same
    exponential (p < 1e-6): the test has the power to tell the processes apart at this size."""
    rate = 50.0
    poisson = _gaps(schedule("poisson", rate, 80.0, seed))
    assert len(poisson) > 3800
    assert stats.kstest(poisson, stats.expon(scale=1 / rate).cdf).pvalue > 1e-3
    bursty = _gaps(schedule("gamma", rate, 80.0, seed, shape=0.5))
    assert stats.kstest(bursty, stats.expon(scale=1 / rate).cdf).pvalue < 1e-6
    assert abs(len(poisson) / 80.0 / rate - 1) < 0.05


@pytest.mark.parametrize(("shape", "cv"), [(0.25, None), (4.0, None), (None, 2.0)])
def test_gamma_gaps_fit_their_shape_and_mean(shape: float | None, cv: float | None) -> None:
    k = gamma_shape(shape, cv)
    rate = 40.0
    gaps = _gaps(schedule("gamma", rate, 120.0, "g", shape=k))
    assert stats.kstest(gaps, stats.gamma(k, scale=1 / (rate * k)).cdf).pvalue > 1e-3
    mean = sum(gaps) / len(gaps)
    sd = math.sqrt(sum((g - mean) ** 2 for g in gaps) / (len(gaps) - 1))
    assert abs(mean * rate - 1) < 0.08 and abs(sd / mean - 1 / math.sqrt(k)) < 0.15


def test_bad_processes_and_rates_are_refused() -> None:
    with pytest.raises(ValueError, match="process"):
        ArrivalStream("bursty", 1.0)
    with pytest.raises(ValueError, match="rate"):
        ArrivalStream("poisson", -1.0)
    with pytest.raises(ValueError, match="shape"):
        ArrivalStream("gamma", 1.0, shape=0.0)
