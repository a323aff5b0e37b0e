"""Reads a run folder's raw files into one frozen ``RunReport`` that the HTML and Markdown writers render.

One source for the numbers: ``recommendations.json``, the document the answer was computed from, so the
report can never contradict the answer. Its steps carry the client figures (exact: the load generator
publishes them) and what only the server side knows (occupancy, queue depth, memory). ``steps.json`` (the
client figures the load generator computed from the records) fills what the document lacks (a run with no
answer, a rung the recommender did not see), and ``records.jsonl`` stands in for ``steps.json`` when that is
missing. Where the document and the records differ beyond the agreement bound
(``core.figures.disagreements``), the report says so and which it shows. Nothing is invented: an unknown
stays None.

``steps.json`` may be a list of step objects, ``{"steps": [...]}`` or ``{"lanes": {lane: [...]}}``; each
step carries a ``lane`` (or takes it from the ``lanes`` key). Reading is pure apart from opening the files.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.figures import StepFigures, disagreements
from core.manifest import RunManifest, StepWindow
from core.records import read_records
from core.step_figures import compute_step_figures
from recommender.policy import Policy
from recommender.verdicts import check_step

__all__ = ["LaneReport", "RunReport", "load_run", "merge_steps", "parse_steps_document", "verdict_label"]

_LABELS = {"decode_starvation": "decode starved", "prefill_starvation": "prefill starved", "fairness": "unfair",
           "interference": "prefill interference"}


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


@dataclass(frozen=True, slots=True)
class RunReport:
    run_id: str
    manifest: RunManifest
    lanes: tuple[LaneReport, ...]
    policy: dict[str, Any]
    recommendations: dict[str, Any] | None
    records_count: int | None
    problems: tuple[str, ...] = ()

    @property
    def pause_objective_s(self) -> float | None:
        """The policy's time-between-tokens objective (``slo.tbt_p99_s``) the pauses are judged against."""
        slo = self.policy.get("slo") if self.policy else None
        value = slo.get("tbt_p99_s") if isinstance(slo, dict) else Policy().slo.tbt_p99_s
        return float(value) if isinstance(value, int | float) else None


def verdict_label(checks: dict[str, str] | None) -> str:
    """One rung's judgments in words: what was flagged (``decode starved``, ``unfair``...), what was warned
    (``(prefill interference)``), else ``ok``; ``insufficient data`` or ``unknown`` where nothing was judged."""
    if not checks:
        return "unknown"
    flagged = [_LABELS.get(n, n) for n, st in checks.items() if st == "flagged"]
    warned = [f"({_LABELS.get(n, n)})" for n, st in checks.items() if st == "warn"]
    if flagged or warned:
        return ", ".join(flagged + warned)
    if all(st in ("ok", "not_applicable") for st in checks.values()):
        return "ok"
    return "insufficient data" if "insufficient_data" in checks.values() else "unknown"


def _checks(answer: dict[str, Any], steps: tuple[StepFigures, ...],
            policy: dict[str, Any]) -> dict[int, dict[str, str]]:
    """Each rung's check statuses: the recommendations document's own, else (no document) the recommender's
    verdicts on these figures under the run's policy, so the report and the document judge alike."""
    out: dict[int, dict[str, str]] = {}
    for raw in answer.get("steps") or []:
        if isinstance(raw, dict) and isinstance(raw.get("checks"), dict):
            out[int(raw["concurrency"])] = {k: str(v.get("status")) for k, v in raw["checks"].items()
                                            if isinstance(v, dict)}
    if out or not steps:
        return out
    try:
        rules = Policy.model_validate(policy) if policy else Policy()
    except ValueError:
        rules = Policy()
    baseline = next((s.itl_s.p50 for s in steps if s.concurrency == 1 and s.valid), None)
    for step in steps:
        verdict = check_step(step, rules, baseline)
        out[step.concurrency] = {k: c.status for k, c in verdict.checks.items()}
    return out


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
        elif dataclasses.is_dataclass(mine) and dataclasses.is_dataclass(theirs):
            sub = {
                g.name: getattr(theirs, g.name)
                for g in dataclasses.fields(mine)
                if getattr(mine, g.name) is None and getattr(theirs, g.name) is not None
            }
            if sub:
                updates[f.name] = dataclasses.replace(mine, **sub)  # type: ignore[type-var]
    return dataclasses.replace(primary, **updates) if updates else primary


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
    records = list(read_records(run_dir / "records.jsonl"))
    problems.append("steps.json is missing: figures recomputed from records.jsonl")
    return [compute_step_figures(records, window) for window in manifest.steps]


def _count_lines(path: Path) -> int | None:
    if not path.exists():
        return None
    with path.open(encoding="utf-8") as fh:
        return sum(1 for line in fh if line.strip())


def load_run(run_dir: Path) -> RunReport:
    """Reads ``run_dir``; raises ValueError only when ``manifest.json`` itself is missing or invalid."""
    problems: list[str] = []
    manifest_doc = _read_json(run_dir / "manifest.json", problems)
    if manifest_doc is None:
        raise ValueError(f"{run_dir} is not a run folder: {'; '.join(problems)}")
    manifest = RunManifest.from_dict(manifest_doc)
    client_steps: list[StepFigures] = []
    steps_doc = _read_json(run_dir / "steps.json", problems)
    if steps_doc is not None:
        try:
            client_steps = parse_steps_document(steps_doc)
        except (ValueError, KeyError, TypeError) as exc:
            problems.append(f"steps.json has an unexpected shape: {exc}")
    elif (run_dir / "records.jsonl").exists():
        client_steps = _steps_from_records(run_dir, manifest, problems)
    recs = _read_json(run_dir / "recommendations.json", problems)
    recs = recs if isinstance(recs, dict) else None
    rec_lanes: dict[str, Any] = dict(recs.get("lanes") or {}) if recs else {}
    lane_names = manifest.lane_names()
    for name in [*(s.lane for s in client_steps), *rec_lanes]:
        if name and name not in lane_names:
            lane_names.append(name)
    lanes = []
    for name in lane_names:
        answer = rec_lanes.get(name) or {}
        server_steps: dict[int, StepFigures] = {}
        for raw in answer.get("steps") or []:
            try:
                fig = StepFigures.from_dict({"lane": name, **raw})
            except (KeyError, TypeError, ValueError):
                continue
            server_steps[fig.concurrency] = fig
        mine = {s.concurrency: s for s in client_steps if s.lane == name}
        windows = {w.concurrency: w for w in manifest.windows(name)}
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
        policy = dict((recs or {}).get("policy") or {})
        lanes.append(
            LaneReport(
                lane=name,
                steps=merged,
                status=str(answer.get("status", "unknown" if recs is None else "missing")),
                recommended=answer.get("recommended_concurrency"),
                saturation=answer.get("saturation_concurrency"),
                binding_constraint=answer.get("binding_constraint"),
                reason=answer.get("reason"),
                throughput_at_recommended=answer.get("throughput_at_recommended_tok_s"),
                details={k: answer[k] for k in ("fairness", "starvation") if k in answer},
                checks=_checks(answer, merged, policy),
            )
        )
    return RunReport(
        run_id=manifest.run_id,
        manifest=manifest,
        lanes=tuple(lanes),
        policy=dict((recs or {}).get("policy") or {}),
        recommendations=recs,
        records_count=_count_lines(run_dir / "records.jsonl"),
        problems=tuple(problems),
    )
