"""The run manifest (``runs/<run_id>/manifest.json``): what was run, where, and the step windows.

The step windows are the contract between the load generator (which measures them) and the recommender
(which queries Prometheus over exactly those windows, or reads the records inside them). Everything else in
the manifest is evidence for a reader: command line, config, versions, runtime build, model files, hardware,
network. Unknown top-level keys are kept, so a newer writer never loses data through an older reader.

The manifest is assembled from parts, each returned by the one producer that knows it; nobody edits
another producer's part:

- ``LadderPart`` (the load generator's): the step windows, what the client saw of each lane (``clients``:
  url, API flavour, model, the runtime's ``/props`` and a round trip), the trace each lane replayed
  (``traces``: its file's sha256 and size, window, what was synthesised, the factors) and the dataset its
  users sent (``datasets``: sha256, size, filters, sample), the load generator's /metrics URL and when the
  walk finished (``finished_at``), or why it was cut short (``cut_short``: its records could not be written,
  a full disk). ``loadgen.runner`` returns it and writes ``header.with_ladder(part)`` after every rung, so a
  crash loses at most the rung in flight.
- ``RunManifest`` (the session's header, a ``LadderPart`` with more): run id, command, redacted config,
  versions, hardware, network, Prometheus, the recommender URL and ``lanes``: how each lane's runtime was
  started (kind, command, build, model files), by the session.

One shape for every edge: frozen pydantic models (``StepWindow`` a pydantic dataclass), so the
recommender's ``POST /runs`` validates a body with the same class the writers use (bounds on run ids, lanes,
concurrency, finite times).

A run is complete only when its walk finished: ``finished_at`` set and nothing ``cut_short``. A session killed
mid-walk leaves the manifest of its last finished rung (``finished_at`` null); a disk that fills leaves
``cut_short``. Either is a partial run (``RunManifest.partial``): its rungs are real measurements, but its
ladder stopped where the kill or the disk stopped it, not where saturation did, so its answer may only
stand where no complete run answers (``recommender.store``). When a run was measured is its windows' end
(``measured_until``), never a time a writer or a poster claims beside them.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, FiniteFloat, model_validator
from pydantic.dataclasses import dataclass as pydantic_dataclass

from satbench.core.agent_walk import AgentWalk
from satbench.core.prefill import PrefillWalk

__all__ = [
    "MANIFEST_SCHEMA",
    "RUN_ID_PATTERN",
    "LadderPart",
    "RunManifest",
    "StepWindow",
    "new_run_id",
    "read_manifest",
    "write_json_atomic",
]

MANIFEST_SCHEMA = "satbench.manifest/v1"
RUN_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"


_READING_ORDER = ("schema", "run_id", "created_at", "finished_at", "command", "config", "versions", "lanes",
                  "clients", "hardware", "network", "prometheus", "recommender_url", "loadgen_metrics_url")


def new_run_id(now: float | None = None) -> str:
    """A sortable run id: UTC timestamp plus 4 random hex digits, e.g. ``20261129T101500Z-3f2a``."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
    return f"{stamp}-{secrets.token_hex(2)}"


@pydantic_dataclass(frozen=True, slots=True, config=ConfigDict(extra="forbid"))
class StepWindow:
    """The measured part of one rung (lane, concurrency): ``[start, end]`` in Unix seconds.

    ``warmup_start`` is when the rung's users started, ``drain_end`` when its last request ended. ``valid``
    is false when the step must not be used for an answer; ``reason`` then says why (client could not keep
    up, runtime down, too few requests...). ``notes`` carry non-fatal observations (errors seen, retries).
    ``slots`` is how many requests the runtime serves at once, as it reported (``/props`` ``total_slots``):
    the bound FIFO admission puts on a queued request's wait needs it. An open-loop rung (``core.arrivals``)
    has its ``rate_rps`` and, as ``concurrency``, its in-flight cap (0: none); a closed rung has no rate, and
    ``(lane, concurrency, rate_rps)`` names a rung. A trace rung is an open-loop rung with its ``speed_factor``,
    and ``period_s``, one pass of its scaled window, where its window is whole passes of it (``loadgen.trace_step``).
    A pydantic dataclass: positional like any dataclass, and validated on construction, at every edge.
    """

    lane: Annotated[str, Field(min_length=1, max_length=200)]
    concurrency: Annotated[int, Field(ge=0, le=1_000_000)]
    start: FiniteFloat
    end: FiniteFloat
    warmup_start: FiniteFloat | None = None
    drain_end: FiniteFloat | None = None
    valid: bool = True
    reason: str | None = None
    notes: tuple[str, ...] = ()
    slots: Annotated[int, Field(ge=1)] | None = None  # the runtime's slots (/props total_slots), if it said
    rate_rps: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None  # an open-loop rung's rate
    steady: bool | None = None  # an open-loop rung: its waits settled in the window (core.attainment.warmup_cut)
    # an open-loop rung ended by a look before its window's limit: its attainment interval is stated at the early
    # looks' confidence (core.attainment.step_confidence)
    decided_early: bool | None = None
    # a trace rung (loadgen.trace_step): the speed factor its recorded arrivals were replayed at
    speed_factor: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    # a trace rung: one pass of its scaled window, where its window is whole passes after whole passes of warm-up
    period_s: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    # a closed rung measured again at its lane's end, for the drift check (core.drift): not a rung of the ladder
    drift_reference: bool = False

    @model_validator(mode="after")
    def _closed_rungs_have_users(self) -> StepWindow:
        if self.concurrency == 0 and self.rate_rps is None:
            raise ValueError("concurrency: a closed rung has at least one user (0 is an open-loop rung's "
                             "uncapped in-flight count, with its rate_rps)")
        return self

    @property
    def duration_s(self) -> float:
        return self.end - self.start

    def contains(self, t: float) -> bool:
        return self.start <= t <= self.end

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["notes"] = list(self.notes)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StepWindow:
        return cls(**data)


