"""Validity: an answer against its lane's live fingerprint, the v1 view of a v2 document, and the store laying
validity over what it serves (stale while the node runs something else, valid again when it is back)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from satbench.answer.document import (
    SCHEMA_ID,
    SCHEMA_V1,
    AmbiguousForV1,
    as_v1,
    mark_changed,
    node_index,
    read_document,
)
from satbench.answer.models import ChangeModel, LaneModel, ValidityModel
from satbench.core.fingerprint import node_fingerprint
from satbench.core.fingerprint_labels import info_labels
from satbench.recommender.prometheus_source import VectorSample
from satbench.recommender.store import RecommendationStore
from satbench.recommender.validity import check_answers, live_by_key, measured_fingerprints, validity_of


def _fingerprint(slots: int, build: str = "b1", *, beside: bool = True) -> dict[str, Any]:
    """A node's fingerprint as its exporter tells it: ``beside`` the runtime (its command line and environment
    read, so every setting that decides capacity is known), else from ``/props`` alone (a remote exporter)."""
    props = {"build_info": build, "model_path": "m.gguf", "total_slots": slots, "model_ftype": "Q8_0",
             "default_generation_settings": {"n_ctx": 4096}}
    argv = ["llama-server", "-np", str(slots), "-c", str(4096 * slots), "-b", "512", "-ub", "128"] if beside else None
    return node_fingerprint(props=props, argv=argv, environ={} if beside else None, hardware=None,
                            model_files=None, model_meta={"n_params": 8_000_000_000, "ftype": "Q8_0"})


def _answer(node: str, lane: str, slots: int = 4, status: str = "ok") -> dict[str, Any]:
    """An answer of 4 measured on ``slots`` slots, with the fields the schema requires (no steps)."""
    return {"node": node, "lane": lane, "status": status, "reason": None, "recommended_concurrency": 4,
            "fingerprint": _fingerprint(slots), "validity": None, "saturation_concurrency": None,
            "binding_constraint": None, "throughput_at_recommended_tok_s": None,
            "fairness": {"ok": True, "jain_min": None},
            "starvation": {"ok": True, "decode_stall_max_ratio": None, "prefill_wait_max_s": None},
            "run_id": "r", "measured_at": None, "steps": []}


def _document(lanes: dict[str, dict[str, Any]]) -> dict[str, Any]:
    index = node_index({key: LaneModel.model_validate(lane) for key, lane in lanes.items()})
    return {"schema": SCHEMA_ID, "run_id": "r", "generated_at": "2026-12-01T00:00:00Z",
            "source": {"kind": "prometheus"}, "policy": {}, "lanes": lanes,
            "nodes": {node: info.model_dump() for node, info in index.items()}}


def _series(key: str, fp: dict[str, Any]) -> VectorSample:
    node, _, lane = key.rpartition("/")
    labels = {**info_labels(fp), "lane": lane, "job": "satbench_exporter", **({"node": node} if node else {})}
    return VectorSample(labels, 1.0)


def test_validity_names_what_changed_and_ignores_what_no_side_can_tell() -> None:
    answer = measured_fingerprints({"a/dense": _answer("a", "dense", slots=4)})["a/dense"]
    assert validity_of(answer, [_fingerprint(4)], now=0).state == "valid"
    changed = validity_of(answer, [_fingerprint(2, build="b2")], now=0)
    assert changed.state == "changed"
    assert ChangeModel(field="settings.slots", measured=4, live=2) in changed.changes
    assert "settings.slots 4 -> 2" in (changed.reason or "") and "runtime.build b1 -> b2" in (changed.reason or "")
    # two label sets while a runtime restarts: valid while one of them matches
    assert validity_of(answer, [_fingerprint(2), _fingerprint(4)], now=0).state == "valid"
    assert validity_of(answer, None, now=0).state == "unknown"
    assert validity_of(None, [_fingerprint(4)], now=0).state == "unknown"
    # a remote exporter cannot tell the batch sizes or the KV layout: nothing differs, yet nothing says the
    # answer holds, and the validity says how much was compared and what was not
    remote = validity_of(answer, [_fingerprint(4, beside=False)], now=0)
    assert remote.state == "unknown" and remote.changes == []
    assert "settings.batch" in (remote.reason or "") and "settings.kv_unified" in (remote.reason or "")
    assert remote.compared is not None and remote.compared.fields < remote.compared.of
    assert "settings.batch" in remote.compared.not_compared


def test_live_series_are_matched_to_lane_keys_by_node_and_lane() -> None:
    live = live_by_key([_series("a/dense", _fingerprint(4)), _series("dense", _fingerprint(8)),
                        VectorSample({**info_labels(_fingerprint(2)), "lane": "moe", "node": "local"}, 1.0)])
    assert set(live) == {"a/dense", "dense", "moe"}  # node "local" is a bare key's
    assert live["a/dense"][0]["settings"]["slots"] == 4 and live["dense"][0]["settings"]["slots"] == 8


def test_the_v1_view_is_said_where_it_can_be_and_refused_where_it_cannot() -> None:
    lanes = {"dense": _answer("local", "dense"), "moe": _answer("local", "moe")}
    v1 = as_v1(read_document(_document(lanes)))
    assert v1["schema"] == SCHEMA_V1 and set(v1["lanes"]) == {"dense", "moe"} and "nodes" not in v1
    fleet = _document({"a/dense": _answer("a", "dense"), "b/dense": _answer("b", "dense"),
                       "b/moe": _answer("b", "moe")})
    assert set(read_document(fleet).lanes) == {"a/dense", "b/dense", "b/moe"}
    assert fleet["nodes"] == {"a": {"labels": {}, "lanes": ["a/dense"]},
                              "b": {"labels": {}, "lanes": ["b/dense", "b/moe"]}}
    with pytest.raises(AmbiguousForV1, match="dense on a/dense, b/dense"):
        as_v1(read_document(fleet))


def test_a_changed_answer_is_stale_and_comes_back_when_the_node_does() -> None:
    answer = LaneModel.model_validate(_answer("a", "dense"))
    changed = mark_changed(answer, ValidityModel(state="changed", reason="settings.slots 4 -> 2"))
    assert changed.status == "stale" and changed.last_status == "ok" and "4 -> 2" in (changed.reason or "")
    assert answer.status == "ok"  # the answer itself is untouched: the store lays validity over a copy


def test_the_store_serves_validity_and_turns_exactly_the_changed_answer_stale() -> None:
    lanes = {"a/dense": _answer("a", "dense"), "b/dense": _answer("b", "dense")}
    doc = _document(lanes)

    async def analyzer(manifest: Any, run_dir: Any) -> dict[str, Any]:
        return doc

    from satbench.core.manifest import RunManifest, StepWindow

    async def scenario() -> None:
        store = RecommendationStore(analyzer)
        await store.register(RunManifest(run_id="r", steps=(StepWindow("a/dense", 1, 0.0, 1.0),)))
        live = [_series("a/dense", _fingerprint(4)), _series("b/dense", _fingerprint(4))]

        class Client:
            async def query(self, expr: str, at: float) -> list[VectorSample]:
                return live

            async def query_samples(self, expr: str, at: float) -> list[tuple[dict[str, str], list[Any]]]:
                return []

            async def query_range(self, expr: str, start: float, end: float, step_s: float) -> list[list[float]]:
                return []

        await store.set_validity(await check_answers(Client(), measured_fingerprints(store.answers_to_check()),
                                                     now=10.0))
        served = json.loads(store.document_bytes())
        assert {k: v["validity"]["state"] for k, v in served["lanes"].items()} == {"a/dense": "valid",
                                                                                   "b/dense": "valid"}
        live[1] = _series("b/dense", _fingerprint(2))
        assert await store.set_validity(
            await check_answers(Client(), measured_fingerprints(store.answers_to_check()), now=11.0))
        served = json.loads(store.document_bytes())
        assert served["lanes"]["b/dense"]["status"] == "stale" and served["lanes"]["a/dense"]["status"] == "ok"
        with pytest.raises(AmbiguousForV1):
            store.document_bytes("v1")
        live[1] = _series("b/dense", _fingerprint(4))
        await store.set_validity(await check_answers(Client(), measured_fingerprints(store.answers_to_check()),
                                                     now=12.0))
        assert json.loads(store.document_bytes())["lanes"]["b/dense"]["status"] == "ok"

    asyncio.run(scenario())


def test_a_run_folder_from_before_fleets_is_served_in_v2() -> None:
    from satbench.answer.document import as_v2

    measured = {k: v for k, v in _answer("local", "dense").items() if k not in ("node", "lane", "fingerprint",
                                                                                  "validity")}
    old = {"schema": SCHEMA_V1, "run_id": "r", "generated_at": "2026-12-01T00:00:00Z",
           "source": {"kind": "prometheus"}, "policy": {}, "lanes": {"dense": measured}}
    new = as_v2(old)
    lane = new["lanes"]["dense"]
    assert new["schema"] == SCHEMA_ID and new["nodes"] == {"local": {"labels": {}, "lanes": ["dense"]}}
    assert (lane["node"], lane["lane"], lane["recommended_concurrency"]) == ("local", "dense", 4)
    assert lane["fingerprint"] is None and lane["validity"]["state"] == "unknown"
    assert as_v1(read_document(new))["lanes"]["dense"]["recommended_concurrency"] == 4


def test_a_bare_lane_never_takes_the_fingerprint_of_another_lane_of_the_run() -> None:
    """Lane ``moe`` on the session's own host and ``node-b/moe`` on another node: once the local lane's series
    had gone stale (its exporter stopped with the session), ``node-b``'s 2-slot fingerprint was read as the local
    lane's, and the local answer was called measured on something else. A bare key takes a node's series only
    where that node's lane is not itself one of the lanes asked about."""
    class Client:
        async def query(self, expr: str, at: float) -> list[VectorSample]:
            return [_series("node-b/moe", _fingerprint(2))]

        async def query_samples(self, expr: str, at: float) -> list[tuple[dict[str, str], list[Any]]]:
            return []

        async def query_range(self, expr: str, start: float, end: float, step_s: float) -> list[list[float]]:
            return []

    both = {"moe": {"fingerprint": _fingerprint(8)}, "node-b/moe": {"fingerprint": _fingerprint(2)}}
    got = asyncio.run(check_answers(Client(), measured_fingerprints(both), now=10.0))
    assert got["node-b/moe"].state == "valid"
    assert got["moe"].state != "changed", got["moe"]
    # alone, a bare key whose series carry a node label takes that node's (a lane that names no node)
    alone = asyncio.run(check_answers(Client(), measured_fingerprints({"moe": {"fingerprint": _fingerprint(2)}}),
                                      now=10.0))
    assert alone["moe"].state == "valid"
