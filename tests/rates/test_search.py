"""The rate search (``loadgen.rates.next_rate``) against a lane whose answer is known: a threshold rate below
which every rung passes. It climbs the relative ladder, brackets and bisects, halves a failing bottom, stops
at an invalid rung, and lands within the bracket it promises."""

from __future__ import annotations

import pytest

from satbench.loadgen.config import ArrivalConfig
from satbench.loadgen.rates import RateOutcome, next_rate


def _walk(arrival: ArrivalConfig, capacity: float | None, passes, limit: int = 30) -> list[RateOutcome]:
    done: list[RateOutcome] = []
    while (rate := next_rate(done, arrival, capacity)) is not None:
        done.append(RateOutcome(rate, passes(rate)))
        assert len(done) < limit
    return done


@pytest.mark.parametrize("threshold", [3.1, 6.2, 8.8, 11.0, 14.0, 19.0])
def test_the_search_brackets_the_threshold_to_its_promised_width(threshold: float) -> None:
    arrival = ArrivalConfig(process="poisson")
    capacity = 10.0
    done = _walk(arrival, capacity, lambda r: r <= threshold)
    passed = [o.rate for o in done if o.passed]
    failed = [o.rate for o in done if not o.passed]
    top = max(arrival.relative) * capacity
    while top * 1.25 <= arrival.max_relative * capacity + 1e-9:
        top *= 1.25
    if threshold >= top:  # every rate passed up to the ladder's top
        assert not failed and max(passed) == pytest.approx(top)
        return
    low, high = max(passed), min(failed)
    assert low <= threshold < high
    ladder = sorted({round(f * capacity, 6) for f in arrival.relative})
    first_bracket = next(((a, b) for a, b in zip([0.0, *ladder], [*ladder, top], strict=False)
                          if a <= threshold < b), None)
    assert first_bracket is not None
    assert high - low <= (first_bracket[1] - first_bracket[0]) / 2 ** arrival.search_steps + 1e-6


def test_listed_rates_are_walked_in_order_until_one_fails() -> None:
    arrival = ArrivalConfig(process="constant", rates=[8.0, 2.0, 4.0], search_steps=0)
    assert [o.rate for o in _walk(arrival, None, lambda r: r < 5)] == [2.0, 4.0, 8.0]


def test_a_failing_bottom_is_halved_twice_at_most() -> None:
    arrival = ArrivalConfig(process="poisson")
    done = _walk(arrival, 10.0, lambda r: False)
    assert [o.rate for o in done] == [5.0, 2.5, 1.25]
    done = _walk(arrival, 10.0, lambda r: r <= 3.0)
    assert [o.rate for o in done][:2] == [5.0, 2.5] and any(o.passed for o in done)


def test_an_invalid_rung_stops_the_ascent() -> None:
    arrival = ArrivalConfig(process="poisson")
    done = _walk(arrival, 10.0, lambda r: None if r > 6 else True)
    assert [o.rate for o in done] == [5.0, 7.5]


def test_no_capacity_and_no_rates_is_no_search() -> None:
    assert next_rate([], ArrivalConfig(process="poisson"), None) is None


def test_undecided_rungs_are_bracketed_from_their_decided_ends() -> None:
    """Rates within 8 % of the threshold 10 end undecided (their interval straddles the target at the window's
    limit; their point share steers): the bisection narrows the decided pass and the decided fail from the
    ends, never bisecting again between two undecided rungs, so the decided bracket closes in on the
    undecided zone."""
    arrival = ArrivalConfig(process="poisson", search_steps=4)
    done: list[RateOutcome] = []
    while (rate := next_rate(done, arrival, 8.0)) is not None:
        done.append(RateOutcome(rate, rate <= 10.0, decided=abs(rate / 10.0 - 1) > 0.08))
        assert len(done) < 30
    decided_pass = max(o.rate for o in done if o.decided and o.passed)
    decided_fail = min(o.rate for o in done if o.decided and not o.passed)
    undecided = sorted(o.rate for o in done if not o.decided)
    assert undecided and decided_pass < undecided[0] and undecided[-1] < decided_fail
    assert decided_pass >= 10.0 / 1.08 * 0.93 and decided_fail <= 10.0 * 1.08 * 1.07  # within 7 % of the zone
    bisected = [o.rate for o in done if round(o.rate, 6) not in {4.0, 6.0, 8.0, 10.0, 12.5, 15.625}]
    assert not any(a < r < b for r in bisected for a in undecided for b in undecided)
