"""The document's one validation at a reader's edge (``answer.document.read_document``, issue 30).

A document the analysis wrote reads back as the model, attribute for attribute what its JSON says (the JSON
is the truth here, not the builder); a v1 document is said in v2 and still names v1 to what is cut from it;
a document missing what the schema requires is refused in one line that names the field; and the store
validates its current document once per publish, not once per scrape.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from satbench.answer.document import SCHEMA_V1, as_v1, read_document
from satbench.answer.models import RecommendationsDocument, ValidityModel, said
from satbench.answer.policy import Policy
from satbench.core.manifest import RunManifest, StepWindow
from satbench.recommender.run_analysis import document_from_figures
from satbench.recommender.store import RecommendationStore
from tests.recommender.figures_factory import held, ladder

CURVE = {1: 100.0, 2: 190.0, 4: 340.0, 8: 350.0}


def written() -> dict[str, Any]:
    """A document as the analysis writes it, through JSON: dense plateaus at 4, its c=8 rung starved."""
    manifest = RunManifest(run_id="r-edge", created_at=1.0,
                           steps=tuple(StepWindow("dense", c, 10.0 * c, 10.0 * c + 30.0) for c in CURVE))
    doc = document_from_figures(manifest, {"dense": ladder(CURVE, c8=held(40))}, policy=Policy(),
                                source={"kind": "records", "run_dir": "r-edge"}, generated_at=0.0)
    return json.loads(json.dumps(doc))


def test_a_written_document_reads_back_attribute_for_attribute() -> None:
    raw = written()
    doc = read_document(raw)
    lane, said_json = doc.lanes["dense"], raw["lanes"]["dense"]
    assert (lane.status, lane.recommended_concurrency, lane.binding_constraint) == (
        said_json["status"], said_json["recommended_concurrency"], said_json["binding_constraint"])
    assert lane.starvation.decode_flagged_at == said_json["starvation"]["decode_flagged_at"] == [8]
    assert [s.concurrency for s in lane.steps] == [s["concurrency"] for s in said_json["steps"]] == [1, 2, 4, 8]
    assert lane.steps[3].checks["decode_starvation"].status == said_json["steps"][3]["checks"][
        "decode_starvation"]["status"] == "flagged"
    assert doc.schema_read == raw["schema"] and doc.policy == Policy()
    assert read_document(doc) is doc, "a model is not validated twice"


def test_a_v1_document_is_said_in_v2_and_still_names_v1() -> None:
    v1 = as_v1(read_document(written()))
    for lane in v1["lanes"].values():  # a document written before fleets had none of these
        for name in ("node", "lane", "url", "model", "fingerprint", "validity"):
            del lane[name]
    doc = read_document(v1)
    assert isinstance(doc, RecommendationsDocument) and doc.schema_read == SCHEMA_V1
    lane = doc.lanes["dense"]
    assert (lane.node, lane.lane) == ("local", "dense") and lane.validity is not None
    assert lane.validity.state == "unknown" and "schema v1" in (lane.validity.reason or "")


@pytest.mark.parametrize(("change", "named"), [
    (lambda d: d["lanes"]["dense"].pop("run_id"), "lanes.dense.run_id: Field required"),
    (lambda d: d["lanes"]["dense"].update(status="fine"), "lanes.dense.status: Input should be"),
    (lambda d: d.pop("policy"), "policy: Field required"),
])
def test_a_document_missing_what_the_schema_requires_is_refused_in_one_line(change: Any, named: str) -> None:
    raw = written()
    change(raw)
    with pytest.raises(ValueError) as caught:
        read_document(raw)
    said_line = str(caught.value)
    assert said_line.startswith("not a recommendations document: ") and named in said_line
    assert "\n" not in said_line
    with pytest.raises(ValueError, match="a JSON object is expected, not list"):
        read_document([raw])  # type: ignore[arg-type]


def test_a_field_the_document_did_not_say_reads_as_unknown_not_as_its_default() -> None:
    raw = written()
    del raw["lanes"]["dense"]["fairness"]["ok_at_recommended"]
    fairness = read_document(raw).lanes["dense"].fairness
    assert fairness.ok_at_recommended is True, "the model's default"
    assert said(fairness, "ok_at_recommended") is None and said(fairness, "ok") is True


def test_the_store_validates_its_document_once_per_publish(tmp_path: Path) -> None:
    document = written()

    async def analyzer(manifest: RunManifest, run_dir: Path | None) -> dict[str, Any]:
        return document

    store = RecommendationStore(analyzer, clock=lambda: 100.0)
    asyncio.run(store.register(RunManifest(run_id="r-edge", created_at=1.0,
                                           steps=(StepWindow("dense", 1, 10.0, 40.0),))))
    first = store.model()
    assert store.model() is first and first.lanes["dense"].recommended_concurrency == 4
    asyncio.run(store.set_validity({"dense": ValidityModel(state="changed", checked_at=None, changes=[],
                                                           reason="slots")}))
    again = store.model()
    assert again is not first and again.lanes["dense"].status == "stale"


def test_a_policy_setting_this_reader_does_not_know_is_read_without_it() -> None:
    """A document a newer satbench wrote, whose policy has a setting this one lacks (at the top and in ``slo``),
    reads: the document grows by addition, and an older reader must not refuse it (one did the first document
    with ``slo.tpot_p95_s``: 'Extra inputs are not permitted'). The policy as configuration stays strict."""
    raw = written()
    newer = {**raw, "policy": {**raw["policy"], "a_later_setting": 3,
                               "slo": {**raw["policy"]["slo"], "later_p99_s": 0.5}}}
    assert read_document(newer).policy == read_document(raw).policy == Policy()
    with pytest.raises(ValueError, match="a_later_setting"):
        Policy.model_validate(newer["policy"])
