"""``tune.json``'s one shape (schema ``satbench.tune/v1``, issue 30), and ``read_tune``, its edge.

A tune's answer is built as these models (``satbench.tune.document``), written as their JSON dump, and read
back by one validation (``read_tune``: a one-line ``ValueError`` naming the first wrong field); past it the
report, the console, the README and the benches read attributes, never string keys. The JSON is the dump
itself: ``model_dump(mode="json", by_alias=True)`` keeps the declaration order, so every model declares its
fields in the order ``tune.json`` has always written them (a candidate's ``kv_unified`` sits after
``ctx_size``, where its settings put it; a document's ``notes`` follow its ``lanes``), and a field that is
null is written null, never left out, but for a read-back's ``kv_bytes_model``, which ``tune.json`` has always
left out where the model's facts cannot tell it.

The fields added after the first ``tune.json`` (the comparisons, the decision, the context, the memory, the
findings; a candidate's memory, read-back, truncation, window factor, fingerprint and resume) have defaults,
so a tune folder written before them still reads. Unknown fields are ignored (``extra="ignore"``, pydantic's
default, said here): the document grows by addition, never by renaming, so a reader takes what it knows of a
newer document. Every model is frozen: the document is what a tune found, and nothing edits it after.

The lane's ``tuned`` block in the recommendations document is the recommendations document's own
``answer.models.TunedModel``, built from a ``TuneLane`` by ``satbench.tune.document.tuned_block``; the
policy is ``answer.policy.Policy``; a read-back's start-up log is the runtime's own
(``runtimes.llamacpp.StartupLog.to_json``), kept as it was said.

A candidate's own folder holds ``candidate.json`` (``CandidateRecord``): the candidate, its fingerprint's
parts and the walk's ``WalkFacts``, which a resumed tune reads back instead of walking the candidate again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, ValidationError, model_serializer

from satbench.answer.policy import Policy
from satbench.core.config_files import first_problem

__all__ = [
    "SCHEMA",
    "CandidateRecord",
    "CandidateState",
    "ComparisonModel",
    "ContextModel",
    "DecisionModel",
    "DefaultKept",
    "LaneMemory",
    "Margin",
    "MemoryBudget",
    "MemoryFacts",
    "MemoryNeed",
    "ParetoPoint",
    "Readback",
    "TuneCandidate",
    "TuneDocument",
    "TuneGrid",
    "TuneLane",
    "Verdict",
    "WalkFacts",
    "read_tune",
]

SCHEMA: Literal["satbench.tune/v1"] = "satbench.tune/v1"

_FROZEN = ConfigDict(frozen=True, extra="ignore")

CandidateState = Literal["measured", "refused", "skipped", "pruned"]
Verdict = Literal["replaced", "not_faster", "not_significant", "gain_short"]


class Readback(BaseModel):
    """What a started server built, against its candidate (``satbench.tune.readback.verify``)."""

    model_config = _FROZEN

    total_slots: int | None = Field(default=None, description="/props total_slots; null where /props could not be read")
    n_ctx_slot: int | None = Field(default=None, description="/props default_generation_settings.n_ctx")
    log: dict[str, Any] | None = Field(default=None, description="the server log's start-up facts (StartupLog.to_json)")
    kv_unified: bool | None = None
    problems: list[str] = Field(default_factory=list,
                                description="mismatches with the candidate: a non-empty list refuses it")
    notes: list[str] = Field(default_factory=list)
    kv_bytes_model: int | None = Field(default=None, description="the KV bytes the model's facts give the candidate; "
                                                         "absent (not null) where they cannot tell")

    @model_serializer(mode="wrap")
    def _absent_when_untold(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out: dict[str, Any] = handler(self)
        if self.kv_bytes_model is None:
            out.pop("kv_bytes_model", None)
        return out


class TuneCandidate(BaseModel):
    """One candidate: its settings and flags, what the search did with it, and what was measured."""

    model_config = _FROZEN

    id: str
    parallel: int
    batch: int
    ubatch: int
    ctx_per_slot: int
    ctx_size: int
    kv_unified: bool
    flags: str = Field(description="the exact server flags (llama-server's, or satbench sim's)")
    state: CandidateState
    status: str | None
    recommended_concurrency: int | None
    binding_constraint: str | None
    throughput_tok_s: float | None
    throughput_ci_tok_s: tuple[float, float] | None
    starved_at: list[int]
    rungs: list[int]
    reason: str | None
    dominated_by: str | None
    folder: str | None
    resumed: bool
    kv_bytes: int | None = None
    memory_need_bytes: int | None = None
    memory: str | None = Field(default=None, description="the memory arithmetic")
    readback: Readback | None = None
    truncated_requests: int | None = Field(default=None, description="requests cut short at the context (measured)")
    window_factor: float = 1.0
    fingerprint: str | None = None
    resume: str | None = Field(default=None, description="why it was walked again on resume, or null")


class TuneGrid(BaseModel):
    model_config = _FROZEN

    parallel: list[int]
    pairs: list[tuple[int, int]] = Field(description="(batch, ubatch) pairs")
    ctx_per_slot: int | None
    size: int
    prune: bool


class Margin(BaseModel):
    """The winner over the runner-up."""

    model_config = _FROZEN

    tok_s: float
    ratio: float | None
    uncertainty_tok_s: float | None = Field(description="at the policy's confidence; null where not told")
    significant: bool | None


class ComparisonModel(BaseModel):
    """One challenge of the answer's walk (``satbench.tune.answer.Comparison``)."""

    model_config = _FROZEN

    challenger: str
    holder: str
    difference_tok_s: float
    half_width_tok_s: float | None
    significant: bool
    gain_per_doubling: float | None
    verdict: Verdict


