"""A whole ``satbench run`` over two real llama-server lanes (dense and MoE tiny models).

It exercises every part at once: the session starts one llama-server per lane, an exporter per lane,
Prometheus and the recommender, walks a short ladder, and writes the evidence folder. The checks are the
contract: exit status 0, both lanes answered, the manifest names the exact model bytes (sha256) and the
runtime build (``/props``), and every request is in records.jsonl.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from satbench.models.tiny import describe_model_files

pytestmark = [pytest.mark.real, pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "examples" / "real-llamacpp.toml"


def test_real_session_two_lanes(llama_server_binary: Path, tiny_models: dict[str, Path],
                                tmp_path: Path) -> None:
    if shutil.which("prometheus") is None:
        pytest.skip("the prometheus binary is not installed")
    model_dir = tiny_models["dense"].parent
    argv = [sys.executable, "-m", "satbench.cli", "run", "--config", str(CONFIG), "--out", str(tmp_path),
            "--set", f'model_dir="{model_dir}"', "--set", "loadgen.ladder.concurrency=[1, 2, 4]",
            "--set", "loadgen.ladder.extend=false"]
    env = {**os.environ, "SATBENCH_LLAMA_SERVER": str(llama_server_binary)}
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=850)
    # 0: every lane answered; 1: a lane has no answer, which a real server on a loaded CPU may honestly give
    # (its c=1 throughput once varied 41 % across a 16 s window, over the policy's 25 %): the document says why
    assert done.returncode in (0, 1), f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]

    manifest_text = (run_dir / "manifest.json").read_text()
    manifest = json.loads(manifest_text)
    assert set(manifest["lanes"]) == {"dense", "moe"}
    for entry in describe_model_files(tiny_models.values()):
        assert entry["sha256"] in manifest_text, entry["name"]
    assert "build_info" in manifest_text and "--parallel" in manifest_text

    recommendations = json.loads((run_dir / "recommendations.json").read_text())
    for lane in ("dense", "moe"):
        answer = recommendations["lanes"][lane]
        # undecided: a doubling's gain interval straddled the policy's gain, or a check could not decide, on
        # a tiny model over a shared CPU (moe once, in a clean clone's make test-real): an answer with its reason
        assert answer["status"] in {"ok", "unsaturated", "undecided", "insufficient_data", "degraded"}, (
            answer["status"], answer["reason"], answer["recommended_concurrency"])
        assert [s["concurrency"] for s in answer["steps"]] == [1, 2, 4]
        assert answer["recommended_concurrency"] is not None or answer["reason"], answer
    lanes = recommendations["lanes"]
    unanswered = [lane for lane, answer in lanes.items() if answer["recommended_concurrency"] is None]
    assert done.returncode == (1 if unanswered else 0), (unanswered, done.stdout[-3000:])

    records = [json.loads(line) for line in (run_dir / "records.jsonl").read_text().splitlines()]
    lanes_seen = {r["lane"] for r in records if r["outcome"] == "ok"}
    assert lanes_seen == {"dense", "moe"}
    errors = [r for r in records if r["outcome"] != "ok"]
    assert len(errors) <= 0.01 * len(records), errors[:5]

    steps = json.loads((run_dir / "steps.json").read_text())
    assert {(s["lane"], s["concurrency"]) for s in steps} == {(lane, c) for lane in ("dense", "moe")
                                                               for c in (1, 2, 4)}
    for s in steps:
        where = f"{s['lane']} c={s['concurrency']}"
        assert s["requests"] > 0 and s["throughput_tok_s"] > 0 and s["requests_per_s"] > 0, where
        for name in ("ttft_s", "itl_s", "latency_s", "tpot_s", "queue_s"):
            q = s[name]
            assert q["p50"] is not None and 0 <= q["p50"] <= q["p95"] <= q["p99"], (where, name, q)
        assert s["ttft_s"]["p50"] < s["latency_s"]["p50"], where
        assert s["itl_s"]["p50"] * 2 < s["latency_s"]["p50"] - s["ttft_s"]["p50"], where
        assert 0 < s["jain"] <= 1.0 + 1e-9, where
        assert s["prefill_wait_max_s"] is not None and s["prefill_wait_max_s"] >= s["ttft_s"]["p50"], where
        if s["concurrency"] > 1:
            assert s["decode_stall_max_ratio"] is None or s["decode_stall_max_ratio"] >= 1.0, where
    for lane in ("dense", "moe"):
        for step in recommendations["lanes"][lane]["steps"]:
            occupancy = step.get("occupancy_ratio")
            assert occupancy is not None and 0 < occupancy <= 1.0 + 1e-9, (lane, step)
            assert step["memory_bytes"]["host_rss_max"] and step["memory_bytes"]["host_rss_max"] > 10e6, (lane, step)
