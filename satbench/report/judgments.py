"""How the recommender judged each rung, as the report shows it: every check and broken limit of the document
as a ``Finding`` (the measured figure, its bound, its unit, the policy setting and the recommender's words),
a rung's ``RungJudgment``, and the evidence of a lane's binding constraint. Where a run has no document, the
judgments are the analysis' own of the steps (``answer.analysis.analyze_lane``). Pure."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from satbench.answer.analysis import analyze_lane
from satbench.answer.models import LaneModel
from satbench.answer.policy import Policy
from satbench.core.figures import StepFigures

__all__ = ["CHECK_NAMES", "Finding", "RungJudgment", "binding_finding", "policy_of", "rung_judgments",
           "verdict_label"]

_LABELS = {"decode_starvation": "decode starved", "prefill_starvation": "prefill starved", "fairness": "unfair",
           "interference": "prefill interference"}
CHECK_NAMES = ("decode_starvation", "prefill_starvation", "fairness", "interference")


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
    flagged = [_LABELS.get(n, n) for n, st in checks.items() if st == "flagged"]
    warned = [f"({_LABELS.get(n, n)})" for n, st in checks.items() if st == "warn"]
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


# what a judgment of each kind measures: (unit, figure, policy setting), told apart by the recommender's
# words where one judgment has several sources; an unrecognised one has no unit and reads by its words
_CONSTRAINT_UNITS = {
    "throughput_plateau": ("gain", "gain per doubling", "policy.min_gain_per_doubling"),
    "ladder_top": ("gain", "gain per doubling", "policy.min_gain_per_doubling"),
    "slo_ttft": ("s", "TTFT p95", "policy.slo.ttft_p95_s"),
    "slo_itl": ("s", "ITL p95", "policy.slo.itl_p95_s"),
    "slo_e2e": ("s", "e2e p95", "policy.slo.e2e_p95_s"),
    "errors": ("share", "error ratio", "policy.max_error_ratio"),
}
_WORDS = (  # (judgment, words in its detail, unit, figure, policy setting)
    ("decode_starvation", "stall limit", "s", "pause excess p99 (held beyond the decode step by a prefill)",
     "the stall limit: policy.slo.tbt_p99_s, or (policy.max_pause_ratio - 1) decode steps, at least "
     "policy.min_pause_excess_s"),
    ("decode_starvation", "max_interference_share", "share", "decode time lost to prefills",
     "policy.max_interference_share"),
    ("decode_starvation", "objective", "s", "pause p99", "policy.slo.tbt_p99_s"),
    ("interference", "max_interference_share", "share", "decode time lost to prefills",
     "policy.max_interference_share"),
    ("interference", "of decode time lost", "share", "decode time lost to prefills", "policy.interference_warn_share"),
    ("prefill_starvation", "prefill_wait_max_s", "s", "longest wait for a first token", "policy.prefill_wait_max_s"),
    ("prefill_starvation", "FIFO bound", "ratio", "worst wait over its FIFO admission bound",
     "policy.max_admission_wait_ratio"),
    ("fairness", "served nothing", "count", "users served nothing while passed over", "none"),
    ("memory", "KV cache", "share", "KV cache usage", "policy.kv_usage_max_ratio"),
    ("memory", "free GPU memory", "share", "least free share of a GPU", "policy.memory_headroom_min_ratio"),
    ("fairness", "Jain's index", "index", "Jain's index", "policy.jain_min"),
    ("fairness", "max/min user share", "ratio", "max/min user share", "policy.max_min_share_max"),
    ("fairness", "queue wait p99", "s", "queue wait p99", "policy.queue_p99_max_s"),
    ("fairness", "x the ", "ratio", "worst user's wait or slowest user's pace ratio",
     "policy.max_user_wait_ratio, max_user_itl_ratio"),
)


def _violation_unit(name: str, detail: str) -> tuple[str, str, str]:
    if name == "slo_ttft" and "own TTFT deadline" in detail:  # deadlines that grow with the prompt
        return ("share", "share of requests past their own TTFT deadline",
                "policy.slo.ttft_p95_s plus ttft_per_1k_prompt_s per 1,000 prompt tokens (a p95: 5 %)")
    if name in _CONSTRAINT_UNITS:
        return _CONSTRAINT_UNITS[name]
    for judged, words, unit, figure, bound in _WORDS:
        if judged == name and (words in detail if name != "fairness" or words != "Jain's index"
                               else detail.startswith(words)):
            return unit, figure, bound
    return "", name, ""


def _finding(name: str, status: str, measured: float | None, limit: float | None, detail: str,
             concurrency: int) -> Finding:
    """One judgment (a ``Check`` or a ``Violation``, of the document or the walk) with its unit and bound."""
    unit, figure, bound = _violation_unit(name, detail or "")
    return Finding(name=name, status=status or "unknown", measured=_number(measured), limit=_number(limit),
                   detail=detail or "", concurrency=concurrency, unit=unit, figure=figure, bound=bound)


def _judgments_of_document(answer: LaneModel | None) -> dict[int, RungJudgment]:
    out: dict[int, RungJudgment] = {}
    for step in answer.steps if answer is not None else []:
        c = step.concurrency
        out[c] = RungJudgment(
            usable=step.usable,
            unusable_reason=step.unusable_reason,
            gain_per_doubling=_number(step.gain_per_doubling),
            gain_interval=_interval(step.gain_interval),
            checks={k: _finding(k, v.status, v.measured, v.limit, v.detail, c) for k, v in step.checks.items()},
            violations=tuple(_finding(v.constraint, "flagged", v.measured, v.limit, v.detail, c)
                             for v in step.violations),
        )
    return out


def rung_judgments(answer: LaneModel | None, steps: tuple[StepFigures, ...], rules: Policy) -> dict[int, RungJudgment]:
    """Each rung's judgments: the recommendations document's own, else (no document, or one without
    checks) the recommender's verdicts on these figures under the run's policy, so the report and the
    document judge alike."""
    out = _judgments_of_document(answer)
    if any(j.checks for j in out.values()) or not steps:
        return out
    lane = analyze_lane(steps[0].lane, steps, rules)  # the walk's own verdicts: baselines and shape as it sees them
    for step, verdict in zip(lane.steps, lane.verdicts, strict=True):
        c = step.concurrency
        doc = out.get(c) or RungJudgment()
        out[c] = RungJudgment(
            usable=verdict.usable if doc.usable is None else doc.usable,
            unusable_reason=verdict.unusable_reason if doc.usable is None else doc.unusable_reason,
            gain_per_doubling=doc.gain_per_doubling,
            gain_interval=doc.gain_interval,
            checks={k: _finding(k, ch.status, ch.measured, ch.limit, ch.detail, c) for k, ch in verdict.checks.items()},
            violations=doc.violations or tuple(
                _finding(v.constraint, "flagged", v.measured, v.limit, v.detail, c) for v in verdict.violations),
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
    gain_bound = "policy.min_gain_per_doubling"
    if name in ("throughput_plateau", "ladder_top"):
        if name == "ladder_top":
            at = [c for c in rungs if c == rec]
        else:
            at = [c for c in rungs if rec is not None and c > rec and judgments[c].gain_per_doubling is not None]
        note = next((n for n in answer.notes if name == "throughput_plateau" and n.startswith("throughput plateau")),
                    "")
        if not at:
            return Finding(name=name, status="flagged", detail=note or answer.reason or "",
                           limit=rules.min_gain_per_doubling, unit="gain", figure="gain per doubling",
                           bound=gain_bound)
        j = judgments[at[0]]
        return Finding(name=name, status="flagged" if name == "throughput_plateau" else "open",
                       measured=j.gain_per_doubling, limit=rules.min_gain_per_doubling,
                       detail=note or answer.reason or "", concurrency=at[0], unit="gain",
                       figure="gain per doubling", bound=gain_bound, interval=j.gain_interval)
    above = [c for c in rungs if rec is None or c > rec]
    for c in above:
        for v in judgments[c].violations:
            if v.name == name:
                return v
    _, figure, bound = _CONSTRAINT_UNITS.get(name, ("", name, ""))
    return Finding(name=name, status="flagged", detail=answer.reason or "", figure=figure, bound=bound)
