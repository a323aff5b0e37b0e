"""The recommendations document's one shape (issue 30), and the service's small answers. The run
registration body is ``core.manifest.RunManifest`` itself.

The analysis states its summaries in these models (``LaneAnalysis.fairness_summary`` is a ``FairnessModel``,
``step_models`` the ``StepModel`` of each rung, ``RateAnswer.model`` a ``RateModel``, a ``TraceAnswer``'s
``to_dict`` a ``TraceModel``); the document builder (``answer.document``) dumps them into the JSON the
store keeps and serves, and every reader validates that JSON once at its edge
(``answer.document.read_document``) and reads attributes after. The service declares them so OpenAPI
describes exactly what it serves, and ``recommender.schema`` writes the JSON Schema of
``RecommendationsDocument`` to ``recommender/schema/recommendations.v2.json`` (v1's schema stays committed
beside it for the v1 view, ``GET /recommendations?schema=v1``). Unknown fields are allowed in the document (a
version grows by addition, never by renaming; a change of meaning is a new version). Shapes declared elsewhere
are not declared again: a step is ``core.figures.StepFigures`` extended with its verdict, the policy is
``answer.policy.Policy``, the fingerprint ``core.lane_evidence.FingerprintModel``, the open-loop
answers (rate and trace) ``answer.open_loop_models`` (``RateModel``, ``TraceModel`` and their parts).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr
from pydantic.config import JsonDict
from pydantic.dataclasses import dataclass as pydantic_dataclass

from satbench.answer.agent_analysis import AgentsModel
from satbench.answer.checks import CONSTRAINTS
from satbench.answer.energy import EnergyModel
from satbench.answer.open_loop_models import (
    RateModel,
    TraceEvidenceModel,
    TraceModel,
    TracePointModel,
)
from satbench.answer.policy import Policy
from satbench.answer.prefill_analysis import PrefillModel, PrefillRungModel
from satbench.core.figures import StepFigures
from satbench.core.lane_evidence import FingerprintModel

__all__ = [
    "CapabilitiesModel",
    "CapabilityEntry",
    "CapabilityLane",
    "CapabilityNode",
    "ChangeModel",
    "Constraint",
    "DriftModel",
    "FingerprintModel",
    "HealthModel",
    "LaneModel",
    "LaneStatus",
    "NodeModel",
    "PrefillModel",
    "PrefillRungModel",
    "RecommendationsDocument",
    "RunInfo",
    "RunList",
    "RunListed",
    "RunRegistered",
    "StepModel",
    "TraceEvidenceModel",
    "TraceModel",
    "TracePointModel",
    "ValidityModel",
    "said",
]

# the binding constraints, as the registry lists them (``answer.checks.CONSTRAINTS``)
if TYPE_CHECKING:
    Constraint = str
else:
    Constraint = Literal[CONSTRAINTS]
# ``unsaturated``: the answer is the top rung, a lower bound (throughput still grew there: ``ladder_top``);
# ``undecided``: the answer rests on a doubling whose gain interval straddles the policy's gain (``undecided``)
LaneStatus = Literal["ok", "unsaturated", "undecided", "insufficient_data", "degraded", "stale"]
CheckStatus = Literal["ok", "flagged", "warn", "not_applicable", "insufficient_data", "unknown"]


def said(model: BaseModel, name: str) -> Any:
    """Field ``name`` of ``model`` where the document said it, else None: a reader that treats an absent field
    as unknown (``fairness.ok`` absent is not "fair") reads it here, not through the field's default."""
    return getattr(model, name) if name in model.model_fields_set else None


_FIGURE = "the figure it measured, in words (``answer.checks``); absent in a document written before it was stated"
_UNIT = "how measured and limit read: s, ratio (x), share (a fraction), index (Jain's), count"
_SETTING = "the policy setting that gave its limit"


class ViolationModel(BaseModel):
    constraint: Constraint
    measured: float
    limit: float
    detail: str
    figure: str | None = Field(None, description=_FIGURE)
    unit: str | None = Field(None, description=_UNIT)
    setting: str | None = Field(None, description=_SETTING)


def _every_field_present(schema: JsonDict, cls: type[Any]) -> None:
    """A served step carries every field (the figures' defaults are filled in), so its schema requires them
    all and names no defaults; a field excluded from the output (``lane``) is never required."""
    excluded = {name for name, info in cls.__pydantic_fields__.items() if info.exclude}
    properties = schema.get("properties")
    if isinstance(properties, dict):
        for prop in properties.values():
            if isinstance(prop, dict):
                prop.pop("default", None)
        schema["required"] = [name for name in properties if name not in excluded]


