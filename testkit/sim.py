"""Run the simulator in tests: as a subprocess (``SimulatorProcess``) or in a thread (``InProcessSimulator``).

``SimulatorProcess`` starts ``python -m satbench.cli sim`` on a free loopback port, waits for ``/health`` and
always kills the process on exit, even when the test fails (``testkit.process.ChildProcess``). Keyword
overrides map to command-line flags (``slots``, ``seed``, ``admission``, ``batch``, ``ubatch``,
``time_scale``, ``stream_interval``); ``profile`` is ``dense``, ``moe`` or a TOML path.
``InProcessSimulator`` serves the same app from a background thread (``testkit.process.LoopThread``) and also
exposes the ``SimulatorApp`` (engine, runtime, faults) for white-box assertions.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from types import TracebackType
from typing import Any

from testkit.net import free_port
from testkit.process import ChildProcess, LoopThread

__all__ = ["InProcessSimulator", "SimulatorProcess"]

REPO_ROOT = Path(__file__).resolve().parents[1]
_FLAGS = {
    "slots": "--slots",
    "seed": "--seed",
    "admission": "--admission",
    "batch": "--batch",
    "ubatch": "--ubatch",
    "time_scale": "--time-scale",
    "stream_interval": "--stream-interval",
}


class SimulatorProcess:
    """``with SimulatorProcess("moe", slots=2) as sim: httpx.get(sim.url + "/health")``."""

    def __init__(self, profile: str = "dense", startup_timeout_s: float = 20.0, **overrides: Any) -> None:
        unknown = sorted(set(overrides) - set(_FLAGS))
        if unknown:
            raise TypeError(f"unknown simulator override(s) {unknown}; known: {sorted(_FLAGS)}")
        self.profile = profile
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.argv = [sys.executable, "-m", "satbench.cli", "sim", "--profile", profile]
        self.argv += ["--port", str(self.port)]
        for key, value in overrides.items():
            if value is not None:
                self.argv += [_FLAGS[key], str(value)]
        self.child = ChildProcess(self.argv, name="simulator", ready_url=self.url + "/health", cwd=REPO_ROOT,
                                  startup_timeout_s=startup_timeout_s)

    @property
    def proc(self) -> subprocess.Popen[bytes] | None:
        return self.child.proc

    def __enter__(self) -> SimulatorProcess:
        self.child.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.child.stop()


class InProcessSimulator:
    """The simulator app on a free port, served by an event loop in a daemon thread (``LoopThread``)."""

    def __init__(self, profile: str = "dense", **overrides: Any) -> None:
        from satbench.simulator.profile import load_profile

        self.profile = load_profile(profile).with_overrides(**overrides)
        self.options: Any = None  # the drop-in command line's serving options (``DropIn``), else the defaults
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.app: Any = None
        self._thread = LoopThread("simulator", ready_url=self.url + "/health", stop_timeout_s=10.0)

    async def _serve(self, stop: asyncio.Event) -> None:
        from satbench.simulator.cli import serve

        extra = {} if self.options is None else {"options": self.options}
        await serve(self.profile, "127.0.0.1", self.port, stop, on_app=self._set_app, **extra)

    def _set_app(self, app: Any) -> None:
        self.app = app

    def __enter__(self) -> InProcessSimulator:
        self._thread.start(self._serve)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._thread.stop()
