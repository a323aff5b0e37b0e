"""Launcher for simulator lanes: one ``satbench sim`` subprocess per lane on a loopback port.

The simulator is started as a separate process (not a thread of the session) so that its CPU time, RSS and
event loop are its own, as a real runtime's are: the exporter reads its RSS by PID and the load generator's
event loop is not slowed by it. Readiness is ``GET /health`` answering 200, as for ``llama-server``.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from satbench.runtimes.processes import ChildProcess, ProcessSet, wait_until_ready

__all__ = ["SimulatorRuntime", "simulator_argv", "start_simulator"]


@dataclass(frozen=True, slots=True)
class SimulatorRuntime:
    """A running simulator lane; satisfies ``satbench.runtimes.RunningRuntime``."""

    name: str
    url: str
    pid: int
    profile: str
    log_path: Path
    command: tuple[str, ...] = ()
    props: Mapping[str, Any] = field(default_factory=dict)
    kind: str = "simulator"

    def evidence(self) -> dict[str, Any]:
        return {"runtime": "simulator", "profile": self.profile, "url": self.url, "pid": self.pid,
                "command": list(self.command)}


def simulator_argv(profile: str, host: str, port: int, python: str = sys.executable, *, slots: int | None = None,
                   batch: int | None = None, ubatch: int | None = None, ctx_size: int | None = None) -> list[str]:
    """``satbench sim`` for a lane: the profile's serving settings unless ``slots``/``batch``/``ubatch`` or
    ``ctx_size`` (llama-server's ``-c``, the whole context; it selects the drop-in command line, whose
    ``/metrics`` is off unless asked for, so ``--metrics`` comes with it) are set."""
    argv = [python, "-m", "satbench.cli", "sim", "--profile", profile, "--host", host, "--port", str(port)]
    for flag, value in (("--slots", slots), ("--batch", batch), ("--ubatch", ubatch)):
        if value is not None:
            argv += [flag, str(value)]
    if ctx_size is not None:
        argv += ["-c", str(ctx_size), "--metrics"]
    return argv


def start_simulator(
    processes: ProcessSet,
    lane: str,
    profile: str,
    *,
    port: int,
    host: str = "127.0.0.1",
    timeout_s: float = 30.0,
    slots: int | None = None,
    batch: int | None = None,
    ubatch: int | None = None,
    ctx_size: int | None = None,
) -> SimulatorRuntime:
    """Starts the lane's simulator and returns once it answers ``/health`` (raises ``StartError`` if not)."""
    argv = simulator_argv(profile, host, port, slots=slots, batch=batch, ubatch=ubatch, ctx_size=ctx_size)
    child: ChildProcess = processes.start(f"sim-{lane}", argv)
    url = f"http://{host}:{port}"
    wait_until_ready(child, f"{url}/health", timeout_s=timeout_s)
    try:
        resp = httpx.get(f"{url}/props", timeout=5.0)
        props = resp.json() if resp.status_code == 200 else {}
    except (httpx.HTTPError, ValueError):
        props = {}
    return SimulatorRuntime(
        name=lane,
        url=url,
        pid=child.pid,
        profile=profile,
        log_path=child.log_path,
        command=tuple(argv),
        props=props if isinstance(props, dict) else {},
    )