class DefaultKept(BaseModel):
    """A comparison the evidence budget could not settle, and the default that decided it."""

    model_config = _FROZEN

    kept: str
    over: str
    direction: str
    difference_tok_s: float
    half_width_tok_s: float | None
    why: str


class DecisionModel(BaseModel):
    """How the winner was settled (``satbench.tune.evidence.Decision``)."""

    model_config = _FROZEN

    settled: bool
    rounds: int
    walks: int
    budget: int
    rewalked: list[str]
    defaults: list[DefaultKept]
    said: str
    unjudged: list[str] = Field(default_factory=list)  # "<candidate id>: not judged: <why>", after a second walk


class ContextModel(BaseModel):
    """The context per slot the tune set, and how it was told (``satbench.tune.context.ContextNeed``)."""

    model_config = _FROZEN

    ctx_per_slot: int
    prompt_tokens: int | None
    output_tokens: int
    margin: int
    source: str = Field(description="server | nominal | config")
    detail: str


class MemoryFacts(BaseModel):
    """The model's memory facts (``satbench.tune.memory.ModelMemory``)."""

    model_config = _FROZEN

    source: str = Field(description="gguf | profile")
    kv_bytes_per_token: float | None
    weights_bytes: int | None
    compute_bytes: int
    layers: int | None
    kv_arithmetic: str
    why: str | None = Field(description="why kv_bytes_per_token is null")


class MemoryBudget(BaseModel):
    """The memory a candidate may use (``satbench.tune.memory.Budget``)."""

    model_config = _FROZEN

    total_bytes: int
    source: str
    reserve_bytes: int
    usable_bytes: int


class LaneMemory(BaseModel):
    model_config = _FROZEN

    model: MemoryFacts | None = None
    budget: MemoryBudget | None = None


class ParetoPoint(BaseModel):
    """A feasible candidate's throughput per node and per user, and whether no other beats it on both."""

    model_config = _FROZEN

    candidate: str
    recommended_concurrency: int
    throughput_per_node_tok_s: float
    throughput_per_user_tok_s: float
    pareto_optimal: bool


