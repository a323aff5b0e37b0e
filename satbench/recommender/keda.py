"""The answers as autoscalers read them: a KEDA ``ScaledObject`` per model and the KServe
``LLMInferenceService`` ``spec.scaling`` block that takes the same triggers (``satbench capabilities --format
keda|kserve``).

Replicas of one model are the lanes of one name across the fleet's nodes (the LiteLLM form groups them so
too). Each object scales that group on two Prometheus triggers, whose thresholds are the lanes' answers:

- **in-flight requests per replica**: ``sum(runtime_requests_processing{lane}) + sum(runtime_queue_depth
  {lane})`` (what the runtimes are running and holding back) with ``metricType: AverageValue``, so KEDA's HPA
  keeps the total over the replicas at or below the threshold: the recommended concurrency, beyond which a
  replica's throughput no longer grows or an objective breaks. Where the group's nodes answered differently
  the smallest usable answer is taken (every replica then stays within its own);
- **requests/s per replica**: ``sum(rate(runtime_relay_requests_total{lane, route!="other"}[60000ms]))`` (the
  exporter's relay counts what it forwards) against the rate answer (``max_rate_rps``: the most requests/s the
  lane took within its objectives), only where every usable lane of the group has one (the run walked open-loop
  rates). Seconds of prefill backlog need the lane's peak prefill throughput, which satbench does not yet
  measure, so no such trigger is made.

A group with no usable answer (stale: measured on something else; never measured) still gets its object,
with the in-flight threshold 1 (scale out at one request per replica, which cannot overload a node) and the
reason in its annotations: dropping the object would leave the last thresholds in force and nobody told.

Every object carries the ``satbench`` stamp of each lane it rests on (``recommender.consumer_records.
lane_stamp``) as annotations: ``satbench.io/fingerprint`` (the digest of the lane the threshold came from),
``satbench.io/measured-at``, ``satbench.io/concurrency-interval``, ``satbench.io/stale``,
``satbench.io/source-stale`` and ``satbench.io/usable`` (``"true"``/``"false"``), ``satbench.io/reason``
and ``satbench.io/answers`` (every lane's stamp, JSON). Annotation values are strings, as Kubernetes wants them.

The output is a ``v1`` ``List``: ``kubectl apply -f`` takes the KEDA one as it is; the KServe one holds
partial ``LLMInferenceService`` objects (metadata and ``spec.scaling`` only), for ``kubectl apply
--server-side --field-manager=satbench``, which merges the fields it names into the service the operator
wrote. The schemas they are checked against are the published CRDs (tests/recommender/crds).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from satbench.answer.models import LaneModel, RecommendationsDocument
from satbench.core.promql import Matcher, rate, selector
from satbench.recommender.capabilities import all_lanes
from satbench.recommender.consumer_records import lane_stamp

__all__ = ["AutoscalerOptions", "keda_scaled_objects", "kserve_scaling", "lane_groups"]

SERIAL_THRESHOLD = 1
RATE_WINDOW_S = 60.0
_DNS = re.compile(r"[^a-z0-9-]+")


@dataclass(frozen=True)
class AutoscalerOptions:
    """Where the objects point: the metrics store KEDA queries, the namespace, the replica bounds, the workload
    each model group scales (``scale_targets``: lane name -> ``NAME`` or ``KIND/NAME``; default a Deployment
    named as the lane) and the ``TriggerAuthentication`` with the store's credentials, where it wants some."""

    server_address: str = "http://vmauth.satbench.svc:8427"  # KEDA queries from its own namespace
    namespace: str | None = None
    min_replicas: int = 1
    max_replicas: int = 8
    scale_targets: dict[str, str] = field(default_factory=dict)
    auth_ref: str | None = None


def _dns_name(text: str) -> str:
    return _DNS.sub("-", text.lower()).strip("-")[:50].strip("-") or "lane"


def _object_name(lane_name: str) -> str:
    """``satbench-<lane>``; a lane name that is not already a DNS label gets its sha256's first 8 hex digits
    too, so two names that read alike once cleaned (``a_b``, ``a.b``) stay two objects."""
    clean = _dns_name(lane_name)
    suffix = "" if clean == lane_name else "-" + hashlib.sha256(lane_name.encode()).hexdigest()[:8]
    return f"satbench-{clean}{suffix}"


def lane_groups(document: RecommendationsDocument) -> dict[str, list[tuple[str, LaneModel | None]]]:
    """The document's lanes by lane name (every node's lane of that name is a replica of one model)."""
    groups: dict[str, list[tuple[str, LaneModel | None]]] = {}
    for key, lane in all_lanes(document):
        name = lane_stamp(document, key, lane).lane
        groups.setdefault(str(name), []).append((key, lane))
    return groups


def _usable_rate(lane: LaneModel | None) -> float | None:
    rate_answer = None if lane is None else lane.rate
    if rate_answer is None or rate_answer.status not in ("settled", "unsaturated") or not rate_answer.max_rate_rps:
        return None
    return rate_answer.max_rate_rps


def _number(value: float) -> str:
    return f"{value:.6g}"