class LadderPart(BaseModel):
    """The load generator's part of the manifest (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    steps: tuple[StepWindow, ...] = ()
    clients: dict[str, dict[str, Any]] = Field(default_factory=dict)
    loadgen_metrics_url: str | None = None
    finished_at: FiniteFloat | None = None
    cut_short: str | None = None  # why the walk ended before its ladder did (its records could not be written)
    # per lane, the trace it replayed (loadgen.traces.Trace.evidence: file sha256, size, window, what was
    # synthesised) and the speed factors walked
    traces: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # per lane, the conversation dataset its users sent (loadgen.datasets.Dataset.evidence)
    datasets: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # per lane, its peak-prefill walk (core.prefill): long prompts, one output token, rising concurrency; absent
    # where the run walked none
    prefill: dict[str, PrefillWalk] = Field(default_factory=dict)
    # per lane, its agent walk (core.agent_walk): rungs of concurrent agent session trees judged at a tier;
    # absent where the run walked none
    agents: dict[str, AgentWalk] = Field(default_factory=dict)

    def with_agents(self, name: str, walk: AgentWalk) -> LadderPart:
        return self.model_copy(update={"agents": {**self.agents, name: walk}})

    def with_prefill(self, name: str, walk: PrefillWalk) -> LadderPart:
        return self.model_copy(update={"prefill": {**self.prefill, name: walk}})

    def with_dataset(self, name: str, evidence: dict[str, Any]) -> LadderPart:
        return self.model_copy(update={"datasets": {**self.datasets, name: evidence}})

    def with_trace(self, name: str, evidence: dict[str, Any]) -> LadderPart:
        return self.model_copy(update={"traces": {**self.traces, name: evidence}})

    def with_lane(self, name: str, evidence: dict[str, Any]) -> LadderPart:
        return self.model_copy(update={"clients": {**self.clients, name: evidence}})

    def with_step(self, window: StepWindow) -> LadderPart:
        return self.model_copy(update={"steps": (*self.steps, window)})


class RunManifest(LadderPart):
    """The manifest of one run: the session's header and the load generator's ``LadderPart``."""

    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True)

    schema_id: Literal["satbench.manifest/v1"] = Field(default="satbench.manifest/v1", alias="schema")
    run_id: str = Field(pattern=RUN_ID_PATTERN)
    created_at: FiniteFloat = 0.0
    command: tuple[str, ...] = ()
    config: dict[str, Any] = Field(default_factory=dict)
    versions: dict[str, Any] = Field(default_factory=dict)
    lanes: dict[str, dict[str, Any]] = Field(default_factory=dict)
    hardware: dict[str, Any] = Field(default_factory=dict)
    network: dict[str, Any] = Field(default_factory=dict)
    prometheus: dict[str, Any] = Field(default_factory=dict)
    recommender_url: str | None = None

    def with_ladder(self, part: LadderPart) -> RunManifest:
        """This header with the load generator's part in place of whatever part it had."""
        return self.model_copy(update={name: getattr(part, name) for name in LadderPart.model_fields})

    def windows(self, lane: str | None = None) -> list[StepWindow]:
        return [s for s in self.steps if lane is None or s.lane == lane]

    @property
    def partial(self) -> str | None:
        """Why this run is not complete (module docstring), or None when its walk finished."""
        if self.cut_short is not None:
            return f"its walk was cut short: {self.cut_short}"
        if self.finished_at is None:
            return "it did not finish (finished_at null: the session was killed or crashed mid-walk)"
        return None

    def measured_until(self, lane: str | None = None) -> float:
        """When ``lane`` (any lane by default) was last measured: its windows' latest end (drained), else when
        the walk finished, else when the run was created."""
        ends = [w.drain_end if w.drain_end is not None else w.end for w in self.windows(lane)]
        if ends:
            return max(ends)
        return self.finished_at if self.finished_at is not None else self.created_at

    def lane_names(self) -> list[str]:
        names = [*self.lanes, *(n for n in self.clients if n not in self.lanes)]
        for step in self.steps:
            if step.lane not in names:
                names.append(step.lane)
        return names

    def to_dict(self) -> dict[str, Any]:
        data = self.model_dump(mode="json", by_alias=True)
        for walked in ("prefill", "agents"):  # said only where a lane walked it, so a run without reads as before
            if not data.get(walked):
                data.pop(walked, None)
        first = {k: data.pop(k) for k in _READING_ORDER if k in data}
        return {**first, **data}

    @classmethod
    def from_dict(cls, data: Any) -> RunManifest:
        """Validates a manifest document; ``ValueError`` (pydantic's is one) names what is wrong."""
        if not isinstance(data, dict) or "run_id" not in data:
            raise ValueError("manifest must be a JSON object with a run_id")
        schema = data.get("schema", MANIFEST_SCHEMA)
        if schema != MANIFEST_SCHEMA:
            raise ValueError(f"unsupported manifest schema {schema!r} (expected {MANIFEST_SCHEMA})")
        return cls.model_validate(data)

    def write(self, path: Path) -> None:
        write_json_atomic(path, self.to_dict())


def read_manifest(path: Path | str) -> RunManifest:
    with Path(path).open(encoding="utf-8") as fh:
        return RunManifest.from_dict(json.load(fh))


def write_json_atomic(path: Path, data: Any) -> None:
    """Writes JSON through a temporary file and a rename, so readers never see a half-written file; a write
    that fails (a full disk) leaves the file as it was and no temporary file behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2, sort_keys=False, default=str)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
