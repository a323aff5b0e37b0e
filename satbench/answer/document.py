"""The recommendations document (schema ``satbench.recommendations/v2``): built from the analysis' models
(``answer.models``) into the JSON the store keeps, serves and writes, and read back by one validation.

This module only arranges what the analysis found; it decides nothing. The field names are the contract of
DESIGN.md with capability reporting (``lanes.<key>.recommended_concurrency`` is what consumers read);
fields beyond that contract are additions, never renames.

v2 (a fleet): ``lanes`` is keyed by the lane key (``core.lanes``: the bare name for a lane that names no
node, ``<node>/<lane>`` otherwise), each answer says its ``node`` and ``lane``, the ``fingerprint`` of what it
was measured on and its ``validity`` against the live one, and ``nodes`` indexes the answers by node with the
node's labels. A session without nodes therefore reads as v1 did, key for key. ``as_v1`` is the v1 view for a
consumer that has not moved (``GET /recommendations?schema=v1``): keyed by bare lane name, refused
(``AmbiguousForV1``) where two nodes serve one name, so it is told, never handed one node's answer for
another's. ``answers`` is how these views take the answers of the JSON of either version.

``read_document`` is the one validation of a document a reader meets at its edge (a file, an HTTP body, the
store's current document): v1 said in v2, then ``answer.models.RecommendationsDocument``; past it,
readers (capabilities, the ``/metrics`` families, the report, compare, the tune) take attributes, never
string keys. The builder dumps the analysis' models into JSON once, and the views below and the store
transform that JSON, not a model: the served bytes are the JSON as built, and a model's dump would reorder
it (``trace``, ``last_status``, ``age_s`` and ``tuned`` follow ``rate`` where they are added, while the model
declares ``rate`` and ``trace`` last; a fleet run's ``shards`` is no field of the model, so a dump drops it; a
fingerprint's keys do dump in the document's order: ``core.lane_evidence.FingerprintModel``), so the JSON
stays the one serialised form and the model the one shape it is read in. A validity is laid over an answer
as its model said it (``mark_changed`` takes the ``ValidityModel`` of ``recommender.validity``).

``mark_stale`` turns a last good document into the one served while Prometheus is unreachable: every lane
says ``stale`` and how old the answer is. ``mark_changed`` turns one answer stale because what it was
measured on changed (its validity names what).
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Mapping
from typing import Any

from pydantic import TypeAdapter, ValidationError

from satbench.answer.analysis import LaneAnalysis
from satbench.answer.models import (
    DriftModel,
    KneeModel,
    PairModel,
    PrefillModel,
    RecommendationsDocument,
    StepModel,
    TraceModel,
    UndecidedModel,
    ValidityModel,
)
from satbench.answer.policy import SLO, Policy
from satbench.answer.rate_analysis import RateAnswer
from satbench.answer.trace_analysis import TraceAnswer
from satbench.core.config_files import first_problem
from satbench.core.lanes import LOCAL_NODE, split_key

__all__ = [
    "SCHEMA_ID",
    "SCHEMA_V1",
    "AmbiguousForV1",
    "answers",
    "as_v1",
    "as_v2",
    "build_document",
    "iso_utc",
    "json_safe",
    "lane_fragment",
    "mark_changed",
    "mark_stale",
    "node_index",
    "read_document",
    "unchecked",
]

SCHEMA_ID = "satbench.recommendations/v2"
SCHEMA_V1 = "satbench.recommendations/v1"
_STEPS = TypeAdapter(list[StepModel])


class AmbiguousForV1(ValueError):
    """The document cannot be said in v1: two nodes serve one lane name (the message names them)."""


def json_safe(value: Any) -> Any:
    """``value`` with every non-finite float replaced by ``None`` (JSON has no NaN or infinity)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


