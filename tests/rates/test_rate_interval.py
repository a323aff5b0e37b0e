"""The rate answer's interval follows from its rungs' attainment intervals (``answer.rate_analysis``), and
a rate search on an engine whose truth is known answers within 10 % of it or says it is undecided
(``testkit.open_engine``: the truth from its long runs, never from this code)."""

from __future__ import annotations

import pytest

from satbench.answer.policy import Policy, objectives_of
from satbench.answer.rate_analysis import RatePoint, rate_answer, rate_interval
from satbench.core.arrivals import gamma_shape
from satbench.core.attainment import capacity_bound
from satbench.loadgen.config import ArrivalConfig
from satbench.loadgen.rates import judge, next_rate
from testkit.open_engine import OpenEngine, measured_rung, true_max_rate


def _point(rate: float, low: float, share: float, high: float) -> RatePoint:
    return RatePoint(rate_rps=rate, offered_rps=None, valid=True, sustained=True, attainment=share,
                     attainment_interval=(low, high), goodput_rps=None, goodput_tok_s=None, passed=share >= 0.9,
                     missed_most=None, latency_mean_s=None, ttft_p95_s=None, judged=100)


def test_the_interval_runs_from_the_last_rung_surely_above_the_target_to_the_first_surely_below() -> None:
    """Lower bounds 0.95, 0.85 at rates 1 and 2: only rate 1 surely meets 0.9, so the crossing is at least 1;
    upper bounds 1.0, 0.98, 0.8 at rates 1, 2, 3: rate 3 surely misses it, so the crossing is at most 3. Nothing
    is read between the rungs."""
    points = [_point(1.0, 0.95, 0.98, 1.0), _point(2.0, 0.85, 0.92, 0.98), _point(3.0, 0.5, 0.6, 0.8)]
    assert rate_interval(points, 0.9) == (1.0, 3.0)


def test_a_cliff_between_two_rungs_stays_inside_the_interval() -> None:
    """A lane near its capacity: its long-run attainment holds 0.99 up to 2.9 requests/s and falls to 0.3 by 3.0
    (the crossing near 2.9). Rungs at 2 and 3 measured with honest intervals ([0.95, 1.0] and [0.1, 0.6]): a
    line drawn between the bounds would say the crossing is at most 2 + 0.1 / 0.4 = 2.25, under the truth; the
    interval holds it."""
    def true_attainment(rate: float) -> float:
        return 0.99 if rate <= 2.9 else 0.3

    truth = 2.9
    points = [_point(2.0, 0.95, 0.99, 1.0), _point(3.0, 0.1, 0.3, 0.6)]
    assert all(p.attainment_interval[0] <= true_attainment(p.rate_rps) <= p.attainment_interval[1]
               for p in points if p.attainment_interval is not None)
    low, high = rate_interval(points, 0.9)
    assert low <= truth <= high


def test_upper_bounds_that_never_fall_stop_at_the_ceiling_and_a_low_start_at_zero() -> None:
    points = [_point(1.0, 0.7, 0.95, 1.0), _point(2.0, 0.6, 0.9, 1.0)]
    assert rate_interval(points, 0.9) == (0.0, float("inf"))
    assert rate_interval(points, 0.9, ceiling=2.5) == (0.0, 2.5)


