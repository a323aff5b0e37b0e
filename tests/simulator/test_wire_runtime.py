"""Real HTTP on loopback: concurrency, ground truth, simulated memory, faults, the subprocess helper."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from satbench.simulator.profile import load_profile
from satbench.simulator.stepcost import step_seconds
from testkit.sim import InProcessSimulator, SimulatorProcess


@pytest.fixture
def sim() -> Iterator[InProcessSimulator]:
    with InProcessSimulator("dense") as s:
        yield s


async def _one_stream(client: httpx.AsyncClient, url: str, i: int, n: int) -> dict[str, Any]:
    body = {
        "prompt": "tell me a story " * 4,
        "n_predict": n,
        "ignore_eos": True,
        "stream": True,
        "user": f"u{i}",
    }
    tokens, final = 0, None
    async with client.stream(
        "POST", url + "/completion", json=body, headers={"X-Request-ID": f"req-{i}"}
    ) as r:
        assert r.status_code == 200
        async for line in r.aiter_lines():
            if line.startswith("data: "):
                event = json.loads(line[6:])
                if event["stop"]:
                    final = event
                else:
                    tokens += 1
    assert final is not None
    return {"tokens": tokens, "final": final}


@pytest.mark.slow
def test_64_concurrent_streams_are_served_and_recorded() -> None:
    n_streams, n_tokens = 64, 16

    async def run(url: str) -> list[dict[str, Any]]:
        limits = httpx.Limits(max_connections=n_streams + 4)
        async with httpx.AsyncClient(timeout=60.0, limits=limits) as client:
            return await asyncio.gather(*(_one_stream(client, url, i, n_tokens) for i in range(n_streams)))

    with SimulatorProcess("dense") as proc:
        t0 = time.time()
        results = asyncio.run(run(proc.url))
        assert all(r["tokens"] == n_tokens for r in results)
        truth = httpx.get(proc.url + "/sim/truth", params={"since": t0 - 1, "capacity": "0"}).json()
    records = {r["request_id"]: r for r in truth["requests"]}
    assert set(records) == {f"req-{i}" for i in range(n_streams)}
    for rec in records.values():
        assert rec["arrival"] <= rec["admitted"] <= rec["first_token"] <= rec["last_token"]
        assert rec["output_tokens"] == n_tokens and 0 <= rec["slot"] < 4
        assert rec["user"].startswith("u")
    # never more than 4 requests hold a slot at once
    events = sorted(
        [(r["admitted"], 1) for r in records.values()] + [(r["last_token"], -1) for r in records.values()]
    )
    running = peak = 0
    for _, delta in events:
        running += delta
        peak = max(peak, running)
    assert peak <= 4
    assert truth["timing"]["steps"] > 0


def test_truth_follows_the_model_exactly_and_maps_to_wall_time(sim: InProcessSimulator) -> None:
    profile = load_profile("dense")
    before = time.time()
    body = {"prompt": "one two three four five six seven", "n_predict": 5, "ignore_eos": True,
            "cache_prompt": False}  # the same prompt twice would otherwise reuse the slot's cache
    httpx.post(sim.url + "/completion", json=body, timeout=10)
    resp = httpx.post(sim.url + "/completion", json=body, timeout=10, headers={"X-Request-ID": "exact"})
    timings = resp.json()["timings"]
    after = time.time()
    truth = httpx.get(sim.url + "/sim/truth", params={"since": before}).json()
    rec = next(r for r in truth["requests"] if r["request_id"] == "exact")
    assert before <= rec["arrival"] <= rec["last_token"] <= after + 0.05
    prefill = step_seconds(profile.cost, 0, 8, profile.server.ubatch)
    decode = step_seconds(profile.cost, 1, 0, profile.server.ubatch)
    assert rec["first_token"] - rec["admitted"] == pytest.approx(prefill, abs=2e-6)
    assert rec["last_token"] - rec["first_token"] == pytest.approx(4 * decode, abs=2e-6)
    assert timings["prompt_n"] == 8 and timings["predicted_ms"] == pytest.approx(4 * decode * 1e3, abs=1e-2)
    generated = [r for r in truth["requests"] if r["request_id"] != "exact"]
    assert generated and len(generated[0]["request_id"]) >= 16  # an id is generated when the header is absent
    later = httpx.get(sim.url + "/sim/truth", params={"since": after + 10}).json()
    assert later["requests"] == []
    curve = truth["capacity"]["points"]
    assert [p["concurrency"] for p in curve] == [1, 2, 4, 8] and curve[0]["method"] == "closed_form"
    custom = httpx.get(
        sim.url + "/sim/capacity", params={"prompt_tokens": 32, "output_tokens": 32, "concurrency": "3"}
    )
    assert custom.json()["points"][0]["concurrency"] == 3
    assert httpx.get(sim.url + "/sim/capacity", params={"concurrency": "0"}).status_code == 400


def test_simulated_gpu_memory_grows_with_kv_in_use(sim: InProcessSimulator) -> None:
    assert sim.app is not None and sim.app.runtime.engine.profile.name == "dense"
    idle = httpx.get(sim.url + "/sim/gpu").json()
    assert idle["simulated"] is True and all(g["simulated"] for g in idle["gpus"])
    assert idle["kv_used_bytes"] == 0 and idle["memory_used_bytes"] > idle["weights_bytes"]
    body = {"prompt": "word " * 500, "n_predict": 400, "ignore_eos": True, "stream": True}
    with httpx.Client(timeout=10.0) as client, client.stream("POST", sim.url + "/completion", json=body) as r:
        lines = r.iter_lines()  # keep the iterator: dropping it closes the stream
        next(lines)
        busy = client.get(sim.url + "/sim/gpu").json()
        active = client.get(sim.url + "/sim/truth", params={"capacity": "0"}).json()["active"]
    assert len(active) == 1 and active[0]["finish_reason"] is None and active[0]["output_tokens"] >= 1
    assert busy["kv_used_tokens"] > 500, busy
    assert busy["memory_used_bytes"] > idle["memory_used_bytes"]


def _set_faults(url: str, *faults: dict[str, Any]) -> None:
    resp = httpx.post(url + "/sim/faults", json={"faults": list(faults)})
    assert resp.status_code == 200, resp.text


def test_faults_disable_endpoints_like_llama_server(sim: InProcessSimulator, llamacpp_fixtures: Path) -> None:
    _set_faults(sim.url, {"kind": "metrics_disabled"}, {"kind": "slots_disabled"})
    metrics = httpx.get(sim.url + "/metrics")
    assert metrics.status_code == 501
    real = json.loads((llamacpp_fixtures / "extras/metrics_without_flag.txt").read_text())
    assert metrics.json() == real
    assert httpx.get(sim.url + "/slots").status_code == 501
    props = httpx.get(sim.url + "/props").json()
    assert props["endpoint_slots"] is False and props["endpoint_metrics"] is False
    _set_faults(sim.url)
    assert httpx.get(sim.url + "/metrics").status_code == 200
    listed = httpx.get(sim.url + "/sim/faults").json()
    assert listed["faults"] == []


@pytest.mark.slow
def test_faults_break_generation(sim: InProcessSimulator) -> None:
    body = {"prompt": "hi", "n_predict": 10, "ignore_eos": True, "stream": True}
    _set_faults(sim.url, {"kind": "http_5xx", "status": 503, "duration_s": 30})
    assert httpx.post(sim.url + "/completion", json=body, timeout=10).status_code == 503
    _set_faults(sim.url, {"kind": "malformed_sse", "after_tokens": 2})
    lines = [ln for ln in httpx.post(sim.url + "/completion", json=body, timeout=10).text.split("\n\n") if ln]
    bad = [ln for ln in lines if not _is_json_event(ln)]
    assert len(bad) == 1
    _set_faults(sim.url, {"kind": "drop_stream", "after_tokens": 3})
    with pytest.raises(httpx.HTTPError):
        httpx.post(sim.url + "/completion", json=body, timeout=10)
    _set_faults(sim.url, {"kind": "stall", "after_tokens": 2, "delay_s": 0.4})
    t0 = time.monotonic()
    ok = httpx.post(sim.url + "/completion", json=body, timeout=10)
    assert ok.status_code == 200 and time.monotonic() - t0 >= 0.4
    _set_faults(sim.url, {"kind": "slow_metrics", "delay_s": 0.3})
    t0 = time.monotonic()
    assert httpx.get(sim.url + "/metrics").status_code == 200 and time.monotonic() - t0 >= 0.3
    bad_fault = httpx.post(sim.url + "/sim/faults", json={"faults": [{"kind": "meteor"}]})
    assert bad_fault.status_code == 400


def _is_json_event(event: str) -> bool:
    try:
        json.loads(event.removeprefix("data: "))
    except json.JSONDecodeError:
        return False
    return True


def test_subprocess_helper_applies_overrides_and_cleans_up() -> None:
    with SimulatorProcess("moe", slots=3, seed=7) as proc:
        props = httpx.get(proc.url + "/props").json()
        assert props["total_slots"] == 3 and props["simulator"]["profile"] == "moe"
        assert proc.proc is not None
        pid_proc = proc.proc
    assert pid_proc.poll() is not None
    with pytest.raises(TypeError):
        SimulatorProcess("dense", colour="blue")


def test_cli_rejects_a_bad_profile(tmp_path: Path) -> None:
    import argparse

    from satbench.simulator import cli

    bad = tmp_path / "bad.toml"
    bad.write_text("[server]\nslots = 0\n[cost]\nweights_ms = 1.0\n", encoding="utf-8")
    parser = argparse.ArgumentParser()
    cli.configure(parser)
    assert cli.main(parser.parse_args(["--profile", str(bad)])) == 2
    assert cli.main(parser.parse_args(["--profile", str(tmp_path / "missing.toml")])) == 2
