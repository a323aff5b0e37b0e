"""Run the simulator in tests: as a subprocess (``SimulatorProcess``) or in a thread (``InProcessSimulator``).

``SimulatorProcess`` starts ``python -m satbench.cli sim`` on a free loopback port, waits for ``/health`` and
always kills the process on exit, even when the test fails. Keyword overrides map to command-line flags
(``slots``, ``seed``, ``admission``, ``batch``, ``ubatch``, ``time_scale``); ``profile`` is ``dense``, ``moe``
or a TOML path. ``InProcessSimulator`` serves the same app from a background thread and also exposes the
``SimulatorApp`` (engine, runtime, faults) for white-box assertions.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from testkit.net import free_port, wait_http

__all__ = ["InProcessSimulator", "SimulatorProcess"]

REPO_ROOT = Path(__file__).resolve().parents[1]
_FLAGS = {
    "slots": "--slots",
    "seed": "--seed",
    "admission": "--admission",
    "batch": "--batch",
    "ubatch": "--ubatch",
    "time_scale": "--time-scale",
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
        self.startup_timeout_s = startup_timeout_s
        self.argv = [sys.executable, "-m", "satbench.cli", "sim", "--profile", profile]
        self.argv += ["--port", str(self.port)]
        for key, value in overrides.items():
            if value is not None:
                self.argv += [_FLAGS[key], str(value)]
        self.proc: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None

    def __enter__(self) -> SimulatorProcess:
        self._stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            self.argv, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=self._stderr, stdin=subprocess.DEVNULL
        )
        try:
            wait_http(self.url + "/health", timeout_s=self.startup_timeout_s)
        except BaseException:
            err = self._kill()
            raise RuntimeError(f"simulator did not start: {' '.join(self.argv)}\n{err}") from None
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._kill()

    def _kill(self) -> str:
        proc, self.proc = self.proc, None
        if proc is None:
            return ""
        proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
        err = self._stderr
        if err is None:
            return ""
        self._stderr = None
        err.seek(0)
        text = err.read().decode(errors="replace")[-2000:]
        err.close()
        return text


class InProcessSimulator:
    """The simulator app on a free port, served by an event loop in a daemon thread."""

    def __init__(self, profile: str = "dense", **overrides: Any) -> None:
        from simulator.profile import load_profile

        self.profile = load_profile(profile).with_overrides(**overrides)
        self.options: Any = None  # the drop-in command line's serving options (``DropIn``), else the defaults
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="simulator", daemon=True)
        self.app: Any = None

    def _run(self) -> None:
        from simulator.cli import serve

        asyncio.set_event_loop(self._loop)
        self._stop = asyncio.Event()
        extra = {} if self.options is None else {"options": self.options}
        main = serve(self.profile, "127.0.0.1", self.port, self._stop, on_app=self._set_app, **extra)
        self._loop.run_until_complete(main)
        self._loop.close()

    def _set_app(self, app: Any) -> None:
        self.app = app

    def __enter__(self) -> InProcessSimulator:
        self._thread.start()
        wait_http(self.url + "/health", timeout_s=20.0)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        stop = self._stop
        if stop is not None:
            self._loop.call_soon_threadsafe(stop.set)
        self._thread.join(timeout=10)