def _triggers(document: RecommendationsDocument, name: str, members: list[tuple[str, LaneModel | None]],
              options: AutoscalerOptions) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The group's triggers and its annotations (module docstring)."""
    stamps = [lane_stamp(document, key, lane) for key, lane in members]
    usable = [(stamp, lane) for stamp, (_, lane) in zip(stamps, members, strict=True)
              if stamp.usable and lane is not None and lane.recommended_concurrency is not None]
    source = min(usable, key=lambda u: (u[1].recommended_concurrency, u[0].lane_key)) if usable else None
    in_flight = f"sum({selector('runtime_requests_processing', lane=name)}) + " \
                f"sum({selector('runtime_queue_depth', lane=name)})"
    common: dict[str, str] = {"serverAddress": options.server_address, "ignoreNullValues": "true"}
    auth = {"authenticationRef": {"name": options.auth_ref}} if options.auth_ref else {}
    if options.auth_ref:
        common["authModes"] = "basic"
    threshold = SERIAL_THRESHOLD if source is None else source[1].recommended_concurrency
    triggers: list[dict[str, Any]] = [{
        "type": "prometheus", "name": "in-flight-per-replica", "metricType": "AverageValue", **auth,
        "metadata": {**common, "query": in_flight, "threshold": str(threshold)},
    }]
    rates = [_usable_rate(lane) for _, lane in usable]
    if usable and all(r is not None for r in rates):
        served = rate("runtime_relay_requests_total", Matcher("route", "!=", "other"), window=RATE_WINDOW_S,
                      lane=name)
        triggers.append({
            "type": "prometheus", "name": "requests-per-second-per-replica", "metricType": "AverageValue", **auth,
            "metadata": {**common, "query": f"sum({served})",
                         "threshold": _number(min(r for r in rates if r is not None))},
        })
    stale = any(s.stale for s in stamps)
    reasons = [f"{s.lane_key}: {s.reason}" for s in stamps if not s.usable and s.reason]
    chosen = None if source is None else source[0]
    annotations = {
        "satbench.io/fingerprint": str((chosen and chosen.fingerprint_digest) or ""),
        "satbench.io/measured-at": str((chosen and chosen.measured_at) or ""),
        "satbench.io/concurrency-interval": json.dumps(chosen and chosen.concurrency_interval),
        "satbench.io/threshold-from": str((chosen and chosen.lane_key) or ""),
        "satbench.io/stale": "true" if stale else "false",
        "satbench.io/source-stale": "true" if document.stale else "false",
        "satbench.io/usable": "true" if source is not None else "false",
        "satbench.io/reason": "; ".join(reasons) if reasons else "",
        "satbench.io/answers": json.dumps([s.as_json() for s in stamps], sort_keys=True, separators=(",", ":")),
    }
    return triggers, annotations


def _target(name: str, options: AutoscalerOptions) -> dict[str, str]:
    given = options.scale_targets.get(name, _dns_name(name))
    kind, _, target = given.rpartition("/")
    ref = {"name": target}
    if kind:
        ref.update(kind=kind, apiVersion="apps/v1")
    return ref


def _metadata(name: str, annotations: dict[str, str], options: AutoscalerOptions) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {"app.kubernetes.io/managed-by": "satbench"},
                            "annotations": annotations}
    if options.namespace:
        meta["namespace"] = options.namespace
    return meta


def keda_scaled_objects(document: RecommendationsDocument, options: AutoscalerOptions | None = None
                        ) -> dict[str, Any]:
    """A ``v1`` ``List`` of one KEDA ``ScaledObject`` per model group (module docstring; pure)."""
    options = options or AutoscalerOptions()
    items = []
    for name, members in sorted(lane_groups(document).items()):
        triggers, annotations = _triggers(document, name, members, options)
        items.append({
            "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
            "metadata": _metadata(_object_name(name), annotations, options),
            "spec": {"scaleTargetRef": _target(name, options), "minReplicaCount": options.min_replicas,
                     "maxReplicaCount": options.max_replicas, "triggers": triggers},
        })
    return {"apiVersion": "v1", "kind": "List", "items": items}


def kserve_scaling(document: RecommendationsDocument, options: AutoscalerOptions | None = None) -> dict[str, Any]:
    """A ``v1`` ``List`` of partial ``LLMInferenceService`` objects, one per model group: its name (the scale
    target's), the stamp's annotations and ``spec.scaling`` with the KEDA triggers (module docstring; pure)."""
    options = options or AutoscalerOptions()
    items = []
    for name, members in sorted(lane_groups(document).items()):
        triggers, annotations = _triggers(document, name, members, options)
        items.append({
            "apiVersion": "serving.kserve.io/v1alpha2", "kind": "LLMInferenceService",
            "metadata": _metadata(_target(name, options)["name"], annotations, options),
            "spec": {"scaling": {"minReplicas": options.min_replicas, "maxReplicas": options.max_replicas,
                                 "keda": {"triggers": triggers}}},
        })
    return {"apiVersion": "v1", "kind": "List", "items": items}