def iso_utc(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def lane_fragment(analysis: LaneAnalysis, *, run_id: str, measured_at: float | None,
                  where: Mapping[str, Any] | None = None, rate: RateAnswer | None = None,
                  trace: TraceAnswer | None = None, prefill: PrefillModel | None = None) -> dict[str, Any]:
    """One answer. ``where``: the lane's ``node``, ``lane``, ``url``, ``fingerprint`` and ``validity``
    (``recommender.run_analysis``); without it the node and name come from the key. ``trace``, the trace
    answer, is said (``trace``, after ``rate``) only where the lane replayed a trace, so a document without one
    reads byte for byte as before; ``prefill``, the peak prefill answer, likewise only where the run walked it."""
    knee = analysis.knee
    pair = analysis.indistinguishable
    node, name = split_key(analysis.lane)
    place = {"node": node or LOCAL_NODE, "lane": name, "url": None, "model": None, "fingerprint": None,
             "validity": unchecked("no fingerprint was taken when this lane was measured"),
             **dict(where or {})}
    knee_model = None if knee is None else KneeModel(
        method=knee.method, concurrency=knee.concurrency, difference=knee.difference)
    undecided = None if analysis.undecided is None else UndecidedModel(
        smaller=analysis.undecided.smaller, larger=analysis.undecided.larger, gain=analysis.undecided.gain,
        interval=list(analysis.undecided.interval))
    fragment = {
        **place,
        "status": analysis.status,
        "reason": analysis.reason,
        "recommended_concurrency": analysis.recommended_concurrency,
        "saturation_concurrency": analysis.saturation_concurrency,
        "binding_constraint": analysis.binding_constraint,
        "throughput_at_recommended_tok_s": analysis.throughput_at_recommended_tok_s,
        "fairness": analysis.fairness_summary().model_dump(mode="json"),
        "starvation": analysis.starvation_summary().model_dump(mode="json"),
        "knee": None if knee_model is None else knee_model.model_dump(mode="json"),
        "indistinguishable": None if pair is None else PairModel(smaller=pair[0], larger=pair[1]).model_dump(),
        "undecided": None if undecided is None else undecided.model_dump(mode="json"),
        "next_rung_constraints": list(analysis.next_rung_constraints),
        "notes": list(analysis.notes),
        "run_id": run_id,
        "measured_at": None if measured_at is None else iso_utc(measured_at),
        "steps": _STEPS.dump_python(analysis.step_models(), mode="json"),
        "rate": None if rate is None else rate.model().model_dump(mode="json"),
    }
    drift = analysis.drift
    if drift is not None:  # said only where checked, so a document without a check reads as before
        fragment["drift"] = DriftModel(
            drifted=drift.drifted, how=drift.how, concurrency=drift.concurrency,  # type: ignore[arg-type]
            ratio=drift.ratio, interval=None if drift.interval is None else list(drift.interval),
            between=list(drift.between), decode_step_s=list(drift.decode_step_s), said=drift.said(),
        ).model_dump(mode="json")
    if trace is not None:
        fragment["trace"] = TraceModel.model_validate(trace.to_dict()).model_dump(mode="json")
    if prefill is not None:  # said only where the run walked it, as the trace
        fragment["prefill"] = prefill.model_dump(mode="json")
    return fragment


def build_document(
    *,
    run_id: str,
    generated_at: float,
    source: Mapping[str, Any],
    policy: Policy,
    lanes: Mapping[str, dict[str, Any]],
    notes: list[str] | None = None,
    node_labels: Mapping[str, Mapping[str, str]] | None = None,
) -> dict[str, Any]:
    """The whole document. ``lanes`` maps lane key to a ``lane_fragment``; ``node_labels`` each node's labels."""
    return {
        "schema": SCHEMA_ID,
        "generated_at": iso_utc(generated_at),
        "run_id": run_id,
        "source": dict(source),
        "policy": policy.model_dump(),
        "nodes": node_index(lanes, node_labels),
        "lanes": json_safe(dict(lanes)),
        "notes": list(notes or []),
        "stale": False,
        "age_s": None,
    }


def mark_stale(document: Mapping[str, Any], *, age_s: float, reason: str) -> dict[str, Any]:
    """A copy of a last good document, served while its source is unreachable."""
    stale = copy.deepcopy(dict(document))
    stale["stale"] = True
    stale["age_s"] = round(age_s, 3)
    for lane in stale["lanes"].values():
        if lane["status"] != "stale":  # already stale because its node changed: keep the status before
            lane["last_status"] = lane["status"]
        lane["status"] = "stale"
        lane["reason"] = f"{reason}; serving the answer of {stale['generated_at']} ({age_s:.0f} s old)"
        lane["age_s"] = round(age_s, 3)
    return stale


def unchecked(reason: str) -> dict[str, Any]:
    """The validity of an answer not (yet) compared with a live fingerprint."""
    return {"state": "unknown", "checked_at": None, "changes": [], "reason": reason}


def node_index(lanes: Mapping[str, Mapping[str, Any]],
               labels: Mapping[str, Mapping[str, str]] | None = None) -> dict[str, Any]:
    """``{node: {"labels": {...}, "lanes": [key, ...]}}`` over the answers ``lanes`` (keys sorted)."""
    keys: dict[str, list[str]] = {}
    for key in sorted(lanes):
        keys.setdefault(str(lanes[key].get("node") or split_key(key)[0] or LOCAL_NODE), []).append(key)
    return {node: {"labels": dict((labels or {}).get(node) or {}), "lanes": keys[node]} for node in sorted(keys)}


def answers(document: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The answers of a v1 or v2 document by lane key (v1: the lane name is the key)."""
    lanes = document.get("lanes")
    return {str(k): v for k, v in lanes.items() if isinstance(v, dict)} if isinstance(lanes, dict) else {}


def as_v2(document: Mapping[str, Any]) -> dict[str, Any]:
    """A v1 document (a run folder written before fleets) said in v2: every lane on node ``local``, without a
    fingerprint (its validity says why); a v2 document as it is."""
    if document.get("schema") != SCHEMA_V1:
        return dict(document)
    lanes = {}
    for key, lane in answers(document).items():
        node, name = split_key(key)
        lanes[key] = {"node": node or LOCAL_NODE, "lane": name, "url": None, "model": None, "fingerprint": None,
                      "validity": unchecked("measured before answers carried a fingerprint (schema v1)"), **lane}
    return {**document, "schema": SCHEMA_ID, "nodes": node_index(lanes), "lanes": lanes}


def read_document(document: Mapping[str, Any] | RecommendationsDocument) -> RecommendationsDocument:
    """``document`` (v1 or v2, as JSON) validated once into the model every reader takes; a model as it is.
    Policy settings this reader does not know (a newer satbench's) are left out, so a document that grew by a
    setting reads in an older reader, as a lane's added fields do. ``ValueError`` in one line naming the
    first field that is wrong (and how many more are)."""
    if isinstance(document, RecommendationsDocument):
        return document
    if not isinstance(document, Mapping):
        raise ValueError(f"not a recommendations document: a JSON object is expected, not {type(document).__name__}")
    data = as_v2(document)
    policy = data.get("policy")
    if isinstance(policy, Mapping):  # settings a newer writer added, which this reader does not know: read without
        slo = policy.get("slo")  # them (the document grows by addition; the policy as configuration stays strict)
        known = {k: v for k, v in policy.items() if k in Policy.model_fields}
        if isinstance(slo, Mapping):
            known["slo"] = {k: v for k, v in slo.items() if k in SLO.model_fields}
        data = {**data, "policy": known}
    try:
        model = RecommendationsDocument.model_validate(data)
    except ValidationError as exc:
        raise ValueError(f"not a recommendations document: {first_problem(exc)}") from None
    model._schema_read = str(document.get("schema") or SCHEMA_ID)
    return model


def as_v1(document: Mapping[str, Any]) -> dict[str, Any]:
    """The v1 view of a v2 document: lanes keyed by bare name, without the node index, statuses in v1's words.

    ``AmbiguousForV1`` where two nodes serve one lane name: v1 has one answer per name, and handing a v1
    consumer one node's answer for a name it reads as the only one would break it silently."""
    if document.get("schema") == SCHEMA_V1:
        return dict(document)
    by_name: dict[str, list[str]] = {}
    for key, lane in answers(document).items():
        by_name.setdefault(str(lane.get("lane") or split_key(key)[1]), []).append(key)
    clashes = {name: keys for name, keys in by_name.items() if len(keys) > 1}
    if clashes:
        said = "; ".join(f"{name} on {', '.join(sorted(keys))}" for name, keys in sorted(clashes.items()))
        raise AmbiguousForV1(f"schema v1 keys answers by lane name alone, and several nodes serve one: {said}; "
                             f"read schema v2 ({SCHEMA_ID})")
    lanes = {key: _v1_lane(lane) for key, lane in answers(document).items()}
    out = {k: v for k, v in document.items() if k not in ("nodes", "lanes")}
    out["schema"] = SCHEMA_V1
    out["lanes"] = {name: lanes[keys[0]] for name, keys in sorted(by_name.items())}
    return out


def _v1_lane(lane: dict[str, Any]) -> dict[str, Any]:
    """An answer in v1's words: v1 has no ``undecided`` status, so such an answer is ``ok`` there with its
    reason (which says the doubling it rests on is undecided) and ``undecided`` kept beside it."""
    if lane.get("status") == "undecided":
        return {**lane, "status": "ok"}
    if lane.get("last_status") == "undecided":
        return {**lane, "last_status": "ok"}
    return lane


def mark_changed(lane: Mapping[str, Any], validity: ValidityModel) -> dict[str, Any]:
    """A copy of answer ``lane`` with ``validity`` (as it was said: ``recommender.validity``); stale (its last
    status kept) when what it was measured on changed, and back to its own status when it no longer differs."""
    out = dict(lane)
    out["validity"] = validity.model_dump(exclude_unset=True)
    if validity.state == "changed":
        if out.get("status") != "stale":
            out["last_status"] = out.get("status")
        out["status"] = "stale"
        out["reason"] = f"measured on something else: {validity.reason}"
    return out
