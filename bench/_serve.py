"""What the benches share: a free loopback port, a target server in a child process, and its truth.

Imported by the scripts in this folder (their own folder is on ``sys.path`` when they run).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from satbench.core.net import free_port  # noqa: E402


@contextlib.contextmanager
def serving(*args: str, pin: bool = False, timeout_s: float = 30.0) -> Iterator[str]:
    """Runs ``python -m ARGS --port P`` (the simulator CLI or the stream server) until its ``/health`` answers
    200, yields its URL, kills it after. ``pin``: the server on CPU 1 and this process on CPU 0."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", *args, "--port", str(port)], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if pin:
        os.sched_setaffinity(proc.pid, {1})
        os.sched_setaffinity(0, {0})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{' '.join(args)} did not start")
            time.sleep(0.1)
        yield url
    finally:
        proc.kill()
        proc.wait(timeout=10)


def truth_by_id(url: str) -> dict[str, dict[str, Any]]:
    """The target's own record of every request (``GET /sim/truth``: the simulator or the stream server), by
    ``X-Request-ID``; the simulator's capacity figures are not asked for."""
    data = httpx.get(url + "/sim/truth", params={"capacity": "0"}, timeout=30).json()
    return {row["request_id"]: row for row in data["requests"]}
