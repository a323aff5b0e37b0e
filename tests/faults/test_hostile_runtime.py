"""Hostile runtime answers are counted as ``malformed`` (or the documented outcome), never a crash, never a
memory blow-up: the client's buffers are bounded by ``max_event_bytes`` whatever the server sends.
"""

from __future__ import annotations

import asyncio
import tracemalloc
from pathlib import Path

import pytest

from satbench.core.records import read_records
from satbench.loadgen.client import LaneClient, RawResult
from satbench.loadgen.config import LoadgenConfig
from satbench.loadgen.runner import run_ladder
from tests.faults.hostile import HUGE_BYTES, hostile_server

MAX_EVENT = 64 << 10


def _config(url: str, **extra: object) -> LoadgenConfig:
    return LoadgenConfig.model_validate({
        "lanes": [{"name": "hostile", "url": url, "api": "llamacpp"}], "max_event_bytes": MAX_EVENT,
        "request_timeout_s": 20.0, "metrics_port": None, "progress": False, **extra})


async def _send(case: str) -> tuple[RawResult, dict[str, int]]:
    async with hostile_server() as server:
        config = _config(f"{server.url}/c/{case}")
        client = LaneClient(config.lanes[0], config)
        await client.open(1)
        try:
            result = await client.send(b'{"prompt":"x","stream":true}', f"rid-{case}")
        finally:
            await client.close()
        return result, dict(server.bytes_sent)


def test_a_well_formed_stream_is_ok() -> None:
    result, _ = asyncio.run(_send("ok"))
    assert result.outcome == "ok" and len(result.token_ns) == 3


@pytest.mark.parametrize("case", ["non_json", "html", "json_body", "binary"])
def test_hostile_bodies_are_malformed(case: str) -> None:
    result, _ = asyncio.run(_send(case))
    assert result.outcome == "malformed", result
    assert result.error


def test_a_never_ending_line_is_cut_at_the_bound_without_buffering_it() -> None:
    tracemalloc.start()
    try:
        result, sent = asyncio.run(_send("huge_line"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.outcome == "malformed" and "over" in (result.error or "")
    assert sent.get("huge_line", 0) < HUGE_BYTES, "the client read the whole 64 MiB line"
    assert peak < 16 << 20, f"peak traced memory {peak / 2**20:.1f} MiB for a {MAX_EVENT >> 10} KiB bound"


def test_events_with_missing_fields_are_malformed() -> None:
    result, _ = asyncio.run(_send("missing_fields"))
    assert result.outcome == "malformed", result


def test_negative_timings_are_malformed() -> None:
    result, _ = asyncio.run(_send("negative_timings"))
    assert result.outcome == "malformed", result


def test_wrongly_typed_timings_do_not_crash() -> None:
    result, _ = asyncio.run(_send("wrong_types"))
    assert result.outcome in ("ok", "malformed")
    if result.summary is not None:
        assert result.summary.prompt_ms is None and result.summary.output_tokens is None


@pytest.mark.slow
def test_a_ladder_against_a_hostile_server_finishes_and_records_every_request(tmp_path: Path) -> None:
    async def run() -> None:
        async with hostile_server() as server:
            config = _config(f"{server.url}/c/non_json", ladder={"concurrency": [2]}, warmup_s=0.2,
                             min_window_s=1.0, max_window_s=1.5, min_requests=1, drain_timeout_s=1.0,
                             max_loop_lag_s=5.0)
            await run_ladder(config, tmp_path, run_id="hostile-run")

    asyncio.run(run())
    records = list(read_records(tmp_path / "records.jsonl", strict=True))
    assert records and {r.outcome for r in records} == {"malformed"}
    steps = (tmp_path / "manifest.json").read_text()
    assert "malformed=" in steps and '"valid": false' in steps
