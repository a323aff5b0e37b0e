"""Bad input, a runtime that refuses a candidate, ``--resume``, and the controls around a start.

The refusing runtime is a llamacpp lane whose ``llama-server`` is a stand-in script (``tests/tune/standins.py``):
for ``--parallel 4`` it prints llama.cpp's out-of-memory refusal and exits, otherwise it runs the simulator
with the same command line, so the llamacpp launcher runs for real.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from satbench.answer.document import read_document
from satbench.cli import main as satbench_main
from satbench.tune.config import TuneConfigError, default_ctx_per_slot, load_tune_config
from satbench.tune.models import read_tune
from satbench.tune.run import run_tune
from tests.tune.sections import PLUMBING_POLICY, SHORT_WINDOWS
from tests.tune.standins import REFUSAL, fake_llama_server


@pytest.mark.parametrize(("table", "named"), [
    ("parallel = [0, 4]", "tune.parallel: "),
    ("ubatch = []", "tune.ubatch: "),
    ("batch = [64]\nubatch = [128]", "tune.batch: "),
    ("paralel = [2]", "tune.paralel: unknown setting (did you mean parallel?"),
    ("lanes = ['nope']", "tune.lanes: no lane 'nope'"),
    ("ctx_per_slot = 'big'", "tune.ctx_per_slot: "),
])
def test_bad_tune_input_is_one_line_naming_the_setting(tmp_path: Path, table: str, named: str) -> None:
    path = tmp_path / "t.toml"
    path.write_text(f"[tune]\n{table}\n", encoding="utf-8")
    with pytest.raises(TuneConfigError) as err:
        load_tune_config(path)
    assert named in str(err.value) and "\n" not in str(err.value)


def test_an_external_lane_cannot_be_tuned(tmp_path: Path) -> None:
    path = tmp_path / "t.toml"
    path.write_text('[[lanes]]\nname = "node"\nruntime = "external"\nurl = "http://127.0.0.1:9"\n', encoding="utf-8")
    with pytest.raises(TuneConfigError, match=r"tune\.lanes: every lane is external"):
        load_tune_config(path)


def test_bad_input_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "t.toml"
    path.write_text("[tune]\nubatch = [128, 128]\n", encoding="utf-8")
    assert satbench_main(["tune", "--config", str(path), "--out", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("satbench tune: invalid tune config: tune.ubatch:") and "\n" not in err
    assert not (tmp_path / "runs").exists()


def test_the_default_context_per_slot_covers_the_longest_request() -> None:
    setup = load_tune_config(None, {"loadgen.workload.prefill_probe_share": 0.2,
                                    "loadgen.workload.prefill_probe_tokens": 2000})
    assert setup.ctx_per_slot == 2304  # 2000-token probe + 80 output tokens, rounded up to 256
    assert default_ctx_per_slot(setup.session.loadgen.workload) == 2304
    assert [lane.name for lane in setup.lanes] == ["dense", "moe"]
    assert setup.tune.pairs() == [(128, 128), (256, 256), (512, 512)]


@pytest.mark.slow
def test_a_refused_candidate_is_marked_with_the_servers_message_and_resume_skips_measured_ones(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SATBENCH_LLAMA_SERVER", str(fake_llama_server(tmp_path)))
    models = tmp_path / "models"
    models.mkdir()
    (models / "tiny.gguf").write_bytes(b"GGUF-not-really")
    config = tmp_path / "tune.toml"
    config.write_text(f"""
model_dir = "{models}"

[[lanes]]
name = "real"
runtime = "llamacpp"
model_file = "tiny.gguf"
{SHORT_WINDOWS}{PLUMBING_POLICY}
[tune]
parallel = [2, 4]
ubatch = [256]
ladder = [1]
""", encoding="utf-8")
    setup = load_tune_config(config)
    first = run_tune(setup, command=["satbench", "tune"], out_dir=tmp_path / "runs", say=lambda _: None)
    lane = first.document.lanes["real"]
    by_id = {c.id: c for c in lane.candidates}
    refused = by_id["np4-b256-ub256-c1024"]
    assert refused.state == "refused" and REFUSAL in (refused.reason or ""), refused
    measured = by_id["np2-b256-ub256-c512"]
    assert measured.state == "measured" and lane.winner and lane.winner.id == measured.id, lane
    assert lane.flags == "-np 2 -b 256 -ub 256 -c 512" and measured.folder
    command = (Path(measured.folder) / "command.txt").read_text()
    assert "--parallel 2" in command and "-b 256" in command and "-c 512" in command

    records = Path(measured.folder) / "records.jsonl"
    size = records.stat().st_size
    second = run_tune(setup, command=["satbench", "tune"], resume=first.tune_dir, say=lambda _: None)
    again = second.document.lanes["real"]
    assert again.resumed == 1 and again.winner and again.winner.id == measured.id
    assert again.winner.throughput_tok_s == lane.winner.throughput_tok_s
    assert records.stat().st_size == size  # not walked again
    assert read_tune(first.tune_dir / "tune.json").lanes["real"].resumed == 1


@pytest.mark.slow
def test_a_search_with_no_feasible_candidate_exits_1(tmp_path: Path) -> None:
    script = tmp_path / "llama-server"
    script.write_text(f'#!/bin/sh\necho "{REFUSAL}" >&2\nexit 1\n', encoding="utf-8")
    script.chmod(0o755)
    models = tmp_path / "models"
    models.mkdir()
    (models / "tiny.gguf").write_bytes(b"GGUF-not-really")
    config = tmp_path / "tune.toml"
    config.write_text(f'model_dir = "{models}"\n[[lanes]]\nname = "real"\nruntime = "llamacpp"\n'
                      'model_file = "tiny.gguf"\n[tune]\nparallel = [2]\nubatch = [256]\n', encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "satbench.cli", "tune", "--config", str(config), "--out",
                           str(tmp_path / "runs")], capture_output=True, text=True, timeout=60,
                          env={"SATBENCH_LLAMA_SERVER": str(script), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 1, proc.stderr
    assert "real: no feasible candidate" in proc.stdout and REFUSAL in proc.stdout


TWO_NODES = """
[[lanes]]
name = "dense"
profile = "dense"
node = "a"