@pytest.mark.slow
@pytest.mark.parametrize(("cv", "seed"), [(3.0, 0), (3.0, 1), (4.0, 0), (4.0, 1)])
def test_a_rate_search_is_within_ten_per_cent_of_the_engines_truth_or_undecided(cv: float, seed: int) -> None:
    """The session's search (``loadgen.rates``) over rungs measured as ``loadgen.open_step`` measures them, at
    the default window limit, answered by the recommender: settled only within 10 % of the engine's truth
    (its long-run attainment crossing 90 %, 3 x 3000 s per rate). With 90 s windows these searches were
    settled and 20 to 150 % high at cv 3 and 4."""
    engine, policy = OpenEngine(), Policy()
    objectives = objectives_of(policy)
    shape = gamma_shape(None, cv)
    process = "poisson" if cv == 1.0 else "gamma"
    capacity = 4.286  # this engine's closed capacity at 4 users (the audit's)
    truth = true_max_rate(engine, process, capacity, objectives=objectives, shape=shape)
    arrival = ArrivalConfig(process=process, cv=None if cv == 1.0 else cv)
    bound = capacity_bound([(engine.slots, capacity)], engine.slots)
    outcomes, steps = [], []
    while (rate := next_rate(outcomes, arrival, capacity)) is not None:
        step = measured_rung(engine, process, rate, f"{seed}:{rate!r}", objectives=objectives, capacity_rps=bound,
                             shape=shape, max_window_s=arrival.max_window_s)
        steps.append(step)
        outcomes.append(judge(step, arrival, bound))
        assert len(steps) < 20
    answer = rate_answer(steps, policy, capacity_rps=bound)
    assert answer is not None and answer.status in {"settled", "undecided", "none"}
    if answer.status == "settled":
        assert answer.max_rate_rps is not None and abs(answer.max_rate_rps / truth - 1) <= 0.10
    else:
        assert answer.reason
    if answer.interval is not None and answer.status == "settled":
        assert answer.interval[0] <= truth <= answer.interval[1]


def test_a_lowest_rung_that_straddled_makes_no_none_answer() -> None:
    """Every rung failed by its point share, the lowest one undecided (its interval straddled the target at the
    window's limit): the answer is undecided, not 'none' (the truth may lie just below it); decidedly failed, it
    is 'none'."""
    from satbench.core.figures import StepFigures

    def step(rate: float, attained: int, dof: float) -> StepFigures:
        return StepFigures(lane="x", concurrency=0, window_s=600.0, requests=200, errors=0, throughput_tok_s=1.0,
                           requests_per_s=rate, rate_rps=rate, offered_rps=rate,
                           judged_requests=200, attained_requests=attained, attainment=attained / 200,
                           attainment_se=0.0, attainment_dof=dof, waits_settled=1)

    policy = Policy()
    straddled = rate_answer([step(0.5, 170, 4.0), step(1.0, 100, 199.0)], policy)
    assert straddled is not None and straddled.status == "undecided" and "0.5 requests/s" in (straddled.reason or "")
    failed = rate_answer([step(0.5, 150, 199.0), step(1.0, 100, 199.0)], policy)
    assert failed is not None and failed.status == "none"


def test_a_rung_an_early_look_ended_states_its_interval_at_that_looks_boundary() -> None:
    """A rung ended by a look before its window's limit was chosen for clearing the target there: its interval is
    the repeated confidence interval at the look's three standard errors (``core.attainment.step_confidence``),
    wider than the 95 % one a rung run to its limit states, in the answer's curve and the search's verdict alike."""
    from satbench.answer.rate_analysis import rate_passes
    from satbench.core.attainment import EARLY_LOOK_CONFIDENCE, step_attainment, step_confidence
    from satbench.core.figures import StepFigures

    def step(early: int | None) -> StepFigures:
        return StepFigures(lane="x", concurrency=0, window_s=60.0, requests=120, errors=0, throughput_tok_s=1.0,
                           requests_per_s=2.0, rate_rps=2.0, offered_rps=2.0, judged_requests=120,
                           attained_requests=118, attainment=118 / 120, attainment_se=0.0, attainment_dof=119.0,
                           waits_settled=1, decided_early=early)

    policy = Policy()
    limit, early = step(0), step(1)
    assert step_confidence(limit, 0.95) == 0.95 and step_confidence(step(None), 0.95) == 0.95
    assert step_confidence(early, 0.95) == EARLY_LOOK_CONFIDENCE
    stated, wide = rate_passes(limit, policy).attainment_interval, rate_passes(early, policy).attainment_interval
    estimate = step_attainment(early)
    assert estimate is not None and wide == estimate.interval(EARLY_LOOK_CONFIDENCE)
    assert stated is not None and wide is not None and wide[0] < stated[0]
    arrival = ArrivalConfig(rates=[2.0])
    assert judge(early, arrival).passed is True  # 118 of 120 clears 0.9 at the boundary too
