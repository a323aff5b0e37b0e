"""A whole ``satbench run`` for tests: started as a user starts it, watched for the children it leaves behind.

Why here: the session tests, the dashboards' panel replay and the fleet-store comparison all need a real
session, and a real session is the most expensive thing the suite does (Prometheus, exporters, a recommender,
runtimes, a ladder walk: some 30 s on two cores). They read the one shared run that ``tests/conftest.py``
starts once (``SHARED_LANES``: every lane shape they inspect, a router node, a planted secret and, where
VictoriaMetrics is installed, a remote-write store); a test that needs its own session (Ctrl-C, a failed
start, an external node) starts one with ``start_session``/``run_session``. Settings are ``SHORT``: ladder
1/2, 3 s windows, 2 requests a rung, no drift re-measures: plumbing and evidence, not accuracy.

``DescendantWatcher`` records every descendant PID while the session runs (polled), so a test can check that
none survives it (``survivors``).
"""

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
from typing import TYPE_CHECKING

import psutil

if TYPE_CHECKING:
    from testkit.victoria import VictoriaMetricsProcess

__all__ = [
    "PLANTED_KEY_ENV",
    "PLANTED_SECRET",
    "RELAY_LANE",
    "ROOT",
    "ROUTER_MODEL",
    "SECOND_NODE",
    "SHARED_LANES",
    "SHORT",
    "DescendantWatcher",
    "SessionRun",
    "SharedSession",
    "run_session",
    "start_session",
    "survivors",
]

ROOT = Path(__file__).resolve().parents[1]

SHORT = [
    "--set",
    "loadgen.ladder.concurrency=[1, 2]",
    "--set",
    "loadgen.ladder.extend=false",  # exactly the two rungs: the tests check the windows one by one
    "--set",
    # no re-measures for the drift check, which would double a two-rung walk; the shared session asks for them
    "loadgen.ladder.drift_reference=false",
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
    # plumbing and evidence, not accuracy: a loaded test machine (a parallel suite) must not void the steps
    "--set",
    "loadgen.max_loop_lag_s=0.5",
    "--set",
    "loadgen.max_idle_share=0.5",
]

# A secret planted in the shared session, three ways: the relay lane's api_key_env value, an --api-key server
# argument on the command line, and the same key in the lane's config. No file of the run folder may hold it.
PLANTED_KEY_ENV = "SATBENCH_PLANTED_KEY"
PLANTED_SECRET = "sk-planted-" + secrets.token_hex(8)

# The shared session's lanes, one of each shape the tests read:
# - ``dense`` with one slot (the settings that ran: asked 1, got 1; it saturates at c=1, so the answer carries a
#   saturation figure) behind the exporter's relay (the load generator sends through it), with the planted key;
# - ``moe`` as its profile is (eight slots: decode stalls at c=2), no relay;
# - node ``gpu1``: ONE simulator in router mode holding two models, each a lane whose series carry
#   ``node="gpu1"``: a second ``dense`` (one lane name on two nodes: keys ``dense`` and ``gpu1/dense``) with its
#   profile's slots, and ``moe`` as model ``big-moe`` with 2 slots (its own child's settings).
RELAY_LANE, SECOND_NODE, ROUTER_MODEL = "dense", "gpu1", "big-moe"
SHARED_LANES = (
    f'lanes=[{{name = "{RELAY_LANE}", profile = "dense", parallel = 1, relay = true, '
    f'api_key_env = "{PLANTED_KEY_ENV}", server_args = ["--api-key", "{PLANTED_SECRET}"]}}, '
    '{name = "moe", profile = "moe"}, '
    f'{{name = "{RELAY_LANE}", profile = "dense", node = "{SECOND_NODE}"}}, '
    f'{{name = "moe", profile = "moe", node = "{SECOND_NODE}", model = "{ROUTER_MODEL}", parallel = 2}}]'
)


@dataclass
class SessionRun:
    returncode: int
    stdout: str
    stderr: str
    descendants: set[int]
    out_dir: Path
    wall_s: float
    run_dirs: list[Path] = field(default_factory=list)

    @property
    def run_dir(self) -> Path:
        """The one run folder the session wrote (an error naming what it left otherwise)."""
        if len(self.run_dirs) != 1:
            raise AssertionError(f"{len(self.run_dirs)} run folders, rc {self.returncode}\n{self.stderr[-3000:]}")
        return self.run_dirs[0]


@dataclass
class SharedSession:
    """The shared run and the remote-write store it fed (None where VictoriaMetrics is not installed)."""

    run: SessionRun
    store: VictoriaMetricsProcess | None


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
    """``satbench run --out OUT_DIR`` with ``SHORT`` and ``extra``; stdout and stderr are pipes."""
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


def run_session(out_dir: Path, *extra: str, env: dict[str, str] | None = None,
                timeout_s: float = 150.0) -> SessionRun:
    """A session run to its end (killed after ``timeout_s``), with what it printed and every child it had."""
    started = time.monotonic()
    proc, watcher = start_session(out_dir, *extra, env=env)
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate(timeout=30)
        stderr += f"\n(the session was killed after {timeout_s:g} s)"
    finally:
        pids = watcher.stop()
    return SessionRun(proc.returncode, stdout, stderr, pids, out_dir, time.monotonic() - started,
                      sorted(p for p in out_dir.iterdir() if p.is_dir()))


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