class TuneLane(BaseModel):
    """One lane's tune: the grid, the winner and its runner-up, how it was decided, and every candidate."""

    model_config = _FROZEN

    runtime: str
    model: str | None = Field(description="the model file, or a simulator lane's profile")
    fingerprint: str = Field(description="sha256 of the lane's model or profile, grid, workload and policy")
    status: Literal["ok", "no_feasible_candidate"]
    reason: str | None
    grid: TuneGrid
    walked: int
    pruned: int
    refused: int
    skipped: int
    resumed: int
    winner: TuneCandidate | None
    flags: str | None
    recommended_concurrency: int | None
    throughput_tok_s: float | None
    runner_up: TuneCandidate | None
    margin: Margin | None
    comparisons: list[ComparisonModel] = Field(default_factory=list)
    decision: DecisionModel | None = None
    context: ContextModel | None = None
    memory: LaneMemory = Field(default_factory=LaneMemory)
    findings: list[str] = Field(default_factory=list, description="requests cut short, candidates walked again")
    candidates: list[TuneCandidate] = Field(description="grid order")
    pareto: list[ParetoPoint]


class MemoryNeed(BaseModel):
    """What a candidate needs against the budget (``satbench.tune.memory.fit``), as the walk recorded it."""

    model_config = _FROZEN

    kv_bytes: int | None
    need_bytes: int | None
    fits: bool | None = None
    arithmetic: str


class WalkFacts(BaseModel):
    """What the walk recorded of a candidate beside its outcome (``Outcome.facts``, ``candidate.json``'s
    facts): its fingerprint, its windows' factor, why it was walked again, its memory need, the read-back and
    the requests cut short. Each is absent from ``candidate.json`` where the walk did not get that far (the
    walk sets a field as it learns it, and ``recorded`` dumps only what was set)."""

    model_config = _FROZEN

    fingerprint: str | None = None
    window_factor: float = 1.0
    resume: str | None = None
    memory: MemoryNeed | None = None
    readback: Readback | None = None
    truncated_requests: int | None = None
    truncated_examples: list[str] = Field(default_factory=list)

    def recorded(self) -> dict[str, Any]:
        """The facts as ``candidate.json`` holds them: what was set, in this order."""
        return self.model_dump(mode="json", exclude_unset=True)


class CandidateRecord(BaseModel):
    """A walked candidate's ``candidate.json``: which it is, the parts of its fingerprint, then the facts the
    walk recorded (``WalkFacts.recorded``, beside these fields: ``extra="allow"`` keeps them, in their order),
    which a resumed tune takes back instead of walking it again (``satbench.tune.walk``)."""

    model_config = ConfigDict(frozen=True, extra="allow")

    candidate: str
    settings: dict[str, int]
    parts: dict[str, str] = Field(default_factory=dict, description="what the fingerprint digests, part by part")

    @classmethod
    def of(cls, candidate: str, settings: dict[str, int], parts: dict[str, str], facts: WalkFacts) -> CandidateRecord:
        return cls(candidate=candidate, settings=settings, parts=parts, **facts.recorded())

    def facts(self) -> WalkFacts:
        """The recorded facts, validated (``ValueError`` where they are not the walk's)."""
        return WalkFacts.model_validate(self.model_extra or {})


class TuneDocument(BaseModel):
    """``tune.json``: per lane (keyed by lane key: its name, or ``<node>/<lane>``), the tune's answer."""

    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True, title=SCHEMA)

    schema_id: Literal["satbench.tune/v1"] = Field(SCHEMA, alias="schema")
    tune_id: str
    generated_at: str
    command: list[str]
    policy: Policy
    lanes: dict[str, TuneLane]
    notes: list[str] = Field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The JSON ``tune.json`` holds: the dump, in declaration order, ``schema`` by its name."""
        return self.model_dump(mode="json", by_alias=True)


def read_tune(source: Path | str | bytes) -> TuneDocument:
    """``tune.json`` (a path, or its text) validated once into ``TuneDocument``; ``ValueError`` in one line
    naming the first field that is wrong (and how many more are)."""
    if isinstance(source, Path):
        try:
            text: str | bytes = source.read_bytes()
        except OSError as exc:
            raise ValueError(f"not a tune document: {source}: {exc.strerror or exc}") from None
    else:
        text = source
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"not a tune document: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError(f"not a tune document: a JSON object is expected, not {type(data).__name__}")
    try:
        return TuneDocument.model_validate(data)
    except ValidationError as exc:
        raise ValueError(f"not a tune document: {first_problem(exc)}") from None
