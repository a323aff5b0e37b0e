"""``satbench run --trace FILE`` and ``--dataset FILE`` end to end on the simulator, and their bad input.

The truth is the shipped sample files themselves (their sha256, their requests, their conversations) and the
simulator's counts: the run's manifest names the file replayed, the trace rungs carry their speed factors and
the recorded rate times the factor, and a dataset's users send its conversations. A bad file or a flag without
its file is one line naming the file (or the flag), and nothing starts.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from satbench.loadgen.datasets import read_dataset
from satbench.loadgen.traces import read_trace
from testkit.session import ROOT, run_session

SAMPLES = ROOT / "examples" / "traces"


def _lane(tmp_path: Path) -> Path:
    config = tmp_path / "dense.toml"
    config.write_text('[[lanes]]\nname = "dense"\nruntime = "simulator"\nprofile = "dense"\n')
    return config


@pytest.mark.slow
def test_a_trace_session_replays_the_trace_at_its_factors(tmp_path: Path) -> None:
    sample = SAMPLES / "mooncake_sample.jsonl"
    trace = read_trace(sample).window(0.0, 10.0)
    run = run_session(tmp_path / "runs", "--config", str(_lane(tmp_path)), "--trace", str(sample),
                      "--trace-length", "10", "--speed-factor", "1", "--speed-factor", "8",
                      "--set", "loadgen.trace.max_factor=8", "--set", "loadgen.trace.search_steps=0",
                      "--set", "loadgen.min_window_s=3", "--set", "loadgen.arrival.warmup_s=2", timeout_s=240)
    assert run.returncode == 0, run.stderr[-3000:]
    (run_dir,) = run.run_dirs
    manifest = json.loads((run_dir / "manifest.json").read_text())
    evidence = manifest["traces"]["dense"]
    assert evidence["sha256"] == trace.sha256 and evidence["window"]["requests"] == len(trace.requests)
    assert evidence["speed_factors"] == [1.0, 8.0]
    rungs = {w["speed_factor"]: w for w in manifest["steps"] if w.get("speed_factor")}
    assert set(rungs) == {1.0, 8.0}
    assert rungs[8.0]["rate_rps"] == pytest.approx(8 * trace.rate_rps, rel=1e-6)
    doc = json.loads((run_dir / "recommendations.json").read_text())
    assert doc["lanes"]["dense"]["rate"] is None  # trace rungs are not open-loop rate rungs
    assert (run_dir / "report.html").exists()


@pytest.mark.slow
def test_a_sharegpt_session_sends_the_dataset_conversations(tmp_path: Path) -> None:
    sample = SAMPLES / "sharegpt_sample.json"
    data = read_dataset(sample)
    run = run_session(tmp_path / "runs", "--config", str(_lane(tmp_path)), "--dataset", str(sample),
                      "--dataset-sample", "12", "--set", "loadgen.min_window_s=3", timeout_s=240)
    assert run.returncode == 0, run.stderr[-3000:]
    (run_dir,) = run.run_dirs
    manifest = json.loads((run_dir / "manifest.json").read_text())
    evidence = manifest["datasets"]["dense"]
    assert evidence["sha256"] == data.sha256 and evidence["conversations_used"] == 12
    doc = json.loads((run_dir / "recommendations.json").read_text())
    assert doc["lanes"]["dense"]["recommended_concurrency"] >= 1  # an answer for the dataset's traffic
    assert (run_dir / "report.html").exists()


@pytest.mark.parametrize(("args", "said"), [
    (["--trace", "{tmp}/gone.jsonl"], "gone.jsonl: no such trace file"),
    (["--trace", "{tmp}/bad.jsonl"], "bad.jsonl:2: timestamp goes back"),
    (["--dataset", "{tmp}/empty.json"], "empty.json:1: empty conversation"),
    (["--speed-factor", "2"], "--speed-factor needs --trace FILE"),
    (["--trace", "{samples}/mooncake_sample.jsonl", "--speed-factor", "-1"], "factors"),
])
def test_bad_traffic_input_is_one_line_and_nothing_starts(tmp_path: Path, args: list[str], said: str) -> None:
    (tmp_path / "bad.jsonl").write_text('{"timestamp": 9, "input_length": 5, "output_length": 2}\n'
                                        '{"timestamp": 1, "input_length": 5, "output_length": 2}\n')
    (tmp_path / "empty.json").write_text('[{"conversations": []}]')
    out = tmp_path / "out"
    out.mkdir()
    argv = [a.format(tmp=tmp_path, samples=SAMPLES) for a in args]
    done = subprocess.run([sys.executable, "-m", "satbench.cli", "run", "--out", str(out), *argv],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and said in lines[0], done.stderr
    assert not any(out.iterdir())