class CheckModel(BaseModel):
    """One judgment of one rung (``answer.verdicts``): ``flagged`` binds, ``warn`` is reported."""

    status: CheckStatus
    measured: float | None
    limit: float | None
    detail: str
    figure: str | None = Field(None, description=_FIGURE)
    unit: str | None = Field(None, description=_UNIT)
    setting: str | None = Field(None, description=_SETTING)


@pydantic_dataclass(frozen=True, kw_only=True, config=ConfigDict(json_schema_extra=_every_field_present))
class StepModel(StepFigures):
    """One rung as measured over its step window (the ``StepFigures`` of the source) and judged."""

    lane: str = Field("", exclude=True)  # the lane key of the document already names it
    usable: Annotated[bool, Field(
        description="valid, enough requests and stable throughput: may count for the answer")]
    # a document written before a field existed reads with it empty (the schema still requires them all)
    unusable_reason: str | None = None
    violations: Annotated[list[ViolationModel], Field(default_factory=list)]
    gain_per_doubling: Annotated[float | None, Field(
        description="gain over the previous usable rung, per doubling")] = None
    gain_interval: Annotated[list[float] | None, Field(
        description="that gain's interval at the policy's confidence, from the rungs' throughput intervals")] = None
    checks: Annotated[dict[str, CheckModel], Field(
        default_factory=dict,
        description="decode_starvation, prefill_starvation, fairness, interference, memory: where the rung stands")]


class FairnessModel(BaseModel):
    """Over every measured rung: ``ok`` is false when some rung was flagged; ``ok_at_recommended`` over the
    accepted rungs only."""

    ok: bool
    ok_at_recommended: bool = True
    jain_min: float | None
    max_min_share_max: float | None = None
    user_wait_ratio_max: float | None = None
    flagged_at: list[int] = Field(default_factory=list, description="rungs that broke a fairness limit")
    by_rung: dict[str, CheckStatus] = Field(default_factory=dict, description="each rung's fairness check")


class StarvationModel(BaseModel):
    """As ``FairnessModel``, for decode and prefill starvation (and prefill interference, which warns)."""

    ok: bool
    ok_at_recommended: bool = True
    decode_ok: bool = True
    prefill_ok: bool = True
    pause_p99_max_s: float | None = None
    interference_share_max: float | None = None
    admission_wait_max_s: float | None = None
    decode_stall_max_ratio: float | None
    prefill_wait_max_s: float | None
    decode_flagged_at: list[int] = Field(default_factory=list, description="rungs that starved decodes")
    prefill_flagged_at: list[int] = Field(default_factory=list, description="rungs that starved prefills")
    interference_warned_at: list[int] = Field(default_factory=list)
    decode_by_rung: dict[str, CheckStatus] = Field(default_factory=dict)
    prefill_by_rung: dict[str, CheckStatus] = Field(default_factory=dict)


class KneeModel(BaseModel):
    method: str
    concurrency: int
    difference: float


class PairModel(BaseModel):
    smaller: int
    larger: int


class UndecidedModel(BaseModel):
    """The doubling an ``undecided`` answer rests on: its gain per doubling and that gain's interval, which
    straddles the policy's ``min_gain_per_doubling`` (the answer takes ``larger``)."""

    smaller: int
    larger: int
    gain: float
    interval: list[float]


class DriftModel(BaseModel):
    """A change of the node's speed during the lane's walk (``core.drift``): ``drifted`` where it lay beyond
    ``policy.drift_floor``; ``ratio`` is the speed after over before, ``interval`` its interval at the policy's
    confidence; ``between`` the rungs (concurrencies) it happened between; ``how`` which check saw it
    (``reference``: the lowest rung re-measured at the lane's end; ``rung``: a doubling that lost throughput
    with every request admitted); ``decode_step_s`` the runtime's decode step before and after."""

    drifted: bool
    how: Literal["reference", "rung"]
    concurrency: int
    ratio: float
    interval: list[float] | None
    between: list[int]
    decode_step_s: list[float | None]
    said: str


class TunedCandidateModel(BaseModel):
    id: str
    state: Literal["measured", "refused", "skipped", "pruned"]
    status: str | None = None
    recommended_concurrency: int | None = None
    binding_constraint: str | None = None
    throughput_tok_s: float | None = None
    dominated_by: str | None = None
    reason: str | None = None


