"""The child processes of a session, and the guarantee that none outlives it.

Each child starts in its own session (``start_new_session=True``), so it leads a process group and a
signal to the group reaches everything it forked. ``ProcessSet.stop_all`` sends SIGTERM to every group in
reverse start order, waits up to a grace period, then SIGKILLs what is left. It runs from the session's
``finally``, from an ``atexit`` hook (an unexpected exit) and, through ``install_signal_handlers``, on
SIGTERM/SIGHUP (turned into ``SystemExit`` so the ``finally`` runs); Ctrl-C already raises
KeyboardInterrupt. A SIGKILL of the session itself cannot be caught: children then keep running, which is
why each child's command line carries the run folder, for a human to find them.

Output of each child goes to ``<run_dir>/logs/<name>.log``; the last lines are quoted when it dies early.

Why here, with the runtimes: the launchers start their servers through it (the simulator, the router) and
raise its ``StartError`` (an external lane that does not answer), and the session and the tune start the
launchers. Kept in ``session/`` it made the runtimes import the session that imports them; here every arrow
points down (``tests/test_layout.py``, ``TOP_ORDER``).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import IO

import httpx

__all__ = [
    "ChildProcess",
    "ProcessSet",
    "StartError",
    "install_signal_handlers",
    "log_tail",
    "wait_until_ready",
]


class StartError(RuntimeError):
    """A part of the session could not start; the message is the one-line reason shown to the user."""


@dataclass
class ChildProcess:
    name: str
    argv: list[str]
    popen: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None


def log_tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:])


class ProcessSet:
    """Starts children in their own process groups and stops them all, once, in reverse order."""

    def __init__(self, log_dir: Path, *, grace_s: float = 5.0) -> None:
        self.log_dir = log_dir
        self.grace_s = grace_s
        self.children: list[ChildProcess] = []
        self._logs: list[IO[bytes]] = []
        atexit.register(self.stop_all)

    def start(
        self, name: str, argv: Sequence[str], *, env: dict[str, str] | None = None, cwd: Path | None = None
    ) -> ChildProcess:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{name}.log"
        log = log_path.open("ab")
        self._logs.append(log)
        try:
            popen = subprocess.Popen(
                list(argv),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=env,
                cwd=cwd,
            )
        except OSError as exc:
            raise StartError(f"cannot start {name} ({argv[0]}): {exc}") from exc
        child = ChildProcess(name=name, argv=list(argv), popen=popen, log_path=log_path)
        self.children.append(child)
        return child

    def pids(self) -> list[int]:
        return [c.pid for c in self.children]

    def stop(self, child: ChildProcess) -> None:
        self._signal(child, signal.SIGTERM)
        try:
            child.popen.wait(timeout=self.grace_s)
        except subprocess.TimeoutExpired:
            self._signal(child, signal.SIGKILL)
            child.popen.wait(timeout=5)
        self._signal(child, signal.SIGKILL)  # stragglers of the group (grandchildren)

    def stop_all(self) -> None:
        """Idempotent: SIGTERM to every group (reverse order), then SIGKILL after the grace period."""
        live = [c for c in reversed(self.children)]
        for child in live:
            self._signal(child, signal.SIGTERM)
        deadline = time.monotonic() + self.grace_s
        for child in live:
            try:
                child.popen.wait(timeout=max(0.05, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self._signal(child, signal.SIGKILL)
                child.popen.wait(timeout=5)
            self._signal(child, signal.SIGKILL)
        self.children.clear()
        for log in self._logs:
            log.close()
        self._logs.clear()
        atexit.unregister(self.stop_all)

    @staticmethod
    def _signal(child: ChildProcess, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, sig)


def wait_until_ready(
    child: ChildProcess,
    url: str,
    *,
    timeout_s: float,
    ready: Callable[[httpx.Response], bool] | None = None,
    client: httpx.Client | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Polls ``url`` until ``ready(response)`` (default: status 200); raises StartError if the child dies."""
    check = ready or (lambda r: r.status_code == 200)
    own = client is None
    http = client or httpx.Client(timeout=1.0)
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    try:
        while time.monotonic() < deadline:
            if not child.alive():
                raise StartError(
                    f"{child.name} exited with code {child.popen.returncode}: "
                    f"{log_tail(child.log_path) or 'no output'} (log: {child.log_path})"
                )
            try:
                resp = http.get(url)
                if check(resp):
                    return
                last = f"HTTP {resp.status_code}"
            except httpx.HTTPError as exc:
                last = type(exc).__name__
            sleep(0.1)
    finally:
        if own:
            http.close()
    raise StartError(
        f"{child.name} did not answer {url} within {timeout_s:.0f} s (last: {last}; log: {child.log_path})"
    )


def install_signal_handlers() -> Callable[[], None]:
    """SIGTERM and SIGHUP raise SystemExit(128+n) so cleanup runs; returns a function restoring the old."""
    previous: dict[int, object] = {}

    def _raise(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        previous[sig] = signal.signal(sig, _raise)

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]

    return restore
