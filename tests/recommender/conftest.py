"""A real Prometheus holding a synthetic run (backfilled), shared by the recommender's wire tests."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from satbench.core.manifest import RunManifest
from satbench.core.records import RequestRecord, write_records
from testkit.backfill import BackfilledPrometheus, tools_available
from testkit.openmetrics import openmetrics_text
from testkit.synthetic import SyntheticLane, simulate_run

HOSTILE = ['x"}) or vector(1) #', "a\\", 'b\\"', "new\nline", '{lane=~".*"}', "' or 1",
           'dense" or lane="moe']
LANES = (
    SyntheticLane("dense", slots=4, cached_prompt_tokens=48, draft_tokens=20, draft_accepted_tokens=15),
    SyntheticLane("moe", slots=8, prefill_s=0.03, itl_s=0.006),
)
STARVING = SyntheticLane("starving", slots=4, prefill_s=0.6, starve_decode=True)  # a 600 ms pause per request
UNFAIR = SyntheticLane("unfair", slots=4, unfair_user0=True)
GAPPY = SyntheticLane("gappy", slots=4)  # dense, but Prometheus missed most scrapes of its c=2 window
LADDER = (1, 2, 4, 8, 16)
WINDOW_S = 10.0


@dataclass(frozen=True)
class SyntheticRun:
    manifest: RunManifest
    records: list[RequestRecord]
    run_dir: Path
    prometheus_url: str


@pytest.fixture(scope="session")
def synthetic_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SyntheticRun]:
    if not tools_available():
        pytest.skip("prometheus and promtool are not installed")
    t0 = float((int(time.time()) // 3600 - 4) * 3600)
    main, main_records = simulate_run(LANES, LADDER, t0=t0, window_s=WINDOW_S)
    extra, extra_records = simulate_run((STARVING, UNFAIR, GAPPY), (1, 2, 4), t0=main.finished_at or t0,
                                        window_s=2 * WINDOW_S, seed=11, run_id=main.run_id)
    manifest = RunManifest(run_id=main.run_id, created_at=t0, steps=main.steps + extra.steps,
                           finished_at=extra.finished_at, lanes={**main.lanes, **extra.lanes})
    records = main_records + extra_records
    probes = [("satbench_escape_probe", {"lane": v}, float(i + 1)) for i, v in enumerate(HOSTILE)]
    probes.append(("satbench_escape_probe", {"lane": "dense"}, 100.0))
    probes += [("gpu_memory_used_bytes", {"lane": "dense", "node": "n1", "gpu": "0"}, 6e9),
               ("gpu_memory_total_bytes", {"lane": "dense", "node": "n1", "gpu": "0"}, 8e9),
               ("gpu_memory_used_bytes", {"lane": "dense", "node": "n1", "gpu": "1"}, 2e9),
               ("gpu_memory_total_bytes", {"lane": "dense", "node": "n1", "gpu": "1"}, 8e9)]
    probes += [("gpu_info", {"lane": "dense", "node": "n1", "gpu": g, "name": "NVIDIA H200", "simulated": "false"},
                1.0) for g in ("0", "1")]
    gap = next(w for w in manifest.steps if w.lane == GAPPY.name and w.concurrency == 2)
    missed = [(gap.start - 0.5, gap.end - 3.0)]
    workdir = tmp_path_factory.mktemp("prom")
    run_dir = tmp_path_factory.mktemp("runs") / manifest.run_id
    manifest.write(run_dir / "manifest.json")
    write_records(run_dir / "records.jsonl", records)
    published = {w.lane for w in manifest.steps} - {GAPPY.name}  # gappy: the histograms and their coverage
    series = openmetrics_text(manifest, records, extra_gauges=probes, missed_scrapes=missed,
                              publish_lanes=published)
    with BackfilledPrometheus(series, workdir) as prom:
        yield SyntheticRun(manifest, records, run_dir, prom.url)
