"""``satbench run --dataset FILE --trace FILE`` end to end on the simulator: a ShareGPT sample drives the closed
ladder's users, then the dense lane replays 10 s of the Mooncake sample at 1x and 8x, and the trace answer
("this node takes N x the recorded traffic") reaches the document, the report, ``satbench capabilities`` and
its Prometheus text, with the evidence of which files it is for.

The truth is the shipped sample files (their sha256, the recorded rate of the window replayed) and the rungs the
session walked: the answer is read between the rates the rungs were offered, so it lies between 1x and 8x
unless even 1x failed (then it says none, with the reason), and its curve has
one point per factor walked.
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


@pytest.mark.slow
def test_a_dataset_and_trace_session_answers_the_recorded_traffic_everywhere(tmp_path: Path) -> None:
    trace_file, dataset_file = SAMPLES / "mooncake_sample.jsonl", SAMPLES / "sharegpt_sample.json"
    trace, dataset = read_trace(trace_file).window(0.0, 10.0), read_dataset(dataset_file)
    config = tmp_path / "dense.toml"
    config.write_text('[[lanes]]\nname = "dense"\nruntime = "simulator"\nprofile = "dense"\n')
    run = run_session(tmp_path / "runs", "--config", str(config), "--dataset", str(dataset_file),
                      "--dataset-sample", "8", "--trace", str(trace_file), "--trace-length", "10",
                      "--speed-factor", "1", "--speed-factor", "8", "--set", "loadgen.trace.max_factor=8",
                      "--set", "loadgen.trace.search_steps=0", "--set", "loadgen.ladder.concurrency=[1, 2]",
                      "--set", "loadgen.ladder.extend=false", "--set", "loadgen.min_window_s=3",
                      "--set", "loadgen.arrival.warmup_s=2", timeout_s=240)
    assert run.returncode in (0, 1), run.stderr[-3000:]
    (run_dir,) = run.run_dirs
    manifest = json.loads((run_dir / "manifest.json").read_text())
    # once on a loaded machine the lane had no dataset entry and the session exited 0 or 1: say why next time
    assert "dense" in manifest.get("datasets", {}), (run.returncode, manifest.get("datasets"), run.stderr[-3000:])
    assert manifest["datasets"]["dense"]["sha256"] == dataset.sha256

    lane = json.loads((run_dir / "recommendations.json").read_text())["lanes"]["dense"]
    assert lane["recommended_concurrency"] is not None  # the dataset's conversations answered a concurrency
    answer = lane["trace"]
    assert answer["trace"]["sha256"] == trace.sha256 and answer["trace"]["window"]["length_s"] == 10.0
    assert answer["recorded_rate_rps"] == pytest.approx(trace.rate_rps)
    assert sorted(p["speed_factor"] for p in answer["curve"]) == [1.0, 8.0]
    if answer["status"] == "none":
        assert answer["max_factor"] is None and answer["reason"]
    else:
        # the rate answer is read on the rate each rung was offered in its window, and turned into factors by
        # the rungs' own (offered, factor) points: a lane that served the 1x rung takes at least 1x
        assert 1.0 <= answer["max_factor"] <= 8.0 + 1e-9
        offered = sorted(p["offered_rps"] or p["rate_rps"] for p in answer["curve"])
        assert offered[0] <= answer["max_rate_rps"] <= offered[-1] * 1.001
    assert lane["rate"] is None

    html = (run_dir / "report.html").read_text()
    assert "Recorded traffic" in html and trace.sha256 in html and "mooncake_sample.jsonl" in html
    assert "the recorded traffic of mooncake_sample.jsonl (window 0-10 s" in html
    assert "speed factor (x the recorded traffic)" in html  # the figure's axis
    assert "Open-loop rates" not in html  # trace rungs are not rate rungs

    printed = subprocess.run([sys.executable, "-m", "satbench.cli", "capabilities", "--file", str(run_dir)],
                             cwd=ROOT, capture_output=True, text=True, timeout=60)
    entry = json.loads(printed.stdout)["lanes"]["dense"]
    assert (entry["trace_max_factor"], entry["trace_status"], entry["trace_sha256"]) == (
        answer["max_factor"], answer["status"], trace.sha256)
    metrics = subprocess.run([sys.executable, "-m", "satbench.cli", "capabilities", "--file", str(run_dir),
                              "--format", "prometheus"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    if answer["max_factor"] is not None:
        assert (f'satbench_trace_max_factor{{lane="dense",status="{answer["status"]}"}} '
                f'{float(answer["max_factor"])!r}') in metrics.stdout
