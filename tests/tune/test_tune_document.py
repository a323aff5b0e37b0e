"""``tune.json`` as one shape: the models a tune builds are the JSON it writes, and ``read_tune`` reads that
JSON back into the same models, refusing a bad file in one line that names the field.

The scenario is a two-lane tune built from stated outcomes (no walk): a lane whose winner was read back,
resumed and cut short, with a refused, a skipped, a pruned and a unified candidate beside it; and a lane with
no feasible candidate. The shape expected (the keys of a candidate in their order, a read-back's
``kv_bytes_model`` absent where the model cannot tell it) is the one ``satbench.tune.document``'s docstring
states, written out here.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from satbench.answer.policy import Policy
from satbench.runtimes.llamacpp import StartupLog
from satbench.tune.answer import choose
from satbench.tune.context import ContextNeed
from satbench.tune.document import lane_entry, tune_document, tuned_document
from satbench.tune.evidence import Decision
from satbench.tune.grid import Candidate
from satbench.tune.memory import Budget, ModelMemory
from satbench.tune.models import CandidateRecord, MemoryNeed, TuneDocument, WalkFacts, read_tune
from satbench.tune.readback import verify
from satbench.tune.search import Outcome

CTX = 2048
CANDIDATE_KEYS = ["id", "parallel", "batch", "ubatch", "ctx_per_slot", "ctx_size", "kv_unified", "flags", "state",
                  "status", "recommended_concurrency", "binding_constraint", "throughput_tok_s",
                  "throughput_ci_tok_s", "starved_at", "rungs", "reason", "dominated_by", "folder", "resumed",
                  "kv_bytes", "memory_need_bytes", "memory", "readback", "truncated_requests", "window_factor",
                  "fingerprint", "resume"]


def _candidate(p: int, b: int, kv_unified: bool = False, pool: int | None = None) -> Candidate:
    return Candidate(p, b, b, CTX, kv_unified, pool)


def _document() -> TuneDocument:
    _, told = verify(_candidate(4, 512), {"total_slots": 4, "default_generation_settings": {"n_ctx": 2304}},
                     StartupLog(slots=4, n_ctx_slot=2304, kv_unified=False, offloaded_layers=(33, 33)))
    told = told.model_copy(update={"kv_bytes_model": 4 * CTX * 1024})
    _, untold = verify(_candidate(2, 512), {"error": "unreachable"}, None)
    memory = MemoryNeed(kv_bytes=1000, need_bytes=2000, fits=True, arithmetic="2000 B")
    outcomes = [
        Outcome(_candidate(2, 512), "measured", status="ok", recommended=2, binding="throughput_plateau",
                throughput_tok_s=63.25, throughput_ci_tok_s=(61.0, 65.5), rungs=(1, 2, 4), folder="c/np2",
                truncated=3, facts=WalkFacts(fingerprint="sha256:a", memory=memory, readback=untold,
                                             truncated_examples=["r1: 10 of 40"])),
        Outcome(_candidate(4, 512), "measured", status="ok", recommended=4, binding="slo_itl", throughput_tok_s=79.5,
                throughput_ci_tok_s=(77.0, 82.0), starved_at=(8,), rungs=(1, 2, 4, 8), folder="c/np4", resumed=True,
                window_factor=2.0, facts=WalkFacts(fingerprint="sha256:b", window_factor=2.0, memory=memory,
                                                   readback=told, resume="its recorded fingerprint differs")),
        Outcome(_candidate(8, 512), "refused", reason="out of memory", folder="c/np8"),
        Outcome(_candidate(16, 512), "skipped", reason="cannot fit"),
        Outcome(_candidate(2, 256), "pruned", reason="dominated", dominated_by="np2-b512-ub512-c4096"),
        Outcome(_candidate(4, 256, kv_unified=True, pool=6144), "measured", status="ok", recommended=3,
                binding="throughput_plateau", throughput_tok_s=70.0),
    ]
    model = ModelMemory("gguf", 131072.0, 4_000_000_000, 100_000, 32, "2 x 32 layers", None)
    lanes = {
        "real": lane_entry(runtime="llamacpp", model="m.gguf", fingerprint="sha256:lane",
                           grid=[o.candidate for o in outcomes], pairs=[(512, 512), (256, 256)], prune=True,
                           outcomes=outcomes, choice=choose(outcomes, 0.1), decision=Decision(settled=True),
                           context=ContextNeed(CTX, 1500, 40, 256, "server", "counted"), memory=model,
                           budget=Budget(80_000_000_000, "nvml", 1_000_000_000)),
        "gpu/none": lane_entry(runtime="simulator", model="dense", fingerprint="sha256:none",
                               grid=[_candidate(2, 512)], pairs=[(512, 512)], prune=False,
                               outcomes=[Outcome(_candidate(2, 512), "refused", reason="no")],
                               choice=choose([Outcome(_candidate(2, 512), "refused", reason="no")], 0.1)),
    }
    return tune_document(tune_id="tune-1", generated_at="2026-12-04T00:00:00Z", command=["satbench", "tune"],
                         policy=Policy(), lanes=lanes)


def test_a_tune_document_reads_back_as_the_same_model_and_the_same_bytes(tmp_path: Path) -> None:
    doc = _document()
    text = json.dumps(doc.to_json(), indent=2)
    path = tmp_path / "tune.json"
    path.write_text(text, encoding="utf-8")
    again = read_tune(path)
    assert again == doc
    assert json.dumps(again.to_json(), indent=2) == text


def test_the_json_keeps_the_documented_shape() -> None:
    data = _document().to_json()
    assert list(data) == ["schema", "tune_id", "generated_at", "command", "policy", "lanes", "notes"]
    assert data["schema"] == "satbench.tune/v1"
    real, none = data["lanes"]["real"], data["lanes"]["gpu/none"]
    assert [list(c) for c in real["candidates"]] == [CANDIDATE_KEYS] * 6
    assert real["winner"]["id"] == "np4-b512-ub512-c8192" and real["winner"]["kv_unified"] is False
    assert real["winner"]["throughput_ci_tok_s"] == [77.0, 82.0] and real["grid"]["pairs"] == [[512, 512], [256, 256]]
    assert real["winner"]["readback"]["kv_bytes_model"] == 4 * CTX * 1024
    assert "kv_bytes_model" not in real["candidates"][0]["readback"]  # absent, not null, where untold
    assert real["candidates"][2]["readback"] is None and real["candidates"][2]["truncated_requests"] is None
    assert none["winner"] is None and none["status"] == "no_feasible_candidate"
    assert none["memory"] == {"model": None, "budget": None} and none["decision"] is None


@pytest.mark.parametrize(("edit", "field"), [
    (lambda d: d["lanes"]["real"]["candidates"][1].update(state="exploded"), "lanes.real.candidates.1.state"),
    (lambda d: d["lanes"]["real"]["grid"].pop("size"), "lanes.real.grid.size"),
    (lambda d: d.pop("tune_id"), "tune_id"),
    (lambda d: d.update(schema="satbench.tune/v9"), "schema"),
    (lambda d: d["lanes"]["real"]["winner"].update(recommended_concurrency="many"),
     "lanes.real.winner.recommended_concurrency"),
])
def test_a_bad_tune_json_is_refused_in_one_line_naming_the_field(tmp_path: Path, edit: Callable[[Any], object],
                                                                 field: str) -> None:
    data = _document().to_json()
    edit(data)
    path = tmp_path / "tune.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ValueError) as err:
        read_tune(path)
    said = str(err.value)
    assert said.startswith(f"not a tune document: {field}: ") and "\n" not in said, said


def test_a_file_that_is_not_a_tune_document_is_refused_in_one_line(tmp_path: Path) -> None:
    for text, words in (("{not json", "not JSON"), ("[1, 2]", "a JSON object is expected, not list")):
        with pytest.raises(ValueError, match=words) as err:
            read_tune(text)
        assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match=r"tune\.json") as err:
        read_tune(tmp_path / "tune.json")
    assert "\n" not in str(err.value)


def test_a_candidate_record_keeps_only_what_the_walk_learnt_in_its_order() -> None:
    # a candidate skipped for its memory: fingerprinted and sized, never started, so no read-back or truncation
    facts = WalkFacts(fingerprint="sha256:a", window_factor=2.0).model_copy(
        update={"memory": MemoryNeed(kv_bytes=1, need_bytes=2, fits=False, arithmetic="x")})
    record = CandidateRecord.of("np2", {"parallel": 2}, {"policy": "sha256:p"}, facts)
    text = json.dumps(record.model_dump(mode="json"))
    assert list(json.loads(text)) == ["candidate", "settings", "parts", "fingerprint", "window_factor", "memory"]
    again = CandidateRecord.model_validate_json(text)
    assert again.parts == {"policy": "sha256:p"} and again.facts() == facts
    assert again.facts().readback is None and again.facts().truncated_requests is None


def test_a_winner_whose_recommendations_do_not_validate_is_left_out_of_the_tunes_answer(tmp_path: Path) -> None:
    doc = _document()
    winner = doc.lanes["real"].winner
    assert winner is not None and winner.folder
    folder = tmp_path / winner.folder
    folder.mkdir(parents=True)
    broken = {"schema": "satbench.recommendations/v2", "lanes": {"real": {"status": "ok"}}}
    (folder / "recommendations.json").write_text(json.dumps(broken), encoding="utf-8")
    relative = doc.model_copy(update={"lanes": {"real": doc.lanes["real"].model_copy(
        update={"winner": winner.model_copy(update={"folder": str(folder)})})}})
    assert tuned_document(relative, tmp_path) is None  # not written into either
    assert json.loads((folder / "recommendations.json").read_text()) == broken
