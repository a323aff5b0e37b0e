"""A short real session (two simulator lanes, ladder 1/2, 3 s windows) shared by the session tests."""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[2]
# A secret planted in the shared session, three ways: the dense lane's api_key_env value, an --api-key
# server argument on the command line, and the same key in the lane's config. No file of the run folder
# may hold it (test_session). The moe lane runs 2 slots instead of its profile's, to check the settings that ran.
PLANTED_KEY_ENV = "SATBENCH_PLANTED_KEY"
PLANTED_SECRET = "sk-planted-" + secrets.token_hex(8)
PLANTED_LANES = (
    'lanes=[{name = "dense", profile = "dense", api_key_env = "' + PLANTED_KEY_ENV + '", '
    'server_args = ["--api-key", "' + PLANTED_SECRET + '"]}, {name = "moe", profile = "moe", parallel = 2}]'
)
SHORT = [
    "--set",
    "loadgen.ladder.concurrency=[1, 2]",
    "--set",
    "loadgen.ladder.extend=false",  # exactly the two rungs: the tests check the windows one by one
    "--set",
    "loadgen.warmup_s=0.5",
    "--set",
    "loadgen.min_window_s=3",
    "--set",
    "loadgen.max_window_s=3",
    "--set",
    "loadgen.drain_timeout_s=1",
    "--set",
    "loadgen.min_requests=2",
    "--set",
    "policy.min_requests_per_step=2",
    "--set",
    "policy.max_throughput_ci_ratio=1.0",
    "--set",
    "loadgen.max_loop_lag_s=0.5",  # plumbing, not accuracy: a loaded test machine must not void the steps
]


@dataclass
class SessionRun:
    returncode: int
    stdout: str
    stderr: str
    descendants: set[int]
    out_dir: Path
    wall_s: float
    run_dirs: list[Path] = field(default_factory=list)


class DescendantWatcher:
    """Records every descendant PID of a process while it runs (polled), to check none survives it."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.seen: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(psutil.Error):
                self.seen.update(p.pid for p in psutil.Process(self.pid).children(recursive=True))
            time.sleep(0.1)

    def stop(self) -> set[int]:
        self._stop.set()
        self._thread.join()
        return self.seen


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_session(out_dir: Path, *extra: str, env: dict[str, str] | None = None,
                  ) -> tuple[subprocess.Popen[str], DescendantWatcher]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "satbench.cli", "run", "--out", str(out_dir), *SHORT, *extra],
        cwd=ROOT,
        env=None if env is None else {**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # A test run started in the background (a shell's ``&``) inherits SIGINT ignored, and so would the
        # session; the Ctrl-C test needs the session to see SIGINT as a terminal's Ctrl-C delivers it.
        preexec_fn=_default_sigint,
    )
    return proc, DescendantWatcher(proc.pid)


def survivors(pids: set[int]) -> list[str]:
    out = []
    for pid in pids:
        try:
            p = psutil.Process(pid)
            if p.status() != psutil.STATUS_ZOMBIE:
                out.append(f"{pid} {' '.join(p.cmdline())[:120]}")
        except psutil.NoSuchProcess:
            continue
    return out


# session-scoped: test_session and test_session_artefacts read one run (a session costs ~30 s of the suite)
@pytest.fixture(scope="session")
def short_session(tmp_path_factory: pytest.TempPathFactory) -> SessionRun:
    out_dir = tmp_path_factory.mktemp("runs")
    started = time.monotonic()
    proc, watcher = start_session(out_dir, "--set", PLANTED_LANES, env={PLANTED_KEY_ENV: PLANTED_SECRET})
    try:
        stdout, stderr = proc.communicate(timeout=110)
    finally:
        if proc.poll() is None:
            proc.kill()
    pids = watcher.stop()
    return SessionRun(
        proc.returncode,
        stdout,
        stderr,
        pids,
        out_dir,
        time.monotonic() - started,
        sorted(p for p in out_dir.iterdir() if p.is_dir()),
    )
