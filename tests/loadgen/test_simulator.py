"""The ladder against the embedded simulator: records join its ground truth by X-Request-ID."""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path

import httpx
import pytest

from satbench.core.records import read_records
from satbench.loadgen.config import LoadgenConfig
from satbench.loadgen.runner import run_ladder
from testkit.sim import SimulatorProcess

pytestmark = pytest.mark.slow


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
    walked = [s["concurrency"] for s in steps if not s.get("drift_reference")]  # the drift check's re-measure aside
    assert walked == [1, 2] and all(s["throughput_tok_s"] > 0 for s in steps)


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


def _cache_run(tmp_path: Path, url: str, api: str, workload: dict[str, object]) -> Path:
    cfg = LoadgenConfig.model_validate({
        "lanes": [{"name": "dense", "url": url, "api": api, "model": "sim"}],
        "ladder": {"concurrency": [2]}, "warmup_s": 0.3, "min_window_s": 1.0, "max_window_s": 1.5,
        "min_requests": 2, "drain_timeout_s": 2.0, "progress": False, "metrics_port": None,
        "max_loop_lag_s": 1.0, "workload": {"output_tokens": {"value": 8}, **workload},
    })
    asyncio.run(run_ladder(cfg, tmp_path))
    return tmp_path


def test_shared_prefixes_hit_the_prompt_cache_and_cut_ttft(tmp_path: Path) -> None:
    """2000-token prompts cost the dense profile ~200 ms of prefill (0.1 ms a token); with one shared
    1900-token prefix the simulator's prompt cache serves 95 % of each, and TTFT falls with it."""
    long = {"prompt_tokens": {"value": 2000}}
    with SimulatorProcess("dense") as sim:
        unique = _cache_run(tmp_path / "unique", sim.url, "llamacpp", long)
        shared = _cache_run(tmp_path / "shared", sim.url, "llamacpp", {
            **long, "shared_prefix": {"share": 1.0, "prefixes": 1, "tokens": 1900}})
    plain, hit = (json.loads((d / "steps.json").read_text())[0] for d in (unique, shared))
    assert plain["cache_hit_share"] is not None and plain["cache_hit_share"] < 0.05  # BOS and the user's head
    assert hit["cache_hit_share"] > 0.5 and hit["cache_reported_prompt_tokens"] >= 2000 * hit["requests"]
    ratio = hit["ttft_s"]["p50"] / plain["ttft_s"]["p50"]
    print(f"TTFT p50 shared-prefix / unique: {ratio:.3f}")
    assert ratio < 0.8
    records = [r for r in read_records(shared / "records.jsonl") if r.ok]
    assert all(r.extra.get("shared_prefix") == 0 and (r.cached_prompt_tokens or 0) > 0 for r in records[2:])


def test_a_conversation_hits_the_cache_from_its_second_turn(tmp_path: Path) -> None:
    with SimulatorProcess("dense") as sim:
        run = _cache_run(tmp_path, sim.url, "openai-chat", {"prompt_tokens": {"value": 200},
                                                             "conversation": {"turns": 3}})
    records = sorted((r for r in read_records(run / "records.jsonl") if r.ok), key=lambda r: (r.user, r.sent_at))
    later = 0
    for before, rec in itertools.pairwise(records):
        if rec.user != before.user:
            continue
        turn = rec.extra.get("turn", 1)
        assert rec.cached_prompt_tokens is not None and before.prompt_tokens is not None
        if turn == 1:
            assert rec.cached_prompt_tokens < 10  # a new conversation: only the template's opening is shared
        else:  # the whole previous prompt is served from the cache (the answer is retokenised after it)
            assert before.extra.get("turn", 1) == turn - 1
            assert rec.cached_prompt_tokens >= before.prompt_tokens and rec.prompt_tokens > before.prompt_tokens
            later += 1
    assert later >= 4
    step = json.loads((run / "steps.json").read_text())[0]
    assert step["cache_hit_share"] > 0.3
