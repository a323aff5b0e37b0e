"""From the per-step figures of one lane to its answer: recommended and saturation concurrency, and why.

The walk: rungs are taken in increasing concurrency. The lowest rung must be usable and break no limit;
it is the first candidate. Each next rung is accepted while

1. it is usable (valid window, enough requests, stable throughput), else the answer stops below it: bound
   by the first limit the rung breaks if it breaks one (a stall that happened needs no stable throughput
   to count), else the lane is ``degraded`` with the reason;
2. its throughput gain per doubling over the last accepted rung reaches ``min_gain_per_doubling``, else
   ``throughput_plateau`` binds;
3. where both rungs have confidence intervals, their difference is significant
   (``confidence.indistinguishable``): two rungs that cannot be told apart bind as ``throughput_plateau``
   and the smaller one is preferred (the lane's ``indistinguishable`` says so);
4. it breaks no policy limit, else the first broken limit (in ``VIOLATION_ORDER``) binds.

If every rung is accepted, ``ladder_top`` binds: the ladder ended before saturation. ``recommended`` is the
last accepted rung. ``saturation_concurrency`` is where throughput alone stops paying (``saturation_rung``
on the monotone fit) and ``knee`` is the Kneedle knee; both ignore latency, so they can exceed the
recommendation. Not enough data is a result: ``insufficient_data`` with a reason, never an exception.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from core.figures import StepFigures
from core.statistics import gain_per_doubling, indistinguishable
from recommender.curve import CurvePoint, Knee, kneedle, saturation_rung
from recommender.policy import Policy
from recommender.verdicts import StepVerdict, check_step

__all__ = ["LaneAnalysis", "analyze_lane"]


@dataclass(frozen=True, slots=True)
class LaneAnalysis:
    lane: str
    status: str
    reason: str | None
    recommended_concurrency: int | None
    saturation_concurrency: int | None
    binding_constraint: str | None
    throughput_at_recommended_tok_s: float | None
    knee: Knee | None
    steps: tuple[StepFigures, ...]
    verdicts: tuple[StepVerdict, ...]
    gains: tuple[float | None, ...]
    indistinguishable: tuple[int, int] | None = None
    next_rung_constraints: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)

    def _accepted(self) -> list[tuple[StepFigures, StepVerdict]]:
        pairs = [(s, v) for s, v in zip(self.steps, self.verdicts, strict=True) if v.usable]
        if self.recommended_concurrency is None:
            return pairs
        return [(s, v) for s, v in pairs if s.concurrency <= self.recommended_concurrency]

    def flagged_at(self, constraint: str) -> list[int]:
        """Every measured rung (accepted or not) that broke ``constraint``."""
        return [v.concurrency for v in self.verdicts if constraint in v.constraint_names()]

    def fairness_summary(self) -> dict[str, Any]:
        pairs = self._accepted()
        jains = [s.jain for s, _ in pairs if s.jain is not None]
        shares = [s.max_min_share for s, _ in pairs if s.max_min_share is not None]
        return {
            "ok": not any("fairness" in v.constraint_names() for _, v in pairs),
            "jain_min": min(jains) if jains else None,
            "max_min_share_max": max(shares) if shares else None,
            "flagged_at": self.flagged_at("fairness"),
        }

    def starvation_summary(self) -> dict[str, Any]:
        pairs = self._accepted()
        stalls = [s.decode_stall_max_ratio for s, _ in pairs if s.decode_stall_max_ratio is not None]
        waits = [s.prefill_wait_max_s for s, _ in pairs if s.prefill_wait_max_s is not None]
        names = {n for _, v in pairs for n in v.constraint_names()}
        return {
            "ok": not ({"decode_starvation", "prefill_starvation"} & names),
            "decode_ok": "decode_starvation" not in names,
            "prefill_ok": "prefill_starvation" not in names,
            "decode_stall_max_ratio": max(stalls) if stalls else None,
            "prefill_wait_max_s": max(waits) if waits else None,
            "decode_flagged_at": self.flagged_at("decode_starvation"),
            "prefill_flagged_at": self.flagged_at("prefill_starvation"),
        }

    def steps_as_dicts(self) -> list[dict[str, Any]]:
        out = []
        for step, verdict, gain in zip(self.steps, self.verdicts, self.gains, strict=True):
            data = step.to_dict()
            data.pop("lane", None)
            data["usable"] = verdict.usable
            data["unusable_reason"] = verdict.unusable_reason
            data["violations"] = [
                {"constraint": v.constraint, "measured": v.measured, "limit": v.limit, "detail": v.detail}
                for v in verdict.violations
            ]
            data["gain_per_doubling"] = gain
            out.append(data)
        return out


def _gains(steps: Sequence[StepFigures], verdicts: Sequence[StepVerdict]) -> list[float | None]:
    gains: list[float | None] = []
    prev: StepFigures | None = None
    for step, verdict in zip(steps, verdicts, strict=True):
        if not verdict.usable:
            gains.append(None)
            continue
        gains.append(None if prev is None else gain_per_doubling(
            prev.concurrency, prev.throughput_tok_s, step.concurrency, step.throughput_tok_s))
        prev = step
    return gains


def _dedupe(steps: Sequence[StepFigures]) -> tuple[list[StepFigures], list[str]]:
    by_c: dict[int, StepFigures] = {}
    notes = []
    for step in steps:
        if step.concurrency in by_c:
            notes.append(f"rung c={step.concurrency} measured twice; the later window is used")
        by_c[step.concurrency] = step
    return [by_c[c] for c in sorted(by_c)], notes


def analyze_lane(lane: str, steps: Sequence[StepFigures], policy: Policy) -> LaneAnalysis:
    """The answer for one lane under ``policy`` (see the module docstring for the walk)."""
    ordered, notes = _dedupe(steps)
    verdicts = [check_step(s, policy) for s in ordered]
    gains = _gains(ordered, verdicts)
    usable = [s for s, v in zip(ordered, verdicts, strict=True) if v.usable]
    points = [CurvePoint(s.concurrency, s.throughput_tok_s) for s in usable]
    knee = kneedle(points)
    saturation = saturation_rung(points, policy.min_gain_per_doubling) if len(points) >= 2 else None

    def result(status: str, reason: str | None, recommended: StepFigures | None, binding: str | None,
               **extra: Any) -> LaneAnalysis:
        return LaneAnalysis(
            lane=lane, status=status, reason=reason,
            recommended_concurrency=None if recommended is None else recommended.concurrency,
            saturation_concurrency=saturation, binding_constraint=binding,
            throughput_at_recommended_tok_s=None if recommended is None else recommended.throughput_tok_s,
            knee=knee, steps=tuple(ordered), verdicts=tuple(verdicts), gains=tuple(gains),
            notes=tuple(notes + list(extra.pop("more_notes", []))), **extra,
        )

    if len(ordered) < 2:
        reason = f"{len(ordered)} step window(s) for this lane: a ladder needs at least 2 rungs"
        return result("insufficient_data", reason, None, None)
    first, first_verdict = ordered[0], verdicts[0]
    if first_verdict.violations:
        worst = first_verdict.violations[0]
        reason = f"even the lowest rung c={first.concurrency} breaks a limit: {worst.detail}"
        return result("degraded", reason, None, worst.constraint)
    if not first_verdict.usable:
        reason = f"lowest rung c={first.concurrency} cannot be used: {first_verdict.unusable_reason}"
        return result("insufficient_data", reason, None, None)
    accepted = first
    for i in range(1, len(ordered)):
        step, verdict = ordered[i], verdicts[i]
        broken = tuple(verdict.constraint_names())
        if not verdict.usable and broken:
            return result("ok", None, accepted, broken[0], next_rung_constraints=broken)
        if not verdict.usable:
            return result("degraded",
                          f"rung c={step.concurrency} cannot be used ({verdict.unusable_reason}); "
                          f"the answer stops below it", accepted, None)
        gain = gain_per_doubling(accepted.concurrency, accepted.throughput_tok_s,
                                 step.concurrency, step.throughput_tok_s)
        if gain < policy.min_gain_per_doubling:
            return result("ok", None, accepted, "throughput_plateau", next_rung_constraints=broken)
        ci_a, ci_b = accepted.throughput_ci_tok_s, step.throughput_ci_tok_s
        if ci_a is not None and ci_b is not None and indistinguishable(ci_a, ci_b):
            note = (f"rungs c={accepted.concurrency} and c={step.concurrency} cannot be told apart at "
                    f"{policy.confidence:.0%} confidence; the smaller rung is preferred")
            return result("ok", None, accepted, "throughput_plateau", next_rung_constraints=broken,
                          indistinguishable=(accepted.concurrency, step.concurrency), more_notes=[note])
        if broken:
            return result("ok", None, accepted, broken[0], next_rung_constraints=broken)
        accepted = step
    return result("ok", None, accepted, "ladder_top")
