"""The ``slowdown`` fault: every engine step takes ``factor`` times as long (reached after ``ramp_s``), so a
live session can watch a node change speed mid-walk (``core.drift``)."""

from __future__ import annotations

import pytest

from satbench.simulator.engine import Engine
from satbench.simulator.engine_types import RequestSpec
from satbench.simulator.faults import FaultSchedule
from satbench.simulator.profile import FaultSpec, ProfileError, fault_from_mapping, load_profile


@pytest.mark.parametrize(("t", "scale"), [(9.9, 1.0), (10.0, 1.0), (15.0, 1.5), (20.0, 2.0), (40.0, 2.0),
                                          (50.0, 1.0)])
def test_a_ramped_slowdown_reaches_its_factor_and_ends_with_its_window(t: float, scale: float) -> None:
    spec = fault_from_mapping({"kind": "slowdown", "start_s": 10.0, "duration_s": 40.0, "factor": 2.0,
                               "ramp_s": 10.0})
    assert spec.step_scale(t) == pytest.approx(scale)


def test_slowdowns_multiply_and_other_faults_do_not_slow() -> None:
    schedule = FaultSchedule([FaultSpec("slowdown", factor=2.0), FaultSpec("slowdown", start_s=5.0, factor=1.5),
                              FaultSpec("engine_pause", delay_s=1.0)])
    assert schedule.step_scale(1.0) == pytest.approx(2.0)
    assert schedule.step_scale(6.0) == pytest.approx(3.0)
    assert FaultSchedule([FaultSpec("stall")]).step_scale(1.0) == 1.0


@pytest.mark.parametrize("bad", [{"factor": 0}, {"factor": -1.0}, {"ramp_s": -1.0}, {"factor": float("inf")}])
def test_a_bad_slowdown_is_refused_in_one_line(bad: dict[str, float]) -> None:
    with pytest.raises(ProfileError, match="factor must be"):
        fault_from_mapping({"kind": "slowdown", **bad})


def test_the_engine_step_takes_the_schedules_factor_at_its_start() -> None:
    engine = Engine(load_profile("dense"))
    engine.step_scale = lambda now: 2.0 if now >= 100.0 else 1.0  # a co-tenant from t = 100 s
    engine.submit(RequestSpec("a", 16, 50, ignore_eos=True), 0.0)
    first = engine.begin_step(0.0)
    assert first is not None
    engine.finish_step()
    before = engine.begin_step(first.end)  # a decode step before the co-tenant
    assert before is not None
    engine.finish_step()
    after = engine.begin_step(100.0)  # the same batch (one decoding slot), after it
    assert after is not None and after.n_decode == before.n_decode == 1 and not after.n_prompt
    assert (after.end - after.start) == pytest.approx(2.0 * (before.end - before.start))
