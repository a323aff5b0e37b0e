"""The answers as AIBrix's GPU optimizer reads a deployment's profile (``satbench capabilities --format aibrix``).

AIBrix sizes a heterogeneous GPU fleet from one profile per deployment (``gpu_optimizer/optimizer/profiling/
gen_profile.py``): ``gpu`` (the deployment's name), ``cost``, ``tputs`` (a matrix of requests/s that meet the
SLOs, rows by output length and columns by input length), ``indexes`` (``[output lengths, input lengths]``,
the buckets of those rows and columns, ascending), ``created`` (Unix seconds), ``e2e`` (the mean end-to-end
latency in the same cells) and ``slos``; a cell it has no qualifying rate for holds 0. It fills them by hand
from a sweep of request rates per length bucket; here each cell is a served answer.

A profile per model and node kind: the lanes of one model name whose fingerprints agree on what decides capacity
(``recommender.node_kind``: the model files, the runtime's build and settings, the accelerator) are one
deployment, named as its scale target (``--scale-target``) where the model has one kind of node, else
``<model>-<node kind digest>`` (AIBrix matches a profile to a Deployment by that name). Each lane's workload is
one bucket: its mean prompt and output lengths (a fixed length is its value, a uniform one its midpoint, a
lognormal its median). A lane answered under several workloads (runs of the fleet with different lengths) fills
several cells; one run fills one. A cell's rate is the lane's rate answer (open-loop, at least
``attainment_target`` of requests within every objective) where it walked rates; else the requests/s its closed-
loop answer sustained (the recommended rung's, every request within the objectives' p95 by the concurrency
verdicts); the ``satbench`` stamp per cell says which. Its ``e2e`` is the mean latency at that rung. A lane that
is stale, changed or unanswered leaves its cell 0 (AIBrix's "no qualifying rate") and says why in its stamp; the
profile stays, so AIBrix is never left on an old number without a word. ``cost`` is 1.0, AIBrix's default (the
node's price is AIBrix's to set).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from satbench.answer.models import LaneModel, RecommendationsDocument
from satbench.core.lane_evidence import LengthFacts
from satbench.recommender.capabilities import all_lanes
from satbench.recommender.consumer_records import LaneStamp, lane_stamp
from satbench.recommender.keda import AutoscalerOptions
from satbench.recommender.node_kind import kind_id

__all__ = ["aibrix_profiles", "bucket_of", "node_kind"]

def _length(dist: LengthFacts | None) -> float | None:
    if dist is None:
        return None
    if dist.kind == "fixed":
        value = dist.value
    elif dist.kind == "uniform":
        value = None if dist.low is None or dist.high is None else (dist.low + dist.high) / 2
    else:
        value = dist.median
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def bucket_of(lane: LaneModel) -> tuple[int, int] | None:
    """The lane's workload as ``(input tokens, output tokens)``, its mean lengths rounded; None where unknown."""
    if lane.fingerprint is None:
        return None
    workload = lane.fingerprint.workload_facts
    prompt, output = _length(workload.prompt_tokens), _length(workload.output_tokens)
    return None if prompt is None or output is None else (round(prompt), round(output))


def node_kind(lane: LaneModel) -> str:
    """The lane's node kind (``recommender.node_kind``); ``unknown`` without a fingerprint."""
    return "unknown" if lane.fingerprint is None else kind_id(lane.fingerprint)


def _cell(lane: LaneModel, stamp: LaneStamp) -> tuple[float, float, dict[str, Any]]:
    """(requests/s, mean e2e s, the cell's stamp) of one lane (module docstring)."""
    answer = lane.recommended_concurrency
    at = next((s for s in lane.steps if s.concurrency == answer and s.rate_rps is None), None)
    e2e = 0.0 if at is None or at.latency_s.mean is None else float(at.latency_s.mean)
    if not stamp.usable:
        return 0.0, e2e, {**stamp.as_json(), "source": None}
    rate = lane.rate
    if rate is not None and rate.max_rate_rps is not None and rate.status in ("settled", "unsaturated"):
        return float(rate.max_rate_rps), e2e, {**stamp.as_json(), "source": f"rate answer ({rate.status})"}
    if at is None:
        return 0.0, e2e, {**stamp.as_json(), "source": None}
    return float(at.requests_per_s), e2e, {**stamp.as_json(), "source": f"closed loop at the answer (c={answer})"}


Cell = tuple[float, float, dict[str, Any]]  # (requests/s, mean e2e s, its stamp)


def _profile(name: str, cells: dict[tuple[int, int], Cell], inputs: list[int], outputs: list[int], cost: float,
             created: float) -> dict[str, Any]:
    empty: Cell = (0.0, 0.0, {})
    return {"gpu": name, "cost": cost,
            "tputs": [[cells.get((i, o), empty)[0] for i in inputs] for o in outputs],
            "indexes": [outputs, inputs], "created": created,
            "e2e": [[cells.get((i, o), empty)[1] for i in inputs] for o in outputs],
            "slos": {"percentile": 0},
            "satbench": {"cells": [{"input_tokens": i, "output_tokens": o, **cells[(i, o)][2]}
                                   for (i, o) in sorted(cells)]}}


def _created(measured_at: str | None) -> float:
    if not measured_at:
        return 0.0
    try:
        return datetime.fromisoformat(measured_at.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def _deployment(model: str, kind: str, kinds: int, options: AutoscalerOptions) -> str:
    """The deployment a profile is for: the model's scale target where it has one kind of node and one is
    configured (``--scale-target LANE=[KIND/]NAME``), else ``<model>-<node kind digest>``."""
    target = options.scale_targets.get(model)
    if target is not None and kinds == 1:
        return target.rsplit("/", 1)[-1]
    return f"{model}-{kind}"


def aibrix_profiles(document: RecommendationsDocument, options: AutoscalerOptions | None = None,
                    cost: float = 1.0) -> dict[str, Any]:
    """``{"profiles": {deployment: profile}, "unplaced": {lane key: why}}`` (module docstring). The profiles of
    one model share their ``indexes`` (AIBrix's optimizer refuses profiles of one model whose buckets differ):
    the union of its lanes' buckets, a cell no lane of a kind measured holding 0."""
    options = options or AutoscalerOptions()
    models: dict[str, dict[str, dict[tuple[int, int], Cell]]] = {}
    created: dict[tuple[str, str], float] = {}
    unplaced: dict[str, str] = {}
    for key, lane in all_lanes(document):
        stamp = lane_stamp(document, key, lane)
        bucket = None if lane is None else bucket_of(lane)
        if lane is None or bucket is None:
            unplaced[key] = stamp.reason or "no workload in its fingerprint: its lengths are unknown"
            continue
        model, kind = lane.lane or key, node_kind(lane)
        cell = _cell(lane, stamp)
        cells = models.setdefault(model, {}).setdefault(kind, {})
        if bucket not in cells or cell[0] < cells[bucket][0]:  # two nodes of one kind: the lesser holds for both
            cells[bucket] = cell
        created[(model, kind)] = max(created.get((model, kind), 0.0), _created(lane.measured_at))
    profiles: dict[str, Any] = {}
    for model, kinds in sorted(models.items()):
        inputs = sorted({i for cells in kinds.values() for i, _ in cells})
        outputs = sorted({o for cells in kinds.values() for _, o in cells})
        for kind, cells in sorted(kinds.items()):
            name = _deployment(model, kind, len(kinds), options)
            profiles[name] = _profile(name, cells, inputs, outputs, cost, created[(model, kind)])
    return {"profiles": profiles, "unplaced": unplaced}
