"""Pydantic models of the HTTP edge: the recommendations document (response models, JSON Schema source)
and the run registration body.

The analysis never sees these: it works on frozen dataclasses and returns plain dicts; the service declares
these models so OpenAPI describes exactly what it serves, and ``recommender.schema`` writes the JSON Schema
of ``RecommendationsDocument`` to ``recommender/schema/recommendations.v1.json``. Unknown fields are
allowed in the document (v1 grows by addition, never by renaming).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, FiniteFloat

from recommender.policy import PolicyModel

__all__ = [
    "Constraint",
    "HealthModel",
    "LaneModel",
    "LaneStatus",
    "RecommendationsDocument",
    "RunInfo",
    "RunManifestIn",
    "RunRegistered",
    "StepModel",
    "StepWindowIn",
]

Constraint = Literal[
    "throughput_plateau", "slo_ttft", "slo_itl", "slo_e2e", "fairness", "decode_starvation",
    "prefill_starvation", "errors", "memory", "ladder_top",
]
LaneStatus = Literal["ok", "insufficient_data", "degraded", "stale"]
RUN_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"


class QuantilesModel(BaseModel):
    p50: float | None = None
    p95: float | None = None
    p99: float | None = None


class MemoryModel(BaseModel):
    gpu_max: float | None = None
    gpu_total: float | None = None
    host_rss_max: float | None = None


class ViolationModel(BaseModel):
    constraint: Constraint
    measured: float
    limit: float
    detail: str


class StepModel(BaseModel):
    """One rung as measured over its step window (the ``StepFigures`` of the source) and judged."""

    concurrency: int
    window_s: float
    requests: int
    errors: int
    throughput_tok_s: float
    requests_per_s: float
    latency_s: QuantilesModel
    ttft_s: QuantilesModel
    itl_s: QuantilesModel
    tpot_s: QuantilesModel
    queue_s: QuantilesModel
    occupancy_ratio: float | None
    queue_depth_avg: float | None
    memory_bytes: MemoryModel
    jain: float | None
    max_min_share: float | None
    decode_stall_max_ratio: float | None
    decode_stall_max_s: float | None
    prefill_wait_max_s: float | None
    errors_by_outcome: dict[str, int]
    throughput_ci_tok_s: tuple[float, float] | None
    valid: bool
    reason: str | None
    usable: bool = Field(description="valid, enough requests and stable throughput: may count for the answer")
    unusable_reason: str | None
    violations: list[ViolationModel]
    gain_per_doubling: float | None = Field(description="gain over the previous usable rung, per doubling")


class FairnessModel(BaseModel):
    """Over the accepted rungs (``ok``, extremes) and every measured rung (``flagged_at``)."""

    ok: bool
    jain_min: float | None
    max_min_share_max: float | None = None
    flagged_at: list[int] = Field(default_factory=list, description="rungs that broke a fairness limit")


class StarvationModel(BaseModel):
    """Over the accepted rungs (``ok``, extremes) and every measured rung (``*_flagged_at``)."""

    ok: bool
    decode_ok: bool = True
    prefill_ok: bool = True
    decode_stall_max_ratio: float | None
    prefill_wait_max_s: float | None
    decode_flagged_at: list[int] = Field(default_factory=list, description="rungs that starved decodes")
    prefill_flagged_at: list[int] = Field(default_factory=list, description="rungs that starved prefills")


class KneeModel(BaseModel):
    method: str
    concurrency: int
    difference: float


class PairModel(BaseModel):
    smaller: int
    larger: int


class LaneModel(BaseModel):
    status: LaneStatus
    reason: str | None = None
    recommended_concurrency: int | None = Field(description="what capability reporting reads")
    saturation_concurrency: int | None
    binding_constraint: Constraint | None
    throughput_at_recommended_tok_s: float | None
    fairness: FairnessModel
    starvation: StarvationModel
    knee: KneeModel | None = None
    indistinguishable: PairModel | None = None
    next_rung_constraints: list[Constraint] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    run_id: str
    measured_at: str | None
    steps: list[StepModel]
    last_status: LaneStatus | None = Field(None, description="status before the answer went stale")
    age_s: float | None = None


class SourceModel(BaseModel):
    kind: Literal["prometheus", "records"]
    url: str | None = None
    run_dir: str | None = None


class RecommendationsDocument(BaseModel):
    """``GET /recommendations``: per lane, how much concurrency is useful, and the evidence."""

    model_config = ConfigDict(populate_by_name=True, title="satbench.recommendations/v1")

    schema_id: Literal["satbench.recommendations/v1"] = Field(alias="schema")
    generated_at: str
    run_id: str
    source: SourceModel
    policy: PolicyModel
    lanes: dict[str, LaneModel]
    notes: list[str] = Field(default_factory=list)
    stale: bool = False
    age_s: float | None = None


class StepWindowIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    lane: str = Field(min_length=1, max_length=200)
    concurrency: int = Field(ge=1, le=1_000_000)
    start: FiniteFloat
    end: FiniteFloat
    warmup_start: FiniteFloat | None = None
    drain_end: FiniteFloat | None = None
    valid: bool = True
    reason: str | None = None
    notes: list[str] = Field(default_factory=list)


class RunManifestIn(BaseModel):
    """``POST /runs`` body: ``RunManifest.to_dict()``. Unknown top-level keys are kept."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    schema_id: Literal["core.manifest/v1"] = Field("core.manifest/v1", alias="schema")
    run_id: str = Field(pattern=RUN_ID_PATTERN)
    created_at: FiniteFloat = 0.0
    finished_at: FiniteFloat | None = None
    command: list[str] = Field(default_factory=list)
    config: dict[str, Any] = Field(default_factory=dict)
    versions: dict[str, Any] = Field(default_factory=dict)
    lanes: dict[str, dict[str, Any]] = Field(default_factory=dict)
    hardware: dict[str, Any] = Field(default_factory=dict)
    network: dict[str, Any] = Field(default_factory=dict)
    prometheus: dict[str, Any] = Field(default_factory=dict)
    steps: list[StepWindowIn] = Field(min_length=1)


class RunRegistered(BaseModel):
    run_id: str
    analyzed: bool
    reason: str | None = None
    lanes: dict[str, int | None] = Field(description="recommended concurrency per lane, when analysed")


class RunInfo(BaseModel):
    run_id: str
    registered_at: float
    analyzed: bool
    reason: str | None = None
    manifest: dict[str, Any]
    recommendations: RecommendationsDocument | None


class HealthModel(BaseModel):
    status: Literal["ok"]
    runs: int
    document: Literal["none", "fresh", "stale"]
    prometheus_url: str | None
