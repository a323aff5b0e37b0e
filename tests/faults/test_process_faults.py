"""Processes that vanish: the runtime killed and restarted mid-step, the load generator killed with SIGKILL.

- Runtime gone: requests are recorded as ``refused`` (no status) while it is away, the step is marked
  "runtime unreachable", and requests succeed again once it is back on the same port.
- Load generator killed: every request the server finished (``/sim/truth``, joined on ``X-Request-ID``)
  comfortably before the kill is in ``records.jsonl``, which still parses (a torn last line is skipped).
  "Comfortably" is ``KILL_MARGIN_S`` (50 ms): room for the client to read the server's last byte and write
  its line; on an idle machine 10 ms is enough.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path

import httpx
import pytest

from satbench.core.records import read_records
from satbench.loadgen.runner import run_ladder
from testkit.process import ChildProcess
from testkit.sim import SimulatorProcess
from tests.faults.conftest import short_config

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
KILL_MARGIN_S = 0.05


def test_a_runtime_that_dies_and_returns_is_refused_then_served(tmp_path: Path) -> None:
    times: dict[str, float] = {}

    async def scenario(sim: SimulatorProcess) -> None:
        config = short_config(sim.url, ladder={"concurrency": [2]}, min_window_s=6.0, max_window_s=7.0,
                              request_timeout_s=5.0)
        task = asyncio.create_task(run_ladder(config, tmp_path, run_id="refused-run"))
        await asyncio.sleep(1.0)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, sim.child.stop)  # killed; started again on the same port
        times["killed"] = time.time()
        await asyncio.sleep(0.8)
        await loop.run_in_executor(None, sim.child.start)
        times["back"] = time.time()
        await task

    with SimulatorProcess("dense", seed=7) as sim:
        asyncio.run(scenario(sim))
    records = list(read_records(tmp_path / "records.jsonl", strict=True))
    refused = [r for r in records if r.outcome == "refused"]
    assert refused and all(r.status is None for r in refused), {r.outcome for r in records}
    assert all(times["killed"] - 0.5 <= r.sent_at <= times["back"] + 0.5 for r in refused)
    assert any(r.ok and r.sent_at >= times["back"] for r in records), "no request succeeded after the restart"
    manifest = (tmp_path / "manifest.json").read_text()
    assert "runtime unreachable" in manifest


def test_sigkill_keeps_every_request_that_had_ended(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with SimulatorProcess("dense", seed=7) as sim:
        cfg = tmp_path / "loadgen.toml"
        cfg.write_text(
            "warmup_s = 0.2\nmin_window_s = 60.0\nmax_window_s = 60.0\nmetrics_port = 0\nprogress = false\n"
            "max_loop_lag_s = 5.0\n[ladder]\nconcurrency = [4]\n"
            "[workload]\nprompt_tokens = { value = 16 }\noutput_tokens = { value = 12 }\n"
            f'[[lanes]]\nname = "dense"\nurl = "{sim.url}"\napi = "llamacpp"\n')
        with ChildProcess([sys.executable, "-m", "satbench.cli", "loadgen", "--config", str(cfg), "--out", str(out),
                           "--run-id", "kill-run"], name="loadgen", cwd=REPO) as child:
            records_path = out / "records.jsonl"
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                if records_path.exists() and records_path.stat().st_size > 20_000:
                    break
                time.sleep(0.1)
            time.sleep(0.3)
            killed_at = time.time()
            os.kill(child.pid, signal.SIGKILL)
        truth = httpx.get(f"{sim.url}/sim/truth", params={"capacity": "0"}, timeout=30).json()
    finished = {r["request_id"]: r["last_token"] for r in truth["requests"]
                if r["finish_reason"] != "cancelled" and r["last_token"] is not None}
    before = {rid for rid, t in finished.items() if t < killed_at - KILL_MARGIN_S}
    assert len(before) >= 20, f"only {len(before)} requests ended before the kill"
    recorded = {r.request_id for r in read_records(out / "records.jsonl")}
    missing = sorted(before - recorded)
    assert not missing, f"{len(missing)} finished requests are not in records.jsonl: {missing[:5]}"
    assert recorded <= set(finished) | {r["request_id"] for r in truth["active"]}
