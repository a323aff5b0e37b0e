"""The speed-factor and rate searches replay and label rungs as listed, and every search ends.

A trace rung runs at the recorded rate times its factor (``loadgen.trace_step.TraceStepRun``) and comes back as
an outcome at that rate; the search must know it again as the factor it asked for. Before, factors went through
six significant digits on the way (0.5 replayed as 0.500001x) and, where the rung's rate then missed the listed
rung's, the search asked for it again, without end (46 rungs at 9.76563x on a light trace). The expected ladders
here are written out by hand: 4 x 1.25^k to six decimals.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from satbench.loadgen.config import ArrivalConfig, TraceConfig
from satbench.loadgen.rates import RateOutcome, factor_label, next_rate, rung_bound, search_end
from satbench.loadgen.trace_step import NARROW, factor_search_end, next_factor

TRACE = TraceConfig(path=Path("t.jsonl"))  # factors 0.5, 1, 2, 4; 1.25x steps to 64; 3 bisections
ARRIVAL = ArrivalConfig()
CLIMB = [0.5, 1.0, 2.0, 4.0, 5.0, 6.25, 7.8125, 9.765625, 12.207031, 15.258789, 19.073486, 23.841858, 29.802322,
         37.252903, 46.566129, 58.207661]
RECORDED = [0.5458333, 1 / 3, 0.0813, 7.123456789, 2.0, 0.1234567, 19.9, 0.04444444]


def _walk_factors(recorded: float, passes, limit: int = 100) -> list[float]:
    """The factor search as the runner walks it: each rung at the recorded rate times its factor."""
    factors: list[float] = []
    outcomes: list[RateOutcome] = []
    while (factor := next_factor(outcomes, TRACE, ARRIVAL, recorded)) is not None:
        factors.append(factor)
        outcomes.append(RateOutcome(recorded * factor, passes(factor)))
        assert len(factors) < limit, factors
    return factors


@pytest.mark.parametrize("recorded", RECORDED)
def test_a_light_trace_climbs_each_listed_factor_once_as_listed(recorded: float) -> None:
    factors = _walk_factors(recorded, lambda f: True)
    assert factors == CLIMB
    assert [factor_label(f) for f in factors[:8]] == ["0.5x", "1x", "2x", "4x", "5x", "6.25x", "7.8125x",
                                                       "9.765625x"]
    outcomes = [RateOutcome(recorded * f, True) for f in factors]
    said = factor_search_end(outcomes, TRACE, ARRIVAL, recorded)
    assert said is not None and "lower bound" in said and "58.207661x" in said


@pytest.mark.parametrize("recorded", RECORDED)
@pytest.mark.parametrize("threshold", [0.3, 0.7, 1.6, 9.0, 10.5, 33.0])
def test_a_factor_search_brackets_its_threshold_without_asking_twice(recorded: float, threshold: float) -> None:
    """... and narrows its bracket past its three bisections, three more at most, until its ends are within
    ``NARROW`` (1.1) of each other: a bracket that narrow holds any answer inside it within 10 %."""
    factors = _walk_factors(recorded, lambda f: f <= threshold)
    assert len(factors) == len(set(factors)) <= rung_bound(ARRIVAL.model_copy(update={
        "rates": None, "relative": TRACE.factors, "max_relative": TRACE.max_factor}), 1.0, NARROW)
    passed = [f for f in factors if f <= threshold]
    failed = [f for f in factors if f > threshold]
    if passed:
        assert max(passed) <= threshold < min(failed)
        bisections = len([f for f in factors if f not in CLIMB and f not in (0.25, 0.125)])
        assert min(failed) / max(passed) <= NARROW or bisections == 2 * TRACE.search_steps, factors
        assert bisections == TRACE.search_steps or min(failed) / max(passed) <= NARROW * 1.3, factors
    assert all(f == round(f, 6) for f in factors)
    outcomes = [RateOutcome(recorded * f, f <= threshold) for f in factors]
    said = factor_search_end(outcomes, TRACE, ARRIVAL, recorded)
    assert said is not None and not said.startswith("undecided"), said


def test_listed_rates_with_more_decimals_are_sent_as_listed() -> None:
    arrival = ArrivalConfig(process="poisson", rates=[0.3333333, 0.6666667], search_steps=1)
    done: list[RateOutcome] = []
    while (rate := next_rate(done, arrival, None)) is not None:
        done.append(RateOutcome(rate, rate < 0.5))
        assert len(done) < 10
    assert [o.rate for o in done] == [0.3333333, 0.6666667, 0.5]


@pytest.mark.parametrize("seed", range(20))
def test_every_search_ends_within_its_bound_against_any_outcomes(seed: int) -> None:
    """An adversary answers each rung at a rate a little off the one asked (as a rounding on the way did) and
    passes, fails or leaves it unjudged at random: the search still ends within ``rung_bound`` rungs, and says
    why: decided, a bound, none, or ``undecided`` at its bound."""
    rng = random.Random(seed)
    arrival = ArrivalConfig(process="poisson", search_steps=rng.randint(0, 8))
    capacity = rng.uniform(0.01, 50.0)
    bound = rung_bound(arrival, capacity)
    done: list[RateOutcome] = []
    while (rate := next_rate(done, arrival, capacity)) is not None:
        off = rate * (1 + rng.choice([0.0, 1e-6, -1e-6, 3e-4]))
        done.append(RateOutcome(off, rng.choice([True, True, True, False, None])))
        assert len(done) <= bound
    said = search_end(done, arrival, capacity)
    assert said
    if said.startswith("undecided"):
        assert len(done) == bound and f"its bound ({bound}" in said


def test_a_rung_that_always_comes_back_off_its_rate_ends_undecided_at_the_bound() -> None:
    """The finding itself: each rung's rate comes back a rounding off the listed one, every rung passing. The
    old search asked for the same rung again forever; this one stops at its bound and says so."""
    arrival = ArrivalConfig(process="poisson")
    bound = rung_bound(arrival, 3.0)
    assert bound == 6 + 2 + 3  # 0.5, 0.75, 1, 1.25, 1.5625, 1.953125 of capacity; 2 halvings; 3 bisections
    done: list[RateOutcome] = []
    while (rate := next_rate(done, arrival, 3.0)) is not None:
        done.append(RateOutcome(rate * (1 + 1e-6), True))
    said = search_end(done, arrival, 3.0)
    assert len(done) == bound and said is not None and said.startswith("undecided"), said