class TunedModel(BaseModel):
    """A lane's tuned server settings (``satbench tune``): the winner's settings and flags, the runner-up,
    the margin between them and every candidate; the lane's answer beside it is the winner's own walk."""

    # declared in the order the tune writes the block (a dump is its JSON, key for key)
    tune_id: str
    settings: dict[str, int] | None
    flags: str | None = Field(description="the winner's exact server flags (llama-server -np -b -ub -c)")
    recommended_concurrency: int | None
    throughput_tok_s: float | None
    runner_up: dict[str, Any] | None = None
    margin: dict[str, Any] | None = Field(None, description="tok_s, ratio, uncertainty_tok_s (95%), significant")
    fingerprint: str = Field(description="sha256 of the lane's model or profile, grid, workload and policy")
    candidates: list[TunedCandidateModel]


class ChangeModel(BaseModel):
    field: str = Field(description="the fingerprint field that differs, e.g. settings.slots")
    measured: Any
    live: Any


class ComparedModel(BaseModel):
    """How much of the fingerprint was compared (``core.fingerprint_compare.COMPARED_FIELDS``)."""

    fields: int = Field(description="fields known on both sides, and so compared")
    of: int = Field(description="fields a fingerprint has")
    not_compared: list[str] = Field(default_factory=list, description="the fields one side could not tell")


class ValidityModel(BaseModel):
    """Whether what the answer was measured on is what the node runs now (its live fingerprint)."""

    state: Literal["valid", "changed", "unknown"] = Field(
        description="valid: nothing differs and everything that decides capacity (build, model, slots, context "
                    "and KV layout, batch sizes) was compared; changed: a field differs (the answer is stale); "
                    "unknown: not all of that could be compared, or no live fingerprint (reason says why)")
    checked_at: str | None = None
    changes: list[ChangeModel] = Field(default_factory=list)
    reason: str | None = None
    compared: ComparedModel | None = Field(None, description="how much was compared: n of m fields")


class LaneModel(BaseModel):
    node: str = Field("local", description="the node (runtime host) the lane is on")
    lane: str = Field("", description="the lane's name on its node")
    url: str | None = Field(None, description="the runtime's base URL the lane was measured at")
    model: str | None = Field(None, description="the model its requests name (a router node routes by it)")
    fingerprint: FingerprintModel | None = Field(None, description="what the answer was measured on")
    validity: ValidityModel | None = None
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
    undecided: UndecidedModel | None = Field(None, description="the undecided doubling the answer rests on")
    next_rung_constraints: list[Constraint] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    run_id: str
    measured_at: str | None
    steps: list[StepModel]
    rate: RateModel | None = Field(None, description="the rate answer, where the run walked open-loop rates")
    drift: DriftModel | None = Field(None, description="the drift check (core.drift): the node's speed at the "
                                     "lane's end against its start; absent where nothing was checked")
    trace: TraceModel | None = Field(None, description="the trace answer, where the lane replayed a recorded "
                                                        "trace; absent otherwise")
    prefill: PrefillModel | None = Field(None, description="the peak prefill throughput, where the run walked it "
                                                           "(long prompts, one output token); absent otherwise")
    energy: EnergyModel | None = Field(None, description="energy and cost at the recommended concurrency "
                                                         "(core.energy); absent without an answer")
    agents: AgentsModel | None = Field(None, description="the most concurrent agent sessions the lane holds at an "
                                                         "SLO tier, where the run walked them; absent otherwise")
    tuned: TunedModel | None = Field(None, description="present where the answer comes from satbench tune")
    partial: str | None = Field(None, description="set where the answer comes from a run that did not finish "
                                "(killed mid-walk, or cut short by a full disk): which run and why. Such an answer "
                                "is served only where no complete run answers the lane")
    last_status: LaneStatus | None = Field(None, description="status before the answer went stale")
    age_s: float | None = None


class SourceModel(BaseModel):
    kind: Literal["prometheus", "records"]
    url: str | None = None
    run_dir: str | None = None


class NodeModel(BaseModel):
    labels: dict[str, str] = Field(default_factory=dict, description="the node's labels (GPU class...)")
    lanes: list[str] = Field(description="the keys of its answers in ``lanes``")


class ShardsModel(BaseModel):
    """One fleet run's shards (``recommender.fleet_runs.FleetRun.summary``)."""

    count: int = Field(description="how many shards the run was cut into")
    fleet: str = Field(description="the digest of the fleet the shards were cut from")
    reported: list[int] = Field(description="the shards whose runs were registered")
    missing: dict[str, list[str]] = Field(description="shard index -> the lane keys it was to measure, for shards "
                                                      "not reported")
    failed: dict[str, str] = Field(description="shard index -> why its analysis failed")
    partial: dict[str, str] = Field(description="shard index -> why its run did not finish")


