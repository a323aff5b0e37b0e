"""A node that changes speed mid-walk, live: the simulator's ``slowdown`` fault doubles every engine step after
the lowest rung, the load generator walks the ladder over loopback HTTP and re-measures that rung at the lane's
end, and the recommender reads the records. The truth is the fault schedule: from the second rung on, every
step takes twice as long."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from satbench.answer.analysis import LaneAnalysis, analyze_lane
from satbench.answer.policy import SLO, Policy
from satbench.recommender.records_source import figures_from_records
from testkit.sim import SimulatorProcess
from tests.faults.conftest import run_short, set_faults, short_config

POLICY = Policy(slo=SLO(ttft_p95_s=None, itl_p95_s=None, tbt_p99_s=None), min_requests_per_step=5,
                max_throughput_ci_ratio=0.5)


def warm(sim: SimulatorProcess) -> None:
    """A just-started simulator's first second is slower than the rest (a cold server's first rung is
    inconclusive, and the lane insufficient_data): these tests are about a change mid-walk, so warm it first."""
    for i in range(20):
        resp = httpx.post(f"{sim.url}/completion", json={"prompt": f"warm {i}", "n_predict": 12}, timeout=10)
        resp.raise_for_status()


def walk(sim: SimulatorProcess, tmp_path: Path, *faults: dict[str, float | str]) -> tuple[list[int], LaneAnalysis]:
    warm(sim)
    set_faults(sim.url, *faults)
    try:
        config = short_config(sim.url, ladder={"concurrency": [1, 2, 4]}, warmup_s=0.3, min_window_s=2.0,
                              max_window_s=2.0)
        manifest, records = run_short(config, tmp_path)
    finally:
        set_faults(sim.url)
    steps = figures_from_records(manifest, records)["dense"]
    return [w.concurrency for w in manifest.steps], analyze_lane("dense", steps, POLICY)


@pytest.mark.slow
def test_a_step_time_that_doubles_after_the_first_rung_is_seen_and_the_answer_withheld(
        sim: SimulatorProcess, tmp_path: Path) -> None:
    # c=1's rung ends about 3 s after the schedule is set (evidence, warm-up, window, drain): the co-tenant
    # arrives after it, for good
    windows, lane = walk(sim, tmp_path, {"kind": "slowdown", "start_s": 4.0, "factor": 2.0})
    assert windows == [1, 2, 4, 1]  # the lowest rung measured again at the lane's end
    drift = lane.drift
    assert drift is not None and drift.drifted and drift.how == "reference"
    assert 0.35 < drift.ratio < 0.65  # the schedule's: half the speed
    assert lane.status == "degraded" and lane.recommended_concurrency is None


@pytest.mark.slow
def test_a_steady_node_is_checked_and_not_called_drifted(sim: SimulatorProcess, tmp_path: Path) -> None:
    windows, lane = walk(sim, tmp_path)
    assert windows == [1, 2, 4, 1]
    drift = lane.drift
    assert drift is not None and not drift.drifted and drift.how == "reference"
    assert lane.status != "degraded"
