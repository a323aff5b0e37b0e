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
another's.

``read_document`` is the one validation of a document a reader meets at its edge (a file, an HTTP body, the
store's current document): v1 said in v2 (``as_v2``, on the JSON), then
``answer.models.RecommendationsDocument``. Past it everything takes the models: the builder (``lane_fragment``,
``build_document``), the views below and the store (``recommender.store``) hold and transform
``RecommendationsDocument`` and ``LaneModel``, never string keys. ``wire`` is the one serialisation, served and
written: the fields in the models' order, each said where it was set, so an answer says ``drift``, ``rate``'s
neighbours ``trace`` and ``prefill``, ``tuned``, ``partial``, ``last_status`` and ``age_s`` only where they
were given, and a document ``shards`` only for a fleet run. (The models' full dump, every optional field as
null, is what ``GET /runs/{id}`` and a session's ``recommendations.json`` say; its keys are in the same order.)
A validity is laid over an answer as its model said it (``mark_changed`` takes the ``ValidityModel`` of
``recommender.validity``).

``mark_stale`` turns a last good document into the one served while Prometheus is unreachable: every lane
says ``stale`` and how old the answer is. ``mark_changed`` turns one answer stale because what it was
measured on changed (its validity names what).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

from pydantic import TypeAdapter, ValidationError

from satbench.answer.agent_analysis import AgentsModel
from satbench.answer.analysis import LaneAnalysis
from satbench.answer.energy import EnergyModel
from satbench.answer.models import (
    DriftModel,
    KneeModel,
    LaneModel,
    NodeModel,
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
    "wire",
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
                  trace: TraceAnswer | None = None, prefill: PrefillModel | None = None,
                  energy: EnergyModel | None = None, rate_energy: EnergyModel | None = None,
                  agents: AgentsModel | None = None) -> LaneModel:
    """One answer. ``where``: the lane's ``node``, ``lane``, ``url``, ``fingerprint`` and ``validity``
    (``recommender.run_analysis``); without it the node and name come from the key. ``drift``, ``trace`` and
    ``prefill`` are set (so said, ``wire``) only where the lane was checked for drift, replayed a trace or
    walked the peak prefill, so a document without them reads byte for byte as before. ``energy`` and
    ``rate_energy``: the energy and cost at the concurrency and rate answers (``answer.energy``). ``agents``: the
    agent answer (``answer.agent_analysis``), said only where the lane walked it."""
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
        "rate": None if rate is None else rate.model().model_dump(mode="json", exclude={"energy"}),
    }
    if energy is not None:  # said only where an answer has a rung, as the drift
        fragment["energy"] = energy.model_dump(mode="json")
    if rate_energy is not None and fragment["rate"] is not None:
        fragment["rate"]["energy"] = rate_energy.model_dump(mode="json")
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
    if agents is not None:
        fragment["agents"] = agents.model_dump(mode="json")
    return LaneModel.model_validate(json_safe(fragment))


def build_document(
    *,
    run_id: str,
    generated_at: float,
    source: Mapping[str, Any],
    policy: Policy,
    lanes: Mapping[str, LaneModel],
    notes: list[str] | None = None,
    node_labels: Mapping[str, Mapping[str, str]] | None = None,
) -> dict[str, Any]:
    """The whole document, as JSON (``wire``). ``lanes`` maps lane key to its answer (``lane_fragment``);
    ``node_labels`` each node's labels."""
    document = RecommendationsDocument.model_validate({
        "schema": SCHEMA_ID,
        "generated_at": iso_utc(generated_at),
        "run_id": run_id,
        "source": dict(source),
        "policy": policy.model_dump(),
        "nodes": {},
        "lanes": {},
        "notes": list(notes or []),
        "stale": False,
        "age_s": None,
    })
    return wire(document.model_copy(update={"nodes": node_index(lanes, node_labels), "lanes": dict(lanes)}))


def wire(model: RecommendationsDocument | LaneModel, *, exclude: set[str] | None = None) -> dict[str, Any]:
    """``model`` as JSON, as it is served and written: its fields in the model's order, each said where it was
    set (read from a document, built, or marked), so an answer never checked for drift has no ``drift`` and
    a document not cut into shards no ``shards``. The one serialisation of the document (``exclude``: fields
    left out, for a view that says them otherwise)."""
    return model.model_dump(mode="json", by_alias=True, exclude_unset=True, exclude=exclude)


def mark_stale(document: RecommendationsDocument, *, age_s: float, reason: str) -> RecommendationsDocument:
    """The last good ``document``, served while its source is unreachable: every answer stale (its status before
    kept as ``last_status``), saying why and how old it is."""
    age = round(age_s, 3)
    said = f"{reason}; serving the answer of {document.generated_at} ({age_s:.0f} s old)"
    lanes = {}
    for key, lane in document.lanes.items():
        update: dict[str, Any] = {"status": "stale", "reason": said, "age_s": age}
        if lane.status != "stale":  # already stale because its node changed: keep the status before
            update["last_status"] = lane.status
        lanes[key] = lane.model_copy(update=update)
    return document.model_copy(update={"stale": True, "age_s": age, "lanes": lanes})


def unchecked(reason: str) -> dict[str, Any]:
    """The validity of an answer not (yet) compared with a live fingerprint."""
    return {"state": "unknown", "checked_at": None, "changes": [], "reason": reason}


def node_index(lanes: Mapping[str, LaneModel],
               labels: Mapping[str, Mapping[str, str]] | None = None) -> dict[str, NodeModel]:
    """``{node: NodeModel(labels, lanes=[key, ...])}`` over the answers ``lanes`` (keys sorted)."""
    keys: dict[str, list[str]] = {}
    for key in sorted(lanes):
        keys.setdefault(lanes[key].node or split_key(key)[0] or LOCAL_NODE, []).append(key)
    return {node: NodeModel(labels=dict((labels or {}).get(node) or {}), lanes=keys[node]) for node in sorted(keys)}


def as_v2(document: Mapping[str, Any]) -> dict[str, Any]:
    """A v1 document (a run folder written before fleets) said in v2: every lane on node ``local``, without a
    fingerprint (its validity says why); a v2 document as it is."""
    if document.get("schema") != SCHEMA_V1:
        return dict(document)
    lanes: dict[str, dict[str, Any]] = {}
    index: dict[str, list[str]] = {}
    said = document.get("lanes")
    for key, lane in (said.items() if isinstance(said, dict) else ()):
        if not isinstance(lane, dict):
            continue
        node, name = split_key(key)
        lanes[key] = {"node": node or LOCAL_NODE, "lane": name, "url": None, "model": None, "fingerprint": None,
                      "validity": unchecked("measured before answers carried a fingerprint (schema v1)"), **lane}
        index.setdefault(node or LOCAL_NODE, []).append(key)
    nodes = {node: {"labels": {}, "lanes": sorted(keys)} for node, keys in sorted(index.items())}
    return {**document, "schema": SCHEMA_ID, "nodes": nodes, "lanes": lanes}


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


def as_v1(document: RecommendationsDocument) -> dict[str, Any]:
    """The v1 view of ``document`` as JSON: lanes keyed by bare name, without the node index, statuses in v1's
    words.

    ``AmbiguousForV1`` where two nodes serve one lane name: v1 has one answer per name, and handing a v1
    consumer one node's answer for a name it reads as the only one would break it silently."""
    by_name: dict[str, list[str]] = {}
    for key, lane in document.lanes.items():
        by_name.setdefault(lane.lane or split_key(key)[1], []).append(key)
    clashes = {name: keys for name, keys in by_name.items() if len(keys) > 1}
    if clashes:
        said = "; ".join(f"{name} on {', '.join(sorted(keys))}" for name, keys in sorted(clashes.items()))
        raise AmbiguousForV1(f"schema v1 keys answers by lane name alone, and several nodes serve one: {said}; "
                             f"read schema v2 ({SCHEMA_ID})")
    out = wire(document, exclude={"nodes", "lanes"})
    out["schema"] = SCHEMA_V1
    out["lanes"] = {name: _v1_lane(document.lanes[keys[0]]) for name, keys in sorted(by_name.items())}
    return out


def _v1_lane(lane: LaneModel) -> dict[str, Any]:
    """An answer in v1's words: v1 has no ``undecided`` status, so such an answer is ``ok`` there with its
    reason (which says the doubling it rests on is undecided) and ``undecided`` kept beside it."""
    if lane.status == "undecided":
        return wire(lane.model_copy(update={"status": "ok"}))
    if lane.last_status == "undecided":
        return wire(lane.model_copy(update={"last_status": "ok"}))
    return wire(lane)


def mark_changed(lane: LaneModel, validity: ValidityModel) -> LaneModel:
    """Answer ``lane`` with ``validity`` (as it was said: ``recommender.validity``); stale (its last status kept)
    when what it was measured on changed, and back to its own status when it no longer differs."""
    update: dict[str, Any] = {"validity": validity}
    if validity.state == "changed":
        if lane.status != "stale":
            update["last_status"] = lane.status
        update.update(status="stale", reason=f"measured on something else: {validity.reason}")
    return lane.model_copy(update=update)
