"""Every request sent in the window, followed to its end, over real HTTP against the simulator and its truth.

* The drain keeps the load on and follows the window's requests until each has ended, so a long answer sent
  late is in the quantiles as much as a short one: e2e p95 from the records within 5 % of the engine's own
  (``/sim/truth``, joined by ``X-Request-ID``). Cut short by ``drain_timeout_s``, the requests still running
  are ``censored`` (their figures lower bounds) and counted, never silently left out.
* A conversation workload with a steady start measures the same mix of depths at every rung.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from satbench.core.manifest import StepWindow
from satbench.core.records import read_records
from satbench.core.statistics import quantile
from satbench.core.step_figures import compute_step_figures
from satbench.loadgen.config import LoadgenConfig
from satbench.loadgen.runner import run_ladder
from testkit.sim import SimulatorProcess

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

LONG = {"output_tokens": {"kind": "lognormal", "median": 250, "sigma": 1.0, "low": 8, "high": 2000},
        "prompt_tokens": {"value": 32}, "seed": 2}


def walk(url: str, out: Path, concurrency: list[int], workload: dict[str, Any], **extra: Any) -> None:
    cfg = LoadgenConfig.model_validate({
        "lanes": [{"name": "dense", "url": url, "api": "openai-chat", "model": "sim"}],
        "ladder": {"concurrency": concurrency}, "warmup_s": 0.5, "min_window_s": 2.0, "max_window_s": 2.0,
        "min_requests": 2, "progress": False, "metrics_port": None, "max_loop_lag_s": 1.0, "workload": workload,
        "drain_settle_s": 0.0, **extra})
    asyncio.run(run_ladder(cfg, out))


def test_the_drain_follows_long_requests_to_their_end(tmp_path: Path) -> None:
    with SimulatorProcess("dense") as sim:
        walk(sim.url, tmp_path / "followed", [6], LONG, min_window_s=3.0, max_window_s=3.0)
        walk(sim.url, tmp_path / "cut", [6], LONG, drain_timeout_s=0.3)
        truth = {row["request_id"]: row for row in
                 httpx.get(sim.url + "/sim/truth", params={"capacity": "0"}, timeout=10).json()["requests"]}
    manifest = json.loads((tmp_path / "followed" / "manifest.json").read_text())
    window = StepWindow(**manifest["steps"][0])
    records = list(read_records(tmp_path / "followed" / "records.jsonl"))
    figures = compute_step_figures(records, window)
    sent = [r for r in records if window.start <= r.sent_at <= window.end]
    assert sent and all(r.ok for r in sent) and figures.censored_requests == 0
    true_e2e = sorted(truth[r.request_id]["last_token"] - truth[r.request_id]["arrival"] for r in sent)
    assert max(true_e2e) > 2.5  # answers longer than the window itself, let alone an old 3 s drain
    assert figures.latency_s.p95 == pytest.approx(quantile(true_e2e, 0.95), rel=0.05)
    cut = list(read_records(tmp_path / "cut" / "records.jsonl"))
    cut_manifest = json.loads((tmp_path / "cut" / "manifest.json").read_text())
    cut_figures = compute_step_figures(cut, StepWindow(**cut_manifest["steps"][0]))
    censored = [r for r in cut if r.extra.get("censored")]
    assert censored and all(r.outcome == "dropped" for r in censored)
    assert cut_figures.censored_requests == len(censored)


def test_a_steady_conversation_measures_the_same_depths_at_every_rung(tmp_path: Path) -> None:
    workload = {"prompt_tokens": {"value": 24}, "output_tokens": {"value": 12}, "conversation": {"turns": 4}}
    with SimulatorProcess("dense") as sim:
        walk(sim.url, tmp_path, [1, 4], workload)
    steps = {s["concurrency"]: s for s in json.loads((tmp_path / "steps.json").read_text())}
    for c, step in steps.items():
        # depths uniform over 1..4 from the first request: mean 2.5 (sd of one depth 1.1; 20+ requests a window)
        assert step["turn_mean"] is not None and abs(step["turn_mean"] - 2.5) < 0.8, (c, step["turn_mean"])
