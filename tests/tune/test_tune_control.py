"""The tune controls what it measures: it owns the grid's flags, reads back every start, skips what cannot
fit before starting it, says where an answer was cut short, and resumes only what was measured on the same
question.

Over real HTTP with stand-in llama-servers (``tests/tune/standins.py``) and the simulator. The truth is the
scenario's: which flags the config sets, what the stand-in drops, the tiny model's shape and the budget
the test states, the context the test sets too small.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from satbench.models.tiny import TINY_MODELS
from satbench.tune.config import TuneConfigError, load_tune_config
from satbench.tune.models import CandidateRecord, TuneLane
from satbench.tune.run import run_tune
from tests.tune.sections import PLUMBING_POLICY, SHORT_WINDOWS
from tests.tune.standins import fake_llama_server, started, tiny_model_dir

DENSE = TINY_MODELS["dense"]
KV_PER_TOKEN = DENSE.n_layer * DENSE.n_head_kv * (DENSE.n_embd // DENSE.n_head) * (2 + 2)  # f16 K and V


def llamacpp_config(tmp_path: Path, models: Path, tune: str, server_args: str = "") -> Path:
    path = tmp_path / "tune.toml"
    path.write_text(f"""
model_dir = "{models}"

[[lanes]]
name = "real"
runtime = "llamacpp"
model_file = "{DENSE.file_name}"
{server_args}
{SHORT_WINDOWS}{PLUMBING_POLICY}
[tune]
ubatch = [256]
ladder = [1]
evidence_walks = 0
{tune}
""", encoding="utf-8")
    return path


def tune(config: Path, tmp_path: Path, **overrides: Any) -> TuneLane:
    setup = load_tune_config(config, overrides)
    result = run_tune(setup, command=["satbench", "tune"], out_dir=tmp_path / "runs", say=lambda _: None)
    return result.document.lanes["real"]


@pytest.mark.parametrize(("args", "flag"), [
    ('["-np", "8"]', "-np"), ('["--parallel=8"]', "--parallel"), ('["-c", "4096"]', "-c"),
    ('["--batch-size", "64"]', "--batch-size"), ('["-ub", "64"]', "-ub"), ('["-kvu"]', "-kvu"),
    ('["--no-kv-unified"]', "--no-kv-unified"), ('["--fit", "on"]', "--fit"),
])
def test_server_args_that_set_what_the_tune_sets_are_refused_in_one_line(tmp_path: Path, args: str,
                                                                         flag: str) -> None:
    config = llamacpp_config(tmp_path, tmp_path, "parallel = [2]", f"server_args = {args}")
    with pytest.raises(TuneConfigError) as err:
        load_tune_config(config)
    said = str(err.value)
    assert f"lanes.real.server_args: sets {flag}," in said and "\n" not in said


def test_server_args_the_grid_does_not_search_are_kept(tmp_path: Path) -> None:
    config = llamacpp_config(tmp_path, tmp_path, "parallel = [2]", 'server_args = ["-t", "2", "-ctk", "q8_0", '
                                                                    '"-ngl", "20"]')
    assert load_tune_config(config).lanes[0].server_args == ["-t", "2", "-ctk", "q8_0", "-ngl", "20"]


@pytest.mark.slow
def test_a_stand_in_that_ignores_parallel_is_caught_by_the_read_back(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SATBENCH_LLAMA_SERVER", str(fake_llama_server(tmp_path, ignore_parallel=True, refuse=False)))
    lane = tune(llamacpp_config(tmp_path, tiny_model_dir(tmp_path), "parallel = [2, 4]"), tmp_path)
    by_slots = {c.parallel: c for c in lane.candidates}
    two, four = by_slots[2], by_slots[4]
    assert two.state == "refused", two
    assert two.reason and "the server runs 4 slots (/props total_slots), the candidate asked for 2" in two.reason
    assert two.readback and two.readback.total_slots == 4 and two.folder
    assert not (Path(two.folder) / "records.jsonl").exists()
    assert four.state == "measured" and four.readback and four.readback.problems == [] and four.folder
    assert lane.winner and lane.winner.parallel == 4
    command = (Path(four.folder) / "command.txt").read_text()
    assert "--no-kv-unified" in command and "--fit off" in command and "-ngl 999" in command


@pytest.mark.slow
def test_a_candidate_that_cannot_fit_is_skipped_before_it_starts(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SATBENCH_LLAMA_SERVER", str(fake_llama_server(tmp_path, refuse=False)))
    models = tiny_model_dir(tmp_path)
    weights = (models / DENSE.file_name).stat().st_size
    budget = weights + 6 * 1024 * KV_PER_TOKEN  # room for 6 x 1024 KV tokens beside the weights
    lane = tune(llamacpp_config(tmp_path, models, f"parallel = [2, 8]\nctx_per_slot = 1024\n"
                                                  f"memory_bytes = {budget}\nmemory_reserve_bytes = 0"), tmp_path)
    assert lane.memory.model and lane.memory.model.kv_bytes_per_token == KV_PER_TOKEN
    assert lane.memory.model.weights_bytes == weights
    by_id = {c.id: c for c in lane.candidates}
    eight = by_id["np8-b256-ub256-c8192"]
    assert eight.state == "skipped" and eight.kv_bytes == 8 * 1024 * KV_PER_TOKEN
    assert eight.reason and eight.reason.startswith("cannot fit: needs") and "tune.memory_bytes" in eight.reason
    assert not any("-c 8192" in line for line in started(tmp_path))  # never started
    two = by_id["np2-b256-ub256-c2048"]
    assert two.state == "measured" and two.kv_bytes == 2 * 1024 * KV_PER_TOKEN
    pool = by_id["np8-b256-ub256-c6144-kvu"]  # where split cannot fit, one shared pool of what fits
    assert pool.state == "measured" and pool.kv_unified and pool.readback and pool.readback.n_ctx_slot == 6144
    assert any("-c 6144" in line and "-kvu" in line for line in started(tmp_path))


SIM = f"""
[[lanes]]
name = "real"
profile = "dense"
{SHORT_WINDOWS}
[loadgen.workload]
prompt_tokens = {{kind = "fixed", value = 32}}
output_tokens = {{kind = "fixed", value = 64}}
{PLUMBING_POLICY}
[tune]
parallel = [2]
ubatch = [256]
ladder = [1]
evidence_walks = 0
"""


@pytest.mark.slow
def test_an_answer_cut_short_by_its_context_is_a_finding(tmp_path: Path) -> None:
    config = tmp_path / "tune.toml"
    config.write_text(SIM + "ctx_per_slot = 64\n", encoding="utf-8")  # 32 prompt + 64 output do not fit in 64
    lane = tune(config, tmp_path)
    (candidate,) = lane.candidates
    assert candidate.state == "measured" and (candidate.truncated_requests or 0) > 0, candidate
    assert lane.findings and "cut short at the slot's context (64 tokens)" in lane.findings[0]
    assert lane.context and lane.context.source == "config"


@pytest.mark.slow
def test_resume_reuses_only_what_was_measured_on_the_same_question(tmp_path: Path) -> None:
    config = tmp_path / "tune.toml"
    config.write_text(SIM, encoding="utf-8")
    setup = load_tune_config(config)
    first = run_tune(setup, command=["satbench", "tune"], out_dir=tmp_path / "runs", say=lambda _: None)
    (walked,) = first.document.lanes["real"].candidates
    context = first.document.lanes["real"].context
    assert walked.fingerprint and context and context.source == "server"
    same = run_tune(setup, command=["satbench", "tune"], resume=first.tune_dir, say=lambda _: None)
    assert same.document.lanes["real"].resumed == 1
    changed = load_tune_config(config, {"policy.min_gain_per_doubling": 0.2})
    again = run_tune(changed, command=["satbench", "tune"], resume=first.tune_dir, say=lambda _: None)
    lane = again.document.lanes["real"]
    (candidate,) = lane.candidates
    assert lane.resumed == 0 and candidate.state == "measured" and candidate.folder
    assert candidate.resume == "its recorded fingerprint differs (policy changed)"
    assert any("walked again on resume" in f for f in lane.findings)
    folder = Path(candidate.folder)
    assert (folder.with_name(folder.name + ".stale") / "records.jsonl").exists()
    recorded = CandidateRecord.model_validate_json((folder / "candidate.json").read_bytes()).facts()
    assert recorded.fingerprint == candidate.fingerprint != walked.fingerprint
