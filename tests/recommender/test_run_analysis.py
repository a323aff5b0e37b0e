"""``analyze_run`` without a service: source choice, errors, and calls from inside a running event loop."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from satbench.answer.policy import Policy
from satbench.core.manifest import RunManifest
from satbench.core.records import write_records
from satbench.recommender.errors import BadInput, RecordsUnavailable
from satbench.recommender.run_analysis import analyze_run
from testkit.synthetic import SyntheticLane, simulate_run


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunManifest, Path]:
    manifest, records = simulate_run([SyntheticLane("dense", slots=2)], [1, 2, 4], t0=1e9, window_s=6.0)
    run_dir = tmp_path_factory.mktemp("run")
    write_records(run_dir / "records.jsonl", records)
    return manifest, run_dir


def test_records_only(run: tuple[RunManifest, Path]) -> None:
    manifest, run_dir = run
    doc = analyze_run(manifest, prometheus_url=None, run_dir=run_dir, policy=Policy())
    assert doc["source"] == {"kind": "records", "run_dir": run_dir.name}
    assert doc["lanes"]["dense"]["recommended_concurrency"] == 2


def test_callable_from_inside_an_event_loop(run: tuple[RunManifest, Path]) -> None:
    manifest, run_dir = run

    async def orchestrator() -> int | None:
        doc = analyze_run(manifest, prometheus_url=None, run_dir=run_dir, policy=Policy())
        answer: int | None = doc["lanes"]["dense"]["recommended_concurrency"]
        return answer

    assert asyncio.run(orchestrator()) == 2


def test_no_source_is_bad_input(run: tuple[RunManifest, Path]) -> None:
    with pytest.raises(BadInput, match="no source"):
        analyze_run(run[0], prometheus_url=None, run_dir=None, policy=Policy())


def test_a_run_folder_without_records(run: tuple[RunManifest, Path], tmp_path: Path) -> None:
    with pytest.raises(RecordsUnavailable, match=r"records\.jsonl"):
        analyze_run(run[0], prometheus_url=None, run_dir=tmp_path, policy=Policy())


def test_a_lane_with_an_empty_window_is_reported_not_raised(run: tuple[RunManifest, Path]) -> None:
    manifest, run_dir = run
    first = {**manifest.steps[0].to_dict(), "end": manifest.steps[0].start}
    broken = RunManifest.from_dict({**manifest.to_dict(),
                                    "steps": [first, *[s.to_dict() for s in manifest.steps[1:]]]})
    lane = analyze_run(broken, prometheus_url=None, run_dir=run_dir, policy=Policy())["lanes"]["dense"]
    assert lane["status"] == "insufficient_data"
    assert "empty step window" in lane["reason"]
