"""Nothing is exposed beyond the machine by default, and an API key never leaves the process that uses it.

- Every command that serves defaults to 127.0.0.1, and the started servers (simulator, exporter,
  recommender, loadgen's /metrics) really listen on loopback only (their sockets, via psutil).
- A loadgen run whose lane reads its key from an environment variable sends ``Authorization: Bearer <key>``
  and writes the key nowhere: not in the manifest, records, steps, nor stdout/stderr.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest
from prometheus_client import CollectorRegistry

from satbench.cli import build_parser
from satbench.loadgen.metrics import MetricsServer
from testkit.net import free_port
from testkit.process import ChildProcess
from testkit.sim import SimulatorProcess
from tests.faults.hostile import hostile_server

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("command", "argv"), [
    ("sim", []),
    ("exporter", ["--runtime-url", "http://127.0.0.1:8080"]),
    ("recommender", []),
])
def test_every_serving_command_defaults_to_loopback(command: str, argv: list[str]) -> None:
    args = build_parser(only=command).parse_args([command, *argv])
    if command == "recommender":
        from satbench.recommender.cli import build_settings

        host = build_settings(args).host
    else:
        host = args.host
    assert host == "127.0.0.1"


def _listening(pid: int) -> set[str]:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        found = {c.laddr.ip for c in psutil.Process(pid).net_connections(kind="inet")
                 if c.status == psutil.CONN_LISTEN}
        if found:
            return found
        time.sleep(0.1)
    return set()


@contextmanager
def _child(argv: list[str], ready_url: str) -> Iterator[int]:
    with ChildProcess([sys.executable, "-m", "satbench.cli", *argv], name=argv[0], ready_url=ready_url,
                      cwd=REPO) as child:
        yield child.pid


@pytest.mark.slow
def test_started_servers_listen_on_loopback_only() -> None:
    with SimulatorProcess("dense") as sim:
        assert sim.proc is not None
        assert _listening(sim.proc.pid) == {"127.0.0.1"}
        port = free_port()
        with _child(["exporter", "--runtime-url", sim.url, "--port", str(port), "--gpu", "none"],
                    f"http://127.0.0.1:{port}/metrics") as pid:
            assert _listening(pid) == {"127.0.0.1"}
    port = free_port()
    with _child(["recommender", "--port", str(port), "--prometheus-url", "none"],
                f"http://127.0.0.1:{port}/healthz") as pid:
        assert _listening(pid) == {"127.0.0.1"}
    server = MetricsServer(CollectorRegistry(), 0)
    try:
        assert server.url.startswith("http://127.0.0.1:")
        assert _listening(os.getpid()) == {"127.0.0.1"}
    finally:
        server.close()


@pytest.mark.slow
def test_an_api_key_is_sent_but_written_nowhere(tmp_path: Path) -> None:
    key = "sk-satbench-" + secrets.token_hex(12)
    out = tmp_path / "run"

    async def scenario() -> tuple[bytes, bytes, set[str]]:
        async with hostile_server() as server:
            cfg = tmp_path / "loadgen.toml"
            cfg.write_text(
                "warmup_s = 0.2\nmin_window_s = 1.0\nmax_window_s = 1.5\nmin_requests = 1\nmetrics_port = 0\n"
                "max_loop_lag_s = 5.0\n[ladder]\nconcurrency = [1, 2]\n"
                f'[[lanes]]\nname = "secret"\nurl = "{server.url}/c/ok"\n'
                'api_key_env = "SATBENCH_FAULTS_KEY"\n')
            env = {**os.environ, "SATBENCH_FAULTS_KEY": key}
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "satbench.cli", "loadgen", "--config", str(cfg), "--out", str(out),
                cwd=REPO, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
            stdout, stderr = await asyncio.wait_for(proc.communicate(), timeout=90)
            assert proc.returncode == 0, stderr.decode(errors="replace")[-2000:]
            return stdout, stderr, set(server.authorization)

    stdout, stderr, seen = asyncio.run(scenario())
    assert seen == {f"Bearer {key}"}, "the key was not sent (the test would prove nothing)"
    files = [p for p in out.rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {"manifest.json", "records.jsonl", "steps.json"}
    leaks = [str(p) for p in files if key.encode() in p.read_bytes()]
    leaks += [name for name, text in (("stdout", stdout), ("stderr", stderr)) if key.encode() in text]
    assert not leaks, f"the API key appears in {leaks}"
    assert b"SATBENCH_FAULTS_KEY" in (out / "manifest.json").read_bytes(), "the manifest names the variable"
