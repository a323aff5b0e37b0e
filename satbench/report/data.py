"""Reads a run folder's raw files into one frozen ``RunReport`` that the HTML, Markdown, terminal and CSV
writers render, and flattens it (and ``records.jsonl``) into the rows of the CSV exports.

One source for the numbers: ``recommendations.json``, the document the answer was computed from, so the
report can never contradict the answer. Its steps carry the client figures (exact: the load generator
publishes them), what only the server side knows (occupancy, queue depth, memory) and how each rung was
judged (``checks``, ``violations``, ``usable``, the gain per doubling), which ``LaneReport.judgments`` keeps
with the measured figure, the bound and the recommender's words; ``LaneReport.binding`` is the evidence of
the lane's binding constraint (the rung that showed it, its figure and the policy's bound). ``steps.json``
(the client figures the load generator computed from the records) fills what the document lacks (a run with
no answer, a rung the recommender did not see), and ``records.jsonl`` stands in for ``steps.json`` when that
is missing. Where the document and the records differ beyond the agreement bound
(``core.figures.disagreements``), the report says so and which it shows. Nothing is invented: an unknown
stays None. The policy is the document's, else the manifest's configured one (the recommender's defaults
filled in), so the report states the limits the verdicts used.

``steps.json`` may be a list of step objects, ``{"steps": [...]}`` or ``{"lanes": {lane: [...]}}``; each
step carries a ``lane`` (or takes it from the ``lanes`` key). Reading is pure apart from opening the files.

How each rung was judged is ``satbench.report.judgments``; the CSV rows built from a ``RunReport`` are
``satbench.report.exports``.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from satbench.answer.agent_analysis import AgentsModel
from satbench.answer.document import read_document
from satbench.answer.energy import EnergyModel
from satbench.answer.models import (
    LaneModel,
    PrefillModel,
    RateModel,
    RecommendationsDocument,
    StepModel,
    TraceModel,
)
from satbench.answer.policy import Policy
from satbench.core.figures import StepFigures, Tail, disagreements
from satbench.core.lane_evidence import ConfiguredRun
from satbench.core.manifest import RunManifest, StepWindow
from satbench.core.records import read_records_file
from satbench.core.step_figures import compute_step_figures
from satbench.report.judgments import (
    Finding,
    RungJudgment,
    binding_finding,
    policy_of,
    rung_judgments,
)

__all__ = ["LaneReport", "RunReport", "load_run", "merge_steps", "parse_steps_document"]

@dataclass(frozen=True, slots=True)
class LaneReport:
    lane: str
    steps: tuple[StepFigures, ...]
    status: str = "unknown"
    recommended: int | None = None
    saturation: int | None = None
    binding_constraint: str | None = None
    reason: str | None = None
    throughput_at_recommended: float | None = None
    details: dict[str, Any] = field(default_factory=dict)
    checks: dict[int, dict[str, str]] = field(default_factory=dict)  # rung -> check -> status
    judgments: dict[int, RungJudgment] = field(default_factory=dict)  # rung -> how it was judged
    binding: Finding | None = None  # the evidence of ``binding_constraint``
    knee: int | None = None
    slots: int | None = None  # the runtime's slots (/props total_slots), where it said
    notes: tuple[str, ...] = ()
    rate_steps: tuple[StepFigures, ...] = ()  # the open-loop rungs, by rate (satbench.report.rates)
    rate: RateModel | None = None  # the document's rate answer
    trace_steps: tuple[StepFigures, ...] = ()  # the trace rungs, by rate (satbench.report.traces)
    trace_factors: dict[float, float] = field(default_factory=dict)  # a trace rung's rate (6 places) -> factor
    trace: TraceModel | None = None  # the document's trace answer
    prefill: PrefillModel | None = None  # the document's peak prefill answer (satbench.report.prefill)
    agents: AgentsModel | None = None  # the document's agent answer (satbench.report.agents)
    energy: EnergyModel | None = None  # the document's energy and cost at the concurrency answer


@dataclass(frozen=True, slots=True)
class RunReport:
    run_id: str
    manifest: RunManifest
    lanes: tuple[LaneReport, ...]
    policy: dict[str, Any]
    recommendations: RecommendationsDocument | None
    records_count: int | None
    problems: tuple[str, ...] = ()
    policy_source: str = "recommendations.json"

    @property
    def rules(self) -> Policy:
        """The policy as the recommender reads it (its defaults where the run's policy is silent)."""
        return policy_of(self.policy)

    @property
    def pause_objective_s(self) -> float | None:
        """The policy's time-between-tokens objective (``slo.tbt_p99_s``) the pauses are judged against."""
        value = self.rules.slo.tbt_p99_s
        return None if value is None else float(value)


def parse_steps_document(doc: Any) -> list[StepFigures]:
    """Step figures from any of the accepted ``steps.json`` shapes (see the module docstring)."""
    items: list[dict[str, Any]] = []
    if isinstance(doc, dict) and isinstance(doc.get("lanes"), dict):
        for lane, steps in doc["lanes"].items():
            if isinstance(steps, dict):
                steps = steps.get("steps") or []
            items.extend({"lane": lane, **s} for s in steps if isinstance(s, dict))
    elif isinstance(doc, dict) and isinstance(doc.get("steps"), list):
        items = [s for s in doc["steps"] if isinstance(s, dict)]
    elif isinstance(doc, list):
        items = [s for s in doc if isinstance(s, dict)]
    else:
        raise ValueError("steps.json must be a list of steps, {'steps': [...]} or {'lanes': {...}}")
    out = []
    for item in items:
        nested = item.get("figures")
        figures: dict[str, Any] = nested if isinstance(nested, dict) else item
        merged = {"lane": item.get("lane", ""), **figures}
        out.append(StepFigures.from_dict(merged))
    return out


def merge_steps(primary: StepFigures | None, secondary: StepFigures | None) -> StepFigures:
    """``primary``'s figures, with every None field (and empty quantiles) filled from ``secondary``."""
    if primary is None or secondary is None:
        chosen = primary or secondary
        if chosen is None:
            raise ValueError("merge_steps needs at least one step")
        return chosen
    updates: dict[str, Any] = {}
    for f in dataclasses.fields(StepFigures):
        mine, theirs = getattr(primary, f.name), getattr(secondary, f.name)
        if mine is None and theirs is not None:
            updates[f.name] = theirs
        elif isinstance(mine, Tail) and isinstance(theirs, Tail) and not mine.n and theirs.n:
            updates[f.name] = theirs  # an empty tail is an unknown one
        elif dataclasses.is_dataclass(mine) and dataclasses.is_dataclass(theirs):
            sub = {
                g.name: getattr(theirs, g.name)
                for g in dataclasses.fields(mine)
                if getattr(mine, g.name) is None and getattr(theirs, g.name) is not None
            }
            if sub:
                updates[f.name] = dataclasses.replace(mine, **sub)  # type: ignore[type-var]
    return dataclasses.replace(primary, **updates) if updates else primary


def _figures(step: StepModel, lane: str) -> StepFigures:
    """A document's rung as the figures the report merges (the step's ``StepFigures`` part, its lane named)."""
    return StepFigures(**{**{f.name: getattr(step, f.name) for f in dataclasses.fields(StepFigures)}, "lane": lane})


def _apply_window(step: StepFigures, window: StepWindow | None) -> StepFigures:
    """A step whose manifest window is invalid is invalid too, with the window's reason."""
    if window is None or window.valid or not step.valid:
        return step
    return dataclasses.replace(step, valid=False, reason=step.reason or window.reason)


def _read_json(path: Path, problems: list[str]) -> Any:
    if not path.exists():
        problems.append(f"{path.name} is missing")
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        problems.append(f"{path.name} is unreadable: {exc}")
        return None


def _steps_from_records(run_dir: Path, manifest: RunManifest, problems: list[str]) -> list[StepFigures]:
    read = read_records_file(run_dir / "records.jsonl")
    problems.append("steps.json is missing: figures recomputed from records.jsonl")
    if (said := read.said()) is not None:
        problems.append(f"{said}: cut at its last whole line")
    return [compute_step_figures(read.records, window) for window in manifest.steps]


def _count_lines(path: Path) -> int | None:
    if not path.exists():
        return None
    with path.open(encoding="utf-8") as fh:
        return sum(1 for line in fh if line.strip())


def _slots(manifest: RunManifest, lane: str) -> int | None:
    """The lane's slots: the runtime's ``/props`` ``total_slots`` in the manifest, else its step windows'."""
    info = manifest.lanes.get(lane)
    props = info.get("runtime_props") if isinstance(info, dict) else None
    total = props.get("total_slots") if isinstance(props, dict) else None
    if isinstance(total, int) and not isinstance(total, bool) and total > 0:
        return total
    seen = [w.slots for w in manifest.windows(lane) if w.slots is not None]
    return max(seen) if seen else None


def _read_document(path: Path, problems: list[str]) -> RecommendationsDocument | None:
    """The run's recommendations document, validated once (``answer.document.read_document``); a
    missing or unreadable one is a problem the report states, and the report goes on without it."""
    raw = _read_json(path, problems)
    if raw is None:
        return None
    try:
        return read_document(raw)
    except ValueError as exc:
        problems.append(f"{path.name} is unreadable: {exc}")
        return None


def _runpolicy_of(recs: RecommendationsDocument | None, manifest: RunManifest) -> tuple[dict[str, Any], str]:
    """The policy the verdicts used: the document's, else the session's configured one with the
    recommender's defaults, else the defaults."""
    if recs is not None:
        return recs.policy.model_dump(mode="json"), "recommendations.json"
    configured = ConfiguredRun.of(manifest).policy
    if configured is not None:
        try:
            return Policy.model_validate(configured).model_dump(mode="json"), "the manifest's config"
        except ValueError:
            pass
    return Policy().model_dump(mode="json"), "the recommender's defaults"


def load_run(run_dir: Path) -> RunReport:
    """Reads ``run_dir``; raises ValueError only when ``manifest.json`` itself is missing or invalid."""
    problems: list[str] = []
    manifest_doc = _read_json(run_dir / "manifest.json", problems)
    if manifest_doc is None:
        raise ValueError(f"{run_dir} is not a run folder: {'; '.join(problems)}")
    manifest = RunManifest.from_dict(manifest_doc)
    if manifest.partial is not None:  # a killed or cut-short walk: its top rung is where it stopped
        problems.append(f"partial run: {manifest.partial}")
    client_steps: list[StepFigures] = []
    steps_doc = _read_json(run_dir / "steps.json", problems)
    if steps_doc is not None:
        try:
            client_steps = parse_steps_document(steps_doc)
        except (ValueError, KeyError, TypeError) as exc:
            problems.append(f"steps.json has an unexpected shape: {exc}")
    elif (run_dir / "records.jsonl").exists():
        client_steps = _steps_from_records(run_dir, manifest, problems)
    recs = _read_document(run_dir / "recommendations.json", problems)
    rec_lanes: dict[str, LaneModel] = dict(recs.lanes) if recs is not None else {}
    policy, policy_source = _runpolicy_of(recs, manifest)
    rules = policy_of(policy)
    lane_names = manifest.lane_names()
    for name in [*(s.lane for s in client_steps), *rec_lanes]:
        if name and name not in lane_names:
            lane_names.append(name)
    lanes = []
    for name in lane_names:
        answer = rec_lanes.get(name)
        server_steps = {step.concurrency: _figures(step, name) for step in (answer.steps if answer else [])}
        mine = {s.concurrency: s for s in client_steps  # a rung's re-measure (core.drift) is no rung of its own
                if s.lane == name and s.rate_rps is None and not s.drift_reference}
        factors = {(w.concurrency, w.rate_rps): w.speed_factor for w in manifest.windows(name) if w.speed_factor}
        opened = sorted((s for s in client_steps if s.lane == name and s.rate_rps is not None),
                        key=lambda s: s.rate_rps or 0.0)
        rate_steps = tuple(s for s in opened if (s.concurrency, s.rate_rps) not in factors)
        trace_steps = tuple(s for s in opened if (s.concurrency, s.rate_rps) in factors)
        trace_factors = {round(r or 0.0, 6): f for (_, r), f in factors.items() if f is not None}
        windows = {w.concurrency: w for w in manifest.windows(name) if w.rate_rps is None and not w.drift_reference}
        for c in sorted(set(mine) & set(server_steps)):
            differ = disagreements(server_steps[c], mine[c])
            if differ:
                problems.append(
                    f"lane {name} c={c}: the recommendations' figures differ from the records' beyond the "
                    f"agreement bound ({', '.join(differ)}); this report shows the recommendations' figures"
                )
        merged = tuple(
            _apply_window(merge_steps(server_steps.get(c), mine.get(c)), windows.get(c))
            for c in sorted(set(mine) | set(server_steps))
        )
        judgments = rung_judgments(answer, merged, rules)
        if answer is None:
            lanes.append(LaneReport(
                lane=name, steps=merged, status="unknown" if recs is None else "missing",
                checks={c: {k: f.status for k, f in j.checks.items()} for c, j in judgments.items()},
                judgments=judgments, slots=_slots(manifest, name), rate_steps=rate_steps,
                trace_steps=trace_steps, trace_factors=trace_factors))
            continue
        lanes.append(
            LaneReport(
                lane=name,
                steps=merged,
                status=answer.status,
                recommended=answer.recommended_concurrency,
                saturation=answer.saturation_concurrency,
                binding_constraint=answer.binding_constraint,
                reason=answer.reason,
                throughput_at_recommended=answer.throughput_at_recommended_tok_s,
                details={"fairness": answer.fairness.model_dump(mode="json", exclude_unset=True),
                         "starvation": answer.starvation.model_dump(mode="json", exclude_unset=True)},
                checks={c: {k: f.status for k, f in j.checks.items()} for c, j in judgments.items()},
                judgments=judgments,
                binding=binding_finding(answer, judgments, rules),
                knee=None if answer.knee is None else answer.knee.concurrency,
                slots=_slots(manifest, name),
                notes=tuple(answer.notes),
                rate_steps=rate_steps,
                rate=answer.rate,
                trace=answer.trace,
                prefill=answer.prefill,
                agents=answer.agents,
                energy=answer.energy,
                trace_steps=trace_steps,
                trace_factors=trace_factors,
            )
        )
    return RunReport(
        run_id=manifest.run_id,
        manifest=manifest,
        lanes=tuple(lanes),
        policy=policy,
        recommendations=recs,
        records_count=_count_lines(run_dir / "records.jsonl"),
        problems=tuple(problems),
        policy_source=policy_source,
    )
