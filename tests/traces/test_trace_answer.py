"""The trace answer against the engine's truth, in virtual time: "this node takes N x the recorded traffic".

The truth (``testkit.trace_truth.true_max_factor``) is the simulator's engine fed the generated Mooncake trace
itself, its window sent eight times in a row, the long-run attainment of every speed factor: never the load
generator's windows, statistics or search. The measurement replays the load generator's trace rungs on the same
engine (``measured_trace_rung``: the rung's own sends, warm-up, window and look), judged by the load generator's
verdict (``loadgen.rates.judge``), searched by its factor search (``loadgen.trace_step.next_factor``), and read by
``answer.trace_analysis``. The answer must sit within 10 % of the truth.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from satbench.answer.policy import Policy, objectives_of
from satbench.answer.trace_analysis import TracePoint, to_factor, trace_answer
from satbench.core.figures import StepFigures
from satbench.core.step_figures import compute_step_figures
from satbench.loadgen.config import ArrivalConfig, TraceConfig
from satbench.loadgen.rates import RateOutcome, judge
from satbench.loadgen.trace_step import next_factor
from satbench.loadgen.traces import read_trace
from satbench.simulator.profile import load_profile
from testkit.trace_truth import generate_mooncake, measured_trace_rung, true_max_factor

POLICY = Policy()
OBJECTIVES = objectives_of(POLICY)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
def test_the_speed_factor_answer_is_within_ten_percent_of_the_engine_truth(tmp_path: Path, seed: int) -> None:
    path = generate_mooncake(tmp_path / "trace.jsonl", n=200, rate_rps=2.0, seed=seed)
    trace = read_trace(path)
    profile = load_profile("dense")
    truth = true_max_factor(profile, trace, objectives=OBJECTIVES)
    config, arrival = TraceConfig(path=path), ArrivalConfig()
    outcomes: list[RateOutcome] = []
    rungs: list[tuple[float, StepFigures]] = []
    while (factor := next_factor(outcomes, config, arrival, trace.rate_rps)) is not None:
        records, window = measured_trace_rung(profile, trace, factor, objectives=OBJECTIVES, warmup_s=5.0)
        step = compute_step_figures(records, window, objectives=OBJECTIVES)
        outcomes.append(judge(step, arrival, None))
        rungs.append((factor, step))
    answer = trace_answer(rungs, POLICY, trace.rate_rps, trace=trace.evidence())
    assert answer is not None and answer.max_factor is not None and answer.status == "settled"
    error = answer.max_factor / truth - 1
    print(f"\nseed {seed}: truth {truth:.3f}x, answer {answer.max_factor:.3f}x ({error:+.1%}); {answer.sentence}")
    assert abs(error) <= 0.10
    assert [p.speed_factor for p in answer.points] == sorted(f for f, _ in rungs)
    assert answer.to_dict()["trace"]["sha256"] == trace.sha256


def test_a_trace_answer_where_every_factor_passed_is_a_lower_bound(tmp_path: Path) -> None:
    """Three factors of a light trace, each served whole within the objectives: the answer is the highest
    factor offered, said as a lower bound."""
    trace = read_trace(generate_mooncake(tmp_path / "t.jsonl", n=60, rate_rps=0.5, seed=3))
    profile = load_profile("dense")
    rungs = []
    for factor in (0.5, 1.0, 2.0):
        records, window = measured_trace_rung(profile, trace, factor, objectives=OBJECTIVES, warmup_s=5.0)
        rungs.append((factor, compute_step_figures(records, window, objectives=OBJECTIVES)))
    answer = trace_answer(rungs, POLICY, trace.rate_rps)
    assert answer is not None and answer.status == "unsaturated" and answer.max_factor is not None
    assert 1.8 <= answer.max_factor <= 2.2  # the offered rate of the 2x rung, its schedule's realization
    assert answer.sentence.startswith("this node takes at least")
    assert trace_answer([], POLICY, trace.rate_rps) is None


def _point(factor: float, offered: float) -> TracePoint:
    return TracePoint(factor, offered, offered, 1.0, None, True, True, offered, None)


def test_a_rate_is_read_in_factors_on_the_rungs_own_points() -> None:
    """The part of the trace a rung measures is not the whole window's average: offered 1.78 req/s at 1x and
    14.9 at 8x against a window recorded at 1.9 req/s. The 1x rung's own rate is 1x (not 1.78 / 1.9 = 0.94x),
    a rate between the rungs lies on the line between their points, one beyond them scales with the nearest."""
    points = (_point(1.0, 1.78), _point(8.0, 14.9))
    assert to_factor(1.78, points, 1.9) == pytest.approx(1.0)
    assert to_factor(14.9, points, 1.9) == pytest.approx(8.0)
    assert to_factor((1.78 + 14.9) / 2, points, 1.9) == pytest.approx(4.5)
    assert to_factor(0.89, points, 1.9) == pytest.approx(0.5)
    assert to_factor(3.0, (), 1.5) == pytest.approx(2.0)  # no rung: the window's own rate
