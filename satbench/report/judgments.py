"""How the recommender judged each rung, as the report shows it: every check and broken limit of the document
as a ``Finding`` (the measured figure, its bound, its unit, the policy setting and the recommender's words),
a rung's ``RungJudgment``, and the evidence of a lane's binding constraint. Where a run has no document, the
judgments are the analysis' own of the steps (``answer.analysis.analyze_lane``). A judgment's figure, unit
and setting are the ones it states (the document's checks and violations carry them, as the walk's own
verdicts do); a document written before they were stated takes them from the walk's own verdicts on the
run's steps, else its limit's first reading in the registry (``answer.checks``); a name the registry does
not know has no unit and reads by its words. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from satbench.answer.analysis import analyze_lane
from satbench.answer.checks import REPORTED, THROUGHPUT_CONSTRAINTS, reading_of
from satbench.answer.judges import Check, Violation
from satbench.answer.models import CheckModel, LaneModel, ViolationModel
from satbench.answer.policy import Policy
from satbench.answer.verdicts import StepVerdict
from satbench.core.figures import StepFigures

__all__ = ["CHECK_NAMES", "Finding", "RungJudgment", "binding_finding", "policy_of", "rung_judgments",
           "verdict_label"]

# the checks the report states per rung (its columns), in the registry's order
CHECK_NAMES: tuple[str, ...] = tuple(REPORTED)


@dataclass(frozen=True, slots=True)
class Finding:
    """One judgment of one rung as the document states it (a check, a broken limit, or the gain per doubling
    the plateau is judged by): the measured figure, its bound and the recommender's words. ``unit`` says how
    ``measured`` and ``limit`` read: ``s`` (seconds), ``ratio`` (x), ``share`` (a fraction), ``gain`` (a
    fraction per doubling), ``index`` (Jain's) or empty; ``figure`` names the figure and ``bound`` the policy
    setting that gave the limit."""

    name: str
    status: str
    measured: float | None = None
    limit: float | None = None
    detail: str = ""
    concurrency: int | None = None
    unit: str = ""
    figure: str = ""
    bound: str = ""
    interval: tuple[float, float] | None = None


@dataclass(frozen=True, slots=True)
class RungJudgment:
    """How the recommender judged one rung: may it count (``usable``, why not), its gain per doubling over
    the previous usable rung (with its interval), every check and every broken limit."""

    usable: bool | None = None
    unusable_reason: str | None = None
    gain_per_doubling: float | None = None
    gain_interval: tuple[float, float] | None = None
    checks: dict[str, Finding] = field(default_factory=dict)
    violations: tuple[Finding, ...] = ()


def policy_of(policy: dict[str, Any] | None) -> Policy:
    try:
        return Policy.model_validate(policy) if policy else Policy()
    except ValueError:
        return Policy()


def verdict_label(checks: dict[str, str] | None) -> str:
    """One rung's judgments in words: what was flagged (``decode starved``, ``unfair``...), what was warned
    (``(prefill interference)``), else ``ok``; ``insufficient data`` or ``unknown`` where nothing was judged."""
    if not checks:
        return "unknown"
    flagged = [REPORTED.get(n, n) for n, st in checks.items() if st == "flagged"]
    warned = [f"({REPORTED.get(n, n)})" for n, st in checks.items() if st == "warn"]
    if flagged or warned:
        return ", ".join(flagged + warned)
    if all(st in ("ok", "not_applicable") for st in checks.values()):
        return "ok"
    return "insufficient data" if "insufficient_data" in checks.values() else "unknown"


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _interval(value: Any) -> tuple[float, float] | None:
    if isinstance(value, list | tuple) and len(value) == 2:
        lo, hi = _number(value[0]), _number(value[1])
        if lo is not None and hi is not None:
            return lo, hi
    return None


_Judged = Check | Violation | CheckModel | ViolationModel


def _stated(name: str, said: _Judged | None = None) -> tuple[str, str, str]:
    """(unit, figure, policy setting) of a judgment of ``name``: as ``said`` states them, else its limit's first
    reading in the registry, else none."""
    if said is not None and said.figure:
        return said.unit or "", said.figure, said.setting or ""
    first = reading_of(name)
    return ("", name, "") if first is None else (first.unit, first.figure, first.setting)


def _finding(name: str, judged: _Judged, concurrency: int, walked: _Judged | None = None) -> Finding:
    """One judgment (a ``Check`` or a ``Violation``, of the document or the walk) with its unit and bound: the
    ones it states, else (a document written before judgments stated them) those of the walk's own judgment
    of the same name at the rung (``walked``)."""
    unit, figure, bound = _stated(name, judged if judged.figure else walked)
    status = judged.status if isinstance(judged, Check | CheckModel) else "flagged"
    return Finding(name=name, status=status or "unknown", measured=_number(judged.measured),
                   limit=_number(judged.limit), detail=judged.detail or "", concurrency=concurrency, unit=unit,
                   figure=figure, bound=bound)


def _walked(verdict: StepVerdict | None, name: str, check: bool) -> _Judged | None:
    if verdict is None:
        return None
    if check:
        return verdict.checks.get(name)
    return next((v for v in verdict.violations if v.constraint == name), None)


def _judgments_of_document(answer: LaneModel | None, walk: Mapping[int, StepVerdict]) -> dict[int, RungJudgment]:
    out: dict[int, RungJudgment] = {}
    for step in answer.steps if answer is not None else []:
        c = step.concurrency
        out[c] = RungJudgment(
            usable=step.usable,
            unusable_reason=step.unusable_reason,
            gain_per_doubling=_number(step.gain_per_doubling),
            gain_interval=_interval(step.gain_interval),
            checks={k: _finding(k, v, c, _walked(walk.get(c), k, True)) for k, v in step.checks.items()},
            violations=tuple(_finding(v.constraint, v, c, _walked(walk.get(c), v.constraint, False))
                             for v in step.violations),
        )
    return out


def _unstated(answer: LaneModel) -> bool:
    """Whether the document was written before its judgments stated their figure, unit and setting."""
    return any(any(v.figure is None for v in s.violations) or any(c.figure is None for c in s.checks.values())
               for s in answer.steps)


def rung_judgments(answer: LaneModel | None, steps: tuple[StepFigures, ...], rules: Policy) -> dict[int, RungJudgment]:
    """Each rung's judgments: the recommendations document's own, else (no document, or one without
    checks) the recommender's verdicts on these figures under the run's policy, so the report and the
    document judge alike. A document written before its judgments stated their readings takes them from
    those verdicts."""
    walk: dict[int, StepVerdict] = {}
    if steps and (answer is None or not any(s.checks for s in answer.steps) or _unstated(answer)):
        lane = analyze_lane(steps[0].lane, steps, rules)  # the walk's own verdicts: baselines and shape as it sees
        walk = {step.concurrency: verdict for step, verdict in zip(lane.steps, lane.verdicts, strict=True)}
    out = _judgments_of_document(answer, walk)
    if any(j.checks for j in out.values()) or not walk:
        return out
    for c, verdict in walk.items():
        doc = out.get(c) or RungJudgment()
        out[c] = RungJudgment(
            usable=verdict.usable if doc.usable is None else doc.usable,
            unusable_reason=verdict.unusable_reason if doc.usable is None else doc.unusable_reason,
            gain_per_doubling=doc.gain_per_doubling,
            gain_interval=doc.gain_interval,
            checks={k: _finding(k, ch, c) for k, ch in verdict.checks.items()},
            violations=doc.violations or tuple(_finding(v.constraint, v, c) for v in verdict.violations),
        )
    return dict(sorted(out.items()))


def binding_finding(answer: LaneModel | None, judgments: dict[int, RungJudgment], rules: Policy) -> Finding | None:
    """The evidence of the lane's binding constraint: for the plateau, the gain per doubling of the first
    usable rung above the answer; for ``ladder_top``, the top rung's own gain (both against the policy's
    ``min_gain_per_doubling``); for a broken limit, the violation of the first rung above the answer (the
    lowest rung where there is no answer) that broke it."""
    name = None if answer is None else answer.binding_constraint
    if answer is None or not name:
        return None
    rec = answer.recommended_concurrency
    rungs = sorted(judgments)
    unit, figure, bound = _stated(name)
    if name in THROUGHPUT_CONSTRAINTS:
        if name == "ladder_top":
            at = [c for c in rungs if c == rec]
        else:
            at = [c for c in rungs if rec is not None and c > rec and judgments[c].gain_per_doubling is not None]
        note = next((n for n in answer.notes if name == "throughput_plateau" and n.startswith("throughput plateau")),
                    "")
        if not at:
            return Finding(name=name, status="flagged", detail=note or answer.reason or "",
                           limit=rules.min_gain_per_doubling, unit=unit, figure=figure, bound=bound)
        j = judgments[at[0]]
        return Finding(name=name, status="flagged" if name == "throughput_plateau" else "open",
                       measured=j.gain_per_doubling, limit=rules.min_gain_per_doubling,
                       detail=note or answer.reason or "", concurrency=at[0], unit=unit, figure=figure,
                       bound=bound, interval=j.gain_interval)
    above = [c for c in rungs if rec is None or c > rec]
    for c in above:
        for v in judgments[c].violations:
            if v.name == name:
                return v
    return Finding(name=name, status="flagged", detail=answer.reason or "", figure=figure, bound=bound)
