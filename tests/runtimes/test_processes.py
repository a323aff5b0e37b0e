"""Child processes run in their own groups and are all stopped, grandchildren included."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import psutil
import pytest

from satbench.runtimes.processes import ProcessSet, StartError, wait_until_ready

SPAWNER = (
    "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
    "print('started', flush=True); time.sleep(60)"
)


def test_stop_all_kills_the_whole_group(tmp_path: Path) -> None:
    processes = ProcessSet(tmp_path / "logs", grace_s=2.0)
    child = processes.start("spawner", [sys.executable, "-c", SPAWNER])
    deadline = time.monotonic() + 20
    while "started" not in child.log_path.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    family = [child.pid, *(p.pid for p in psutil.Process(child.pid).children(recursive=True))]
    assert len(family) == 2
    processes.stop_all()
    time.sleep(0.2)
    alive = [p for p in family if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert alive == []
    processes.stop_all()  # idempotent


def test_a_child_that_dies_early_is_a_start_error_with_its_output(tmp_path: Path) -> None:
    processes = ProcessSet(tmp_path / "logs")
    try:
        child = processes.start(
            "dies", [sys.executable, "-c", "print('port 1 is taken'); raise SystemExit(3)"]
        )
        with pytest.raises(StartError, match="dies exited with code 3: port 1 is taken"):
            wait_until_ready(child, "http://127.0.0.1:9/health", timeout_s=20)
    finally:
        processes.stop_all()


def test_a_missing_binary_is_a_start_error(tmp_path: Path) -> None:
    processes = ProcessSet(tmp_path / "logs")
    with pytest.raises(StartError, match="cannot start ghost"):
        processes.start("ghost", ["/nonexistent/binary"])
    processes.stop_all()
