"""Only complete runs are answers: a killed run and a disk-full run are served marked partial, never over a
complete one, and a run folder that exists is refused in one line.

The truth is the scenario's: the complete run is a synthetic 4-slot lane (``testkit.synthetic``: throughput
grows to 4 users and stays flat, so its answer is 4), the killed run a ladder stopped at 2 (its answer can
only be "2, unsaturated", a bound the kill set); a real session is killed with SIGKILL mid-ladder; a full disk
is an injected ``os.write`` that fails with ENOSPC in the middle of the second rung's records, so the first
rung is finished and the second is not, whatever the machine's speed. Every service is reached over real
HTTP (``satbench serve`` as a process, or the app on uvicorn).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from satbench.core.manifest import read_manifest
from satbench.core.records import read_records, write_records
from satbench.loadgen.runner import WalkCutShort, run_ladder
from satbench.recommender.app import create_app
from satbench.recommender.settings import RecommenderSettings
from satbench.report.data import load_run
from testkit.net import free_port, wait_http
from testkit.session import ROOT, start_session
from testkit.sim import SimulatorProcess
from testkit.synthetic import SyntheticLane, simulate_run
from tests.faults.conftest import short_config
from tests.recommender.server import serve

pytestmark = pytest.mark.slow

SLOTS = 4  # the complete run's lane: its answer is 4 (testkit.synthetic)


def write_run(out: Path, run_id: str, ladder: list[int], *, t0: float, lanes: tuple[str, ...] = ("dense",),
              killed: bool = False, torn: bool = False) -> Path:
    """A run folder as a session leaves it; ``killed``: as a SIGKILL mid-walk does (``finished_at`` null, no
    recommendations.json), ``torn``: its last record cut mid-line."""
    manifest, records = simulate_run([SyntheticLane(name, slots=SLOTS) for name in lanes], ladder, t0=t0,
                                     window_s=20.0, run_id=run_id, seed=len(ladder))
    if killed:
        manifest = manifest.model_copy(update={"finished_at": None})
    folder = out / run_id
    folder.mkdir(parents=True)
    manifest.write(folder / "manifest.json")
    write_records(folder / "records.jsonl", records)
    if torn:
        with (folder / "records.jsonl").open("a", encoding="utf-8") as fh:
            fh.write(records[-1].to_json()[:61])
    return folder


@contextlib.contextmanager
def satbench_serve(*folders: Path) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "satbench.cli", "serve", *map(str, folders), "--port", str(port)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{url}/recommendations", timeout_s=60)  # 200 once the runs are analysed
        yield url, proc
    finally:
        proc.terminate()
        proc.communicate(timeout=20)


def lanes_of(doc: dict[str, Any]) -> dict[str, tuple[Any, ...]]:
    return {k: (v["recommended_concurrency"], v["status"], v["run_id"], v.get("partial") is not None)
            for k, v in doc["lanes"].items()}


def test_satbench_serve_serves_the_complete_run_and_lists_the_killed_one_as_partial(tmp_path: Path) -> None:
    now = time.time()
    complete = write_run(tmp_path, "20261205T070000Z-done", [1, 2, 4, 8, 16], t0=now - 7200,
                         lanes=("dense",))
    # measured later, killed at c=2; it also measured a lane no complete run has
    killed = write_run(tmp_path, "20261205T080000Z-kill", [1, 2], t0=now - 3600, lanes=("dense", "moe"),
                       killed=True, torn=True)
    with satbench_serve(tmp_path) as (url, proc):
        doc = httpx.get(f"{url}/recommendations", timeout=10).json()
        caps = httpx.get(f"{url}/capabilities", timeout=10).json()
        runs = httpx.get(f"{url}/runs", timeout=10).json()["runs"]
        one = httpx.get(f"{url}/runs/{killed.name}", timeout=10).json()
    _, err = proc.communicate(timeout=20)
    # before: {"dense": (2, "unsaturated", <killed>)}; the complete run's 4 was hidden by the newer killed run
    assert lanes_of(doc) == {"dense": (SLOTS, "ok", complete.name, False),
                             "moe": (2, "unsaturated", killed.name, True)}
    assert doc["run_id"] == complete.name
    assert "finished_at null" in doc["lanes"]["moe"]["partial"] and killed.name in doc["lanes"]["moe"]["partial"]
    cut = caps["lanes"]
    assert (cut["dense"]["max_useful_concurrency"], cut["dense"].get("partial")) == (SLOTS, None)
    assert cut["moe"]["max_useful_concurrency"] == 2 and "finished_at null" in cut["moe"]["partial"]
    assert [(r["key"], r["complete"], r["serves"]) for r in runs] == [
        (complete.name, True, ["dense"]), (killed.name, False, ["moe"])]
    assert one["partial"] is not None and "killed" in one["partial"]
    said = [n for n in doc["notes"] if killed.name in n]
    assert len(said) == 1 and "is partial" in said[0] and "moe" in said[0] and "dense" not in said[0]
    assert f"{killed}: partial" in err  # satbench serve said it at start
    # the torn last record was cut and said in the killed run's own analysis
    notes = one["recommendations"]["notes"]
    assert any("records.jsonl: 1 line(s), 61 bytes cut (a torn last line" in n for n in notes), notes
    problems = load_run(killed).problems  # and in its report
    assert any(p.startswith("partial run: it did not finish") for p in problems), problems
    assert any(p.startswith("records.jsonl: 1 line(s), 61 bytes cut") for p in problems), problems


def _kill_tree(proc: subprocess.Popen[str], pids: set[int]) -> None:
    """SIGKILL the session (as an OOM killer would), then the children it started (each by its pid)."""
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    for pid in sorted(pids):
        with contextlib.suppress(psutil.NoSuchProcess):
            psutil.Process(pid).kill()
    psutil.wait_procs([p for pid in pids if (p := _process(pid)) is not None], timeout=15)


def _process(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except psutil.NoSuchProcess:
        return None


@pytest.mark.skipif(shutil.which("prometheus") is None, reason="Prometheus is not installed")
@pytest.mark.timeout(300)
def test_a_session_killed_mid_ladder_is_served_only_as_partial(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    proc, watcher = start_session(out, "--set", "loadgen.ladder.concurrency=[1, 2, 4, 8]")
    deadline = time.monotonic() + 200
    manifest = None
    while time.monotonic() < deadline and proc.poll() is None:
        found = list(out.glob("*/manifest.json"))
        if found:
            with contextlib.suppress(OSError, ValueError):
                manifest = read_manifest(found[0])
            if manifest is not None and len(manifest.steps) >= 1:
                break
        time.sleep(0.2)
    try:
        assert manifest is not None and manifest.steps, "the session finished no rung in time"
    finally:
        _kill_tree(proc, watcher.stop())
    killed = out / manifest.run_id
    left = read_manifest(killed / "manifest.json")
    assert left.finished_at is None and left.partial is not None and not (killed / "recommendations.json").exists()
    assert max(w.concurrency for w in left.steps) < 8  # killed mid-ladder
    # a complete run of the same lane, measured an hour before the kill
    complete = write_run(out, "20261205T070000Z-done", [1, 2, 4, 8, 16], t0=left.created_at - 3600)
    with satbench_serve(out) as (url, _):
        doc = httpx.get(f"{url}/recommendations", timeout=10).json()
        runs = {r["key"]: r for r in httpx.get(f"{url}/runs", timeout=10).json()["runs"]}
    assert lanes_of(doc)["dense"] == (SLOTS, "ok", complete.name, False)
    assert runs[killed.name]["complete"] is False and "dense" not in runs[killed.name]["serves"]
    for key, lane in doc["lanes"].items():  # what only the killed run measured is marked so
        if lane["run_id"] == killed.name:
            assert lane["partial"] is not None, key
    assert any(killed.name in n and "is partial" in n for n in doc["notes"])


class FullDuringSecondRung:
    """``os.write`` on a disk that fills in the middle of the third record of the second rung (c=2): the
    records before it are written whole (``whole`` counts their bytes), then ENOSPC."""

    def __init__(self) -> None:
        self.second = 0
        self.whole = 0
        self.full = False

    def __call__(self, fd: int, data: memoryview) -> int:
        if self.full:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        line = bytes(data)
        if json.loads(line)["concurrency"] == 2:
            self.second += 1
            if self.second == 3:
                self.full = True
                return os.write(fd, line[: len(line) // 2])  # what fit
        self.whole += len(line)
        return os.write(fd, line)


def test_a_disk_full_walk_leaves_a_readable_run_marked_partial(sim: SimulatorProcess, tmp_path: Path) -> None:
    run_dir = tmp_path / "20261205T090000Z-full"
    disk = FullDuringSecondRung()
    config = short_config(sim.url, ladder={"concurrency": [1, 2, 4]})
    with pytest.raises(WalkCutShort) as caught:
        asyncio.run(run_ladder(config, run_dir, run_id=run_dir.name, records_write=disk))
    said = str(caught.value)
    assert "\n" not in said and "the walk was cut short: the disk is full" in said and "No space left" in said
    assert "1 finished rung(s), marked partial" in said
    manifest = read_manifest(run_dir / "manifest.json")
    assert manifest.finished_at is None and manifest.cut_short is not None and "disk is full" in manifest.cut_short
    assert [w.concurrency for w in manifest.steps] == [1]  # the rung in flight is not a rung
    assert manifest.partial is not None and manifest.partial.startswith("its walk was cut short")
    records = list(read_records(run_dir / "records.jsonl", strict=True))  # every line whole, none torn
    assert (run_dir / "records.jsonl").stat().st_size == disk.whole
    assert sum(r.concurrency == 2 for r in records) == 2 and any(r.concurrency == 1 for r in records)
    assert sorted(p.name for p in run_dir.iterdir()) == ["manifest.json", "records.jsonl", "steps.json"]
    problems = load_run(run_dir).problems  # its report says it
    assert any(p.startswith("partial run: its walk was cut short: the disk is full") for p in problems), problems

    settings = RecommenderSettings(prometheus_url=None, run_dirs=[run_dir], recorded_answers=True)
    with serve(create_app(settings), ready_path="/recommendations") as url:
        lane = httpx.get(f"{url}/recommendations", timeout=10).json()["lanes"]["dense"]
        listed = httpx.get(f"{url}/runs", timeout=10).json()["runs"]
    assert lane["partial"] is not None and "disk is full" in lane["partial"]
    assert [(r["key"], r["complete"]) for r in listed] == [(run_dir.name, False)]


def test_a_run_folder_that_exists_is_refused_in_one_line_not_resumed(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    killed = write_run(out, "night-1", [1, 2], t0=time.time() - 600, killed=True)
    before = sorted(p.name for p in killed.iterdir())
    proc = subprocess.run([sys.executable, "-m", "satbench.cli", "run", "--out", str(out), "--run-id", "night-1"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    line = proc.stderr.strip()
    assert "\n" not in line and "Traceback" not in line
    assert line.startswith(f"satbench run: run folder {killed} already exists (a partial run: it did not finish")
    assert "move the folder aside" in line
    assert sorted(p.name for p in killed.iterdir()) == before and sorted(p.name for p in out.iterdir()) == ["night-1"]


def test_a_killed_attempt_moved_aside_never_hides_its_finished_rerun(tmp_path: Path) -> None:
    # the refusal's way out: the killed attempt's folder moved aside (X.killed), the run walked again as X
    now = time.time()
    first = write_run(tmp_path, "night-1", [1, 2], t0=now - 7200, killed=True)
    first.rename(tmp_path / "night-1.killed")  # sorts before night-1/ in a folder listing
    rerun = write_run(tmp_path, "night-1", [1, 2, 4, 8, 16], t0=now - 3600)
    with satbench_serve(tmp_path) as (url, _):  # the folders named one by one
        served = lanes_of(httpx.get(f"{url}/recommendations", timeout=10).json())
    assert served == {"dense": (SLOTS, "ok", "night-1", False)}
    settings = RecommenderSettings(prometheus_url=None, runs_dir=tmp_path, recorded_answers=True)
    with serve(create_app(settings), ready_path="/recommendations") as url:  # a recommender on the folder
        doc = httpx.get(f"{url}/recommendations", timeout=10).json()
        runs = httpx.get(f"{url}/runs", timeout=10).json()["runs"]
    assert lanes_of(doc) == {"dense": (SLOTS, "ok", "night-1", False)}
    assert [(r["key"], r["complete"]) for r in runs] == [("night-1", True)] and rerun.is_dir()
