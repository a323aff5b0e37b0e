"""Wire tests: the ladder against a stream server on loopback (in-process, or a killed subprocess)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web

from satbench.core.manifest import read_manifest
from satbench.core.records import read_records
from satbench.loadgen.config import LoadgenConfig
from satbench.loadgen.runner import LadderRunner, run_ladder
from testkit.net import free_port, wait_http
from testkit.stream_server import StreamServer, StreamServerConfig

FAST = {"warmup_s": 0.3, "min_window_s": 1.0, "max_window_s": 2.0, "min_requests": 2, "drain_timeout_s": 1.0,
        "max_loop_lag_s": 1.0, "progress": False,
        "workload": {"output_tokens": {"kind": "fixed", "value": 12}, "prompt_tokens": {"value": 16}}}


def config(url: str, api: str = "llamacpp", ladder: list[int] | None = None, *, drift_reference: bool = True,
           **extra: Any) -> LoadgenConfig:
    data = {**FAST, "lanes": [{"name": "dense", "url": url, "api": api, "model": "tiny"}],
            "ladder": {"concurrency": ladder or [1, 2], "drift_reference": drift_reference}, **extra}
    return LoadgenConfig.model_validate(data)


async def with_server(cfg: StreamServerConfig, body: Any) -> Any:
    server = StreamServer(cfg)
    url = await server.start()
    try:
        return await body(server, url)
    finally:
        await server.stop()


@pytest.mark.slow
def test_two_rung_ladder_writes_records_steps_manifest_and_metrics(tmp_path: Path) -> None:
    posted: list[dict[str, Any]] = []

    async def body(server: StreamServer, url: str) -> tuple[Any, ...]:
        async def runs(request: web.Request) -> web.Response:
            posted.append(await request.json())
            return web.json_response({"ok": True}, status=201)

        app = web.Application()
        app.router.add_post("/runs", runs)
        runner_app = web.AppRunner(app)
        await runner_app.setup()
        port = free_port()
        await web.TCPSite(runner_app, "127.0.0.1", port).start()
        cfg = config(url, "openai-chat", recommender_url=f"http://127.0.0.1:{port}")
        runner = LadderRunner(cfg, tmp_path, run_id="20261129T000000Z-test")
        try:
            metrics_port = runner.start_metrics()
            manifest = await runner.run()
            text = (await asyncio.to_thread(httpx.get, f"http://127.0.0.1:{metrics_port}/metrics")).text
            ok = runner.registry.get_sample_value("loadgen_requests_total",
                                                  {"lane": "dense", "outcome": "ok"})
            step = runner.registry.get_sample_value("loadgen_step_concurrency",
                                                    {"lane": "dense", "run_id": "20261129T000000Z-test"})
        finally:
            runner.close()
            await runner_app.cleanup()
        assert "loadgen_itl_seconds_bucket" in text and "loadgen_in_flight" in text
        return manifest, ok, step, dict(server.truth)

    manifest, ok_metric, step_metric, truth = asyncio.run(with_server(StreamServerConfig(itl_s=0.002), body))
    records = list(read_records(tmp_path / "records.jsonl", strict=True))
    assert {r.concurrency for r in records} == {1, 2}
    assert {r.request_id for r in records} == set(truth)  # every request carried its X-Request-ID
    assert len({r.request_id for r in records}) == len(records)
    assert all(r.outcome == "ok" and r.output_tokens == 12 and r.prompt_tokens for r in records)
    assert all(len(r.itl_s) == 11 and r.queue_s is not None for r in records)
    assert {r.phase for r in records} >= {"warmup", "window"}
    assert ok_metric == len(records) and step_metric == 0
    steps = json.loads((tmp_path / "steps.json").read_text())
    assert [(s["concurrency"], s["drift_reference"]) for s in steps] == [(1, None), (2, None), (1, 1)]  # c=1 again
    assert all(s["throughput_tok_s"] > 0 and s["requests"] >= 2 for s in steps)
    on_disk = read_manifest(tmp_path / "manifest.json")
    assert [(w.lane, w.concurrency, w.drift_reference) for w in on_disk.steps] == [
        ("dense", 1, False), ("dense", 2, False), ("dense", 1, True)]  # the drift check's re-measure last
    assert all(w.start < w.end and (w.warmup_start or 0) < w.start for w in on_disk.steps)
    assert on_disk.clients["dense"]["api"] == "openai-chat" and "rtt_s" in on_disk.clients["dense"]
    assert manifest.finished_at is not None
    assert posted and posted[0]["run_id"] == "20261129T000000Z-test" and len(posted[0]["steps"]) == 3


@pytest.mark.slow
def test_streams_dropped_mid_response_and_malformed_are_counted(tmp_path: Path) -> None:
    async def body(server: StreamServer, url: str) -> Any:
        manifest = await run_ladder(config(url, "openai-completions", [3], recommender_url="http://127.0.0.1:9"),
                                    tmp_path)
        return manifest, dict(server.truth)

    faults = StreamServerConfig(itl_s=0.002, drop_every=4, malformed_every=7)
    manifest, truth = asyncio.run(with_server(faults, body))
    records = list(read_records(tmp_path / "records.jsonl", strict=True))
    outcomes = {r.outcome for r in records}
    assert outcomes == {"ok", "dropped", "malformed"}
    assert {r.request_id for r in records} == set(truth)
    dropped = [r for r in records if r.outcome == "dropped"]
    assert all(r.output_tokens == 6 and r.ttft_s is not None for r in dropped)
    step = json.loads((tmp_path / "steps.json").read_text())[0]
    assert step["errors_by_outcome"]["dropped"] >= 1 and step["requests"] >= 2
    assert any(n.startswith("errors: ") for n in manifest.steps[0].notes)


@pytest.mark.slow
def test_keepalive_close_before_any_byte_is_retried_once(tmp_path: Path) -> None:
    async def body(server: StreamServer, url: str) -> Any:
        return await run_ladder(config(url, "llamacpp", [2], metrics_port=None), tmp_path)

    asyncio.run(with_server(StreamServerConfig(itl_s=0.001, close_every=5), body))
    records = list(read_records(tmp_path / "records.jsonl", strict=True))
    retried = [r for r in records if r.retried]
    assert retried and all(r.outcome == "ok" for r in records)
    assert len({r.request_id for r in records}) == len(records)


@pytest.mark.slow
def test_server_killed_mid_step_run_continues_and_step_is_marked(tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "testkit.stream_server", "--port", str(port),
                             "--itl-ms", "5"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_http(f"http://127.0.0.1:{port}/health")

        async def body() -> Any:
            cfg = config(f"http://127.0.0.1:{port}", "llamacpp", [2, 4], min_window_s=1.5, max_window_s=2.0,
                         min_requests=2)
            task = asyncio.create_task(run_ladder(cfg, tmp_path))
            # killed once the first rung's first request has ended (by what the run did, not a wall-clock
            # guess: on a loaded machine the run may take longer than any fixed delay to get there)
            records = tmp_path / "records.jsonl"
            while not task.done() and not (records.exists() and any(r.ok for r in read_records(records))):
                await asyncio.sleep(0.02)
            proc.kill()
            return await task

        manifest = asyncio.run(body())
    finally:
        proc.kill()
        proc.wait(timeout=10)
    records = list(read_records(tmp_path / "records.jsonl", strict=True))
    assert len(manifest.steps) == 2  # the run went on to the next rung
    by_outcome = {o: sum(1 for r in records if r.outcome == o) for o in {r.outcome for r in records}}
    assert by_outcome.get("ok", 0) > 0 and by_outcome.get("refused", 0) > 0
    first, second = manifest.steps
    assert first.reason is not None and "unreachable" in first.reason and not second.valid
    assert any("refused" in n for n in first.notes)
    steps = json.loads((tmp_path / "steps.json").read_text())
    assert steps[1]["requests"] == 0 and steps[1]["errors_by_outcome"]["refused"] > 0


@pytest.mark.parametrize("api", ["openai-chat", "openai-completions", "llamacpp"])
def test_each_flavour_counts_tokens_on_the_wire(tmp_path: Path, api: str) -> None:
    async def body(server: StreamServer, url: str) -> Any:
        return await run_ladder(config(url, api, [1], min_window_s=0.5, max_window_s=0.6, warmup_s=0.0,
                                       metrics_port=None), tmp_path)

    asyncio.run(with_server(StreamServerConfig(), body))
    records = list(read_records(tmp_path / "records.jsonl"))
    assert records and all(r.ok and r.output_tokens == 12 and len(r.itl_s) == 11 for r in records)


@pytest.mark.slow
def test_a_shared_registry_can_serve_repeated_runs(tmp_path: Path) -> None:
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()

    async def body(server: StreamServer, url: str) -> Any:
        for i in range(2):
            cfg = config(url, "llamacpp", [1], min_window_s=0.3, max_window_s=0.4, warmup_s=0.0,
                         metrics_port=None)
            await run_ladder(cfg, tmp_path / str(i), registry=registry)

    asyncio.run(with_server(StreamServerConfig(), body))
    assert registry.get_sample_value("loadgen_in_flight", {"lane": "dense"}) is None  # unregistered after
