"""The ladder against the embedded simulator: records join its ground truth by X-Request-ID."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from core.records import read_records
from loadgen.config import LoadgenConfig
from loadgen.runner import run_ladder
from testkit.sim import SimulatorProcess


@pytest.mark.parametrize("api", ["llamacpp", "openai-chat"])
def test_ladder_against_simulator_matches_its_truth(tmp_path: Path, api: str) -> None:
    with SimulatorProcess("dense") as sim:
        cfg = LoadgenConfig.model_validate({
            "lanes": [{"name": "dense", "url": sim.url, "api": api, "model": "sim"}],
            "ladder": {"concurrency": [1, 2]}, "warmup_s": 0.3, "min_window_s": 1.0, "max_window_s": 1.5,
            "min_requests": 2, "drain_timeout_s": 2.0, "progress": False, "metrics_port": None,
            "max_loop_lag_s": 1.0,
            "workload": {"output_tokens": {"value": 16}, "prompt_tokens": {"value": 48}},
        })
        asyncio.run(run_ladder(cfg, tmp_path))
        truth = httpx.get(sim.url + "/sim/truth", params={"capacity": "0"}, timeout=10).json()
    rows = {row["request_id"]: row for row in truth["requests"]}
    records = [r for r in read_records(tmp_path / "records.jsonl") if r.ok]
    assert records and {r.request_id for r in records} <= set(rows)
    for rec in records:
        row = rows[rec.request_id]
        assert rec.output_tokens == row["output_tokens"] == 16
        assert rec.prompt_tokens == row["prompt_tokens"]
        assert rec.ttft_s is not None and rec.queue_s is not None
        # the client cannot see the first token before the server sent it (5 ms of clock-mapping slack)
        assert rec.ttft_s >= row["first_token"] - row["arrival"] - 0.005
        assert rec.user == int(str(row["user"]).lstrip("u"))
    steps = json.loads((tmp_path / "steps.json").read_text())
    assert [s["concurrency"] for s in steps] == [1, 2] and all(s["throughput_tok_s"] > 0 for s in steps)


def test_prefill_probe_makes_decode_stalls_visible(tmp_path: Path) -> None:
    with SimulatorProcess("dense") as sim:
        cfg = LoadgenConfig.model_validate({
            "lanes": [{"name": "dense", "url": sim.url, "api": "llamacpp"}],
            "ladder": {"concurrency": [3]}, "warmup_s": 0.3, "min_window_s": 2.0, "max_window_s": 2.5,
            "min_requests": 2, "drain_timeout_s": 2.0, "progress": False, "metrics_port": None,
            "max_loop_lag_s": 1.0,
            "workload": {"output_tokens": {"value": 32}, "prompt_tokens": {"value": 32}, "seed": 1,
                         "prefill_probe_share": 0.3, "prefill_probe_tokens": 3000},
        })
        asyncio.run(run_ladder(cfg, tmp_path))
    records = list(read_records(tmp_path / "records.jsonl"))
    probes = [r for r in records if r.extra.get("probe")]
    assert probes and all(r.prompt_tokens == 3000 for r in probes if r.ok)
    step = json.loads((tmp_path / "steps.json").read_text())[0]
    # a 3000-token prefill holds decode steps of the other users far beyond their usual gap
    assert step["decode_stall_max_ratio"] > 5 and step["decode_stall_max_s"] > 0.05
    assert step["prefill_wait_max_s"] > 0.1