[[lanes]]
name = "dense"
profile = "dense"
node = "b"
"""


def test_a_lane_name_two_nodes_serve_is_named_by_its_key(tmp_path: Path) -> None:
    path = tmp_path / "t.toml"
    path.write_text(TWO_NODES + "[tune]\nlanes = ['dense']\n", encoding="utf-8")
    with pytest.raises(TuneConfigError) as err:
        load_tune_config(path)
    assert "tune.lanes: 'dense' is a lane of several nodes (a/dense, b/dense)" in str(err.value)
    path.write_text(TWO_NODES + "[tune]\nlanes = ['b/dense']\n", encoding="utf-8")
    assert [lane.key for lane in load_tune_config(path).lanes] == ["b/dense"]
    one_node = '[[lanes]]\nname = "dense"\nprofile = "dense"\nnode = "a"\n'
    path.write_text(one_node + "[tune]\nlanes = ['dense', 'a/dense']\n", encoding="utf-8")
    with pytest.raises(TuneConfigError, match=r"tune\.lanes: 'a/dense' names lane a/dense again"):
        load_tune_config(path)


@pytest.mark.slow
def test_one_lane_name_on_two_nodes_is_tuned_apart_by_node(tmp_path: Path) -> None:
    """Two nodes' ``dense`` lanes: each tuned on its own, keyed ``node/lane`` in every file the tune writes,
    each answer its own node's (before, both wrote under ``dense`` and neither found its answer)."""
    config = tmp_path / "tune.toml"
    # node a as a [[nodes]] table with labels, node b as a lane naming it: both spellings of a fleet
    config.write_text("""
[[nodes]]
name = "a"
labels = { gpu = "h100" }
[[nodes.lanes]]
name = "dense"
profile = "dense"

[[lanes]]
name = "dense"
profile = "dense"
node = "b"

[loadgen]
warmup_s = 0.2
min_window_s = 1.5
max_window_s = 2.0
min_requests = 4
drain_timeout_s = 1.0
[loadgen.ladder]
drift_reference = false  # no re-measures for the drift check: not tested here

[policy]
min_requests_per_step = 4
max_throughput_ci_ratio = 10.0  # plumbing, not accuracy: 1.5 s windows

[tune]
parallel = [1]
ubatch = [256]
ladder = [1]
""", encoding="utf-8")
    setup = load_tune_config(config)
    result = run_tune(setup, command=["satbench", "tune"], out_dir=tmp_path / "runs", say=lambda _: None)
    assert set(result.document.lanes) == {"a/dense", "b/dense"}
    for key in ("a/dense", "b/dense"):
        lane = result.document.lanes[key]
        assert lane.winner is not None and lane.recommended_concurrency is not None, (key, lane)
        assert lane.winner.folder
        folder = Path(lane.winner.folder)
        assert folder.parent == result.tune_dir / "candidates" / key, folder
        walked = read_document(json.loads((folder / "recommendations.json").read_text()))
        tuned = walked.lanes[key].tuned
        assert list(walked.lanes) == [key] and tuned and tuned.flags == lane.flags
        assert (result.tune_dir / f"pareto-{key}.svg").read_text().startswith("<svg")
    doc = json.loads((result.tune_dir / "recommendations.json").read_text())
    assert doc["nodes"] == {"a": {"labels": {"gpu": "h100"}, "lanes": ["a/dense"]},
                            "b": {"labels": {}, "lanes": ["b/dense"]}}
    assert {k: v["node"] for k, v in doc["lanes"].items()} == {"a/dense": "a", "b/dense": "b"}
    assert result.exit_code == 0