class RecommendationsDocument(BaseModel):
    """``GET /recommendations``: per node and lane, how much concurrency is useful, and the evidence."""

    model_config = ConfigDict(populate_by_name=True, title="satbench.recommendations/v2")

    schema_id: Literal["satbench.recommendations/v2"] = Field(alias="schema")
    generated_at: str
    run_id: str
    source: SourceModel
    policy: Policy
    nodes: dict[str, NodeModel] = Field(default_factory=dict, description="the answers by node")
    lanes: dict[str, LaneModel] = Field(
        description="answers by lane key: the lane's name, or <node>/<lane> for a lane that names a node")
    notes: list[str] = Field(default_factory=list)
    stale: bool = False
    age_s: float | None = None
    shards: dict[str, ShardsModel] | None = Field(
        None, description="a fleet run's shards (core.shards), by run id: which reported, which did not and why; "
                          "absent for a run that is not sharded")
    _schema_read: str = PrivateAttr(default="satbench.recommendations/v2")

    @property
    def schema_read(self) -> str:
        """The schema the document was read in: a v1 document is said in v2 when it is read
        (``answer.document.read_document``), and what is cut from it still names v1."""
        return self._schema_read


class CapabilityEntry(BaseModel):
    """One lane's capability (``recommender.capabilities``): what a router sets a per-deployment limit from."""

    max_useful_concurrency: int | None = Field(description="the recommended concurrency; null: no answer")
    throughput_tok_s: float | None = Field(description="output tokens/s measured at it")
    binding_constraint: Constraint | None
    status: LaneStatus | None = Field(description="null for a lane a node lists that has no answer")
    valid: bool | None = Field(description="true: checked against the live runtime and it holds; false: "
                                           "measured on something else; null: nobody could tell")
    run_id: str | None
    measured_at: str | None
    fingerprint_digest: str | None
    url: str | None = Field(description="the runtime's base URL")
    reason: str | None = None
    shares_hardware_with: list[str] = Field(default_factory=list, description="the other lanes (keys) of its "
                                            "node: its answer was measured with them idle")
    max_useful_concurrency_together: int | None = Field(None, description="its share while every lane of its "
                                                         "node runs at once (the node's capacity_rule, split evenly)")
    partial: str | None = Field(None, description="set where the answer comes from a run that did not finish: "
                                                  "which run and why (its ladder stopped early: a lower bound)")


class CapabilityLane(CapabilityEntry):
    node: str
    lane: str


class CapabilityNode(BaseModel):
    labels: dict[str, str] = Field(default_factory=dict)
    lanes: dict[str, CapabilityEntry] = Field(description="by lane name on the node")
    shared_hardware: bool = Field(False, description="its lanes share its hardware")
    capacity_rule: str | None = Field(None, description="what its lanes can take together, where they share it")


class CapabilitiesModel(BaseModel):
    """``GET /capabilities``: each lane's capability and nothing else, flat by lane key and grouped by node."""

    model_config = ConfigDict(populate_by_name=True)

    schema_id: str | None = Field(alias="schema", description="the schema of the document it is cut from")
    generated_at: str | None
    lanes: dict[str, CapabilityLane]
    nodes: dict[str, CapabilityNode]


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
    partial: str | None = Field(None, description="why the run is not complete (killed, cut short), or null")
    manifest: dict[str, Any]
    recommendations: RecommendationsDocument | None


class RunListed(BaseModel):
    """One registered run in ``GET /runs`` (``recommender.store.RecommendationStore.runs``)."""

    key: str = Field(description="its key: the run id, or <run_id>.shard-I-of-N for a shard")
    run_id: str
    registered_at: float
    measured_at: float = Field(description="when it was measured (its windows' end), what answers rank by")
    complete: bool = Field(description="its walk finished; false: a partial run, ranked below every complete one")
    partial: str | None = Field(description="why it is not complete")
    analyzed: bool
    reason: str | None = None
    serves: list[str] = Field(description="the lane keys of the served document whose answer it gives")


class RunList(BaseModel):
    runs: list[RunListed]


class HealthModel(BaseModel):
    status: Literal["ok"]
    runs: int
    document: Literal["none", "fresh", "stale"]
    prometheus_url: str | None
