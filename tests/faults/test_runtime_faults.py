"""Runtime faults injected into the simulator during a loadgen step: the run continues, every request is
recorded with the right outcome, and the affected step says why it is not to be trusted.

Each fault covers the whole step (``rate`` 1), except the burst test, where a 5xx burst hits part of the
window: there the step keeps its ok requests, counts the errors in its notes, and stays on the ladder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from testkit.sim import SimulatorProcess
from tests.faults.conftest import run_short, set_faults, short_config

pytestmark = pytest.mark.slow

WHOLE = {"start_s": 0.0, "duration_s": 120.0, "rate": 1.0}

CASES: list[tuple[dict[str, Any], str, dict[str, Any]]] = [
    ({"kind": "http_5xx", "status": 503}, "refused", {}),
    ({"kind": "http_5xx", "status": 500}, "http_error", {}),
    ({"kind": "drop_stream", "after_tokens": 3}, "dropped", {}),
    ({"kind": "malformed_sse", "after_tokens": 2}, "malformed", {}),
    ({"kind": "stall", "after_tokens": 2, "delay_s": 3.0}, "timeout",
     {"request_timeout_s": 0.5, "min_window_s": 1.5, "max_window_s": 2.0}),
]


@pytest.mark.parametrize(("fault", "outcome", "extra"), CASES, ids=[f"{f['kind']}-{o}" for f, o, _ in CASES])
def test_a_faulty_runtime_is_recorded_and_the_step_marked(sim: SimulatorProcess, tmp_path: Path,
                                                          fault: dict[str, Any], outcome: str,
                                                          extra: dict[str, Any]) -> None:
    set_faults(sim.url, {**WHOLE, **fault})
    try:
        manifest, records = run_short(short_config(sim.url, **extra), tmp_path)
    finally:
        set_faults(sim.url)
    assert records, "no request was recorded"
    outcomes = {r.outcome for r in records}
    assert outcome in outcomes and "ok" not in outcomes, outcomes
    bad = next(r for r in records if r.outcome == outcome)
    assert bad.error and bad.request_id
    if outcome in ("http_error", "refused"):
        assert bad.status == fault["status"]
    [step] = manifest.steps
    assert not step.valid and step.reason, "a step where every request failed must be marked invalid"
    assert any(f"{outcome}=" in note for note in step.notes), step.notes


def test_a_5xx_burst_inside_the_window_is_counted_and_the_run_goes_on(sim: SimulatorProcess,
                                                                     tmp_path: Path) -> None:
    set_faults(sim.url, {"kind": "http_5xx", "status": 500, "start_s": 0.5, "duration_s": 0.6, "rate": 1.0})
    try:
        config = short_config(sim.url, ladder={"concurrency": [1, 2]}, min_window_s=1.5, max_window_s=2.0)
        manifest, records = run_short(config, tmp_path)
    finally:
        set_faults(sim.url)
    walked = [s.concurrency for s in manifest.steps if not s.drift_reference]  # the drift check's re-measure aside
    assert walked == [1, 2], "the ladder must go on after a fault"
    first = manifest.steps[0]
    errors = [r for r in records if r.concurrency == 1 and r.outcome == "http_error"]
    assert errors and any(r.ok for r in records if r.concurrency == 1)
    if any(r.phase == "window" for r in errors):
        assert any("http_error=" in note for note in first.notes), first.notes
    assert all(r.ok for r in records if r.concurrency == 2), "the burst was over before the second rung"
