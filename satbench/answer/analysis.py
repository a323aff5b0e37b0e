"""From the per-step figures of one lane to its answer: recommended and saturation concurrency, and why.

The walk: rungs are taken in increasing concurrency. The lowest rung must be usable and break no limit;
it is the first candidate (an end rung can be the answer). Each next rung is accepted while

1. it is usable (valid window, enough requests, stable throughput), else the answer stops below it: bound
   by the first limit the rung breaks if it breaks one (a stall that happened needs no stable throughput
   to count), else the lane is ``degraded`` with the reason;
2. its throughput gain per doubling over the last accepted rung is not *significantly* below
   ``min_gain_per_doubling``, else ``throughput_plateau`` binds. Decisions come from intervals: the gain's
   interval (``core.statistics.gain_interval``, from the rungs' throughput intervals rebuilt at the policy's
   ``confidence``) decides. Entirely below the policy's gain: a plateau. Entirely at or above it: the
   doubling pays. Straddling it: *undecided*; the walk goes on (a plateau the data do not show never lowers
   the answer, so a noisy window cannot answer below the truth more often than the interval's one-sided
   error, 2.5 % at 95 %), and where the answer rests on that doubling (it is the doubling into the
   recommended rung) the lane's status is ``undecided`` with the interval in ``undecided``: the answer may be
   one doubling high, and longer windows would settle it (the load generator measures longer where it sees
   the straddle: ``loadgen.step``). Without an interval the point gain decides, and a note says so;
3. it breaks no policy limit, else the first broken limit (in ``VIOLATION_ORDER``) binds; a rung whose ITL p95
   lies above the objective with its interval reaching below it (``answer.itl_judge.itl_past``) is not shown to
   break it: the walk ends below it, ``undecided`` (at most one doubling low), binding ``slo_itl``; the same
   for a rung where more than 5 % of the requests missed the TTFT objective, too few to show it
   (``answer.objective_judges.ttft_past``), binding ``slo_ttft``, and for decode starvation
   (``answer.starvation_walk``).

If every rung is accepted, ``ladder_top`` binds and the lane's status is ``unsaturated`` (``undecided`` where
the last doubling straddled the gain): the answer is the top rung, a lower bound, and a note names what would
settle it (``ladder.extend`` or a higher rung).
``saturation_concurrency`` is where throughput alone stops paying: the rung the plateau binds at, else
(the walk stopped for latency) the first rung after which the monotone fit gains less than the policy
asks, else ``None``. ``knee`` is the Kneedle knee, reported only where it is a real bend: the gain from it
to the top usable rung (on the monotone fit) is below the policy's. Not enough data is a result:
``insufficient_data`` with a reason, never an exception.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from satbench.answer.curve import CurvePoint, Knee, kneedle, monotone_fit, saturation_rung
from satbench.answer.itl_judge import ITL_CONSTRAINT, itl_open, itl_past
from satbench.answer.models import CheckModel, FairnessModel, StarvationModel, StepModel, ViolationModel
from satbench.answer.objective_judges import TTFT_CONSTRAINT, ttft_open, ttft_past
from satbench.answer.policy import Policy
from satbench.answer.starvation_walk import starvation_open, starvation_stops
from satbench.answer.verdicts import StepVerdict, check_step
from satbench.core.drift import Drift, answer_recheck, lane_drift
from satbench.core.figures import MemoryFigures, StepFigures
from satbench.core.statistics import (
    MeanEstimate,
    doubling_decision,
    gain_interval,
    gain_per_doubling,
    indistinguishable,
)

__all__ = ["LaneAnalysis", "Undecided", "analyze_lane", "at_confidence"]


@dataclass(frozen=True, slots=True)
class Undecided:
    """A doubling whose gain interval straddles the policy's gain: neither shown to pay nor shown flat."""

    smaller: int
    larger: int
    gain: float
    interval: tuple[float, float]

    def said(self, min_gain: float, confidence: float) -> str:
        return (f"the doubling from c={self.smaller} to c={self.larger} gained {self.gain:+.1%} per doubling, its "
                f"{confidence:.0%} interval [{self.interval[0]:+.1%}, {self.interval[1]:+.1%}] straddles the "
                f"{min_gain:.0%} a doubling must buy: neither shown to pay nor shown flat; the answer takes "
                f"c={self.larger} (a plateau the data do not show never lowers it) and may be one doubling high; "
                f"longer windows (loadgen.max_window_s) would settle it")


def at_confidence(step: StepFigures, confidence: float) -> StepFigures:
    """``step`` with its throughput interval rebuilt at ``confidence`` from its standard error and degrees of
    freedom (where the source gave them), so every decision uses the policy's confidence."""
    ci, se, dof = step.throughput_ci_tok_s, step.throughput_se_tok_s, step.throughput_dof
    if ci is None or se is None or dof is None:
        return step
    center = (ci[0] + ci[1]) / 2
    return dataclasses.replace(step, throughput_ci_tok_s=MeanEstimate(center, se, dof).interval(confidence))


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
    gain_intervals: tuple[tuple[float, float] | None, ...] = ()
    undecided: Undecided | None = None
    drift: Drift | None = None

    def _accepted(self) -> list[tuple[StepFigures, StepVerdict]]:
        pairs = [(s, v) for s, v in zip(self.steps, self.verdicts, strict=True) if v.usable]
        if self.recommended_concurrency is None:
            return pairs
        return [(s, v) for s, v in pairs if s.concurrency <= self.recommended_concurrency]

    def flagged_at(self, constraint: str) -> list[int]:
        """Every measured rung (accepted or not) that broke ``constraint``."""
        return [v.concurrency for v in self.verdicts if constraint in v.constraint_names()]

    def _checks(self, name: str) -> list[tuple[int, Any]]:  # (rung, its CheckStatus)
        return [(v.concurrency, v.checks[name].status) for v in self.verdicts if name in v.checks]

    def _at_recommended(self, constraint: str) -> bool:
        return constraint not in {n for _, v in self._accepted() for n in v.constraint_names()}

    def fairness_summary(self) -> FairnessModel:
        """Over every measured rung: ``ok`` is false when any rung was flagged (``flagged_at``), so the summary
        never contradicts a binding constraint; ``ok_at_recommended`` looks only at the accepted rungs."""
        jains = [s.jain for s in self.steps if s.jain is not None]
        shares = [s.max_min_share for s in self.steps if s.max_min_share is not None]
        ratios = [s.user_wait_ratio for s in self.steps if s.user_wait_ratio is not None]
        flagged = self.flagged_at("fairness")
        return FairnessModel(
            ok=not flagged,
            ok_at_recommended=self._at_recommended("fairness"),
            jain_min=min(jains) if jains else None,
            max_min_share_max=max(shares) if shares else None,
            user_wait_ratio_max=max(ratios) if ratios else None,
            flagged_at=flagged,
            by_rung={str(c): status for c, status in self._checks("fairness")},
        )

    def starvation_summary(self) -> StarvationModel:
        """As ``fairness_summary``: over every measured rung, with the accepted rungs' own ``ok``."""
        def top(name: str) -> float | None:
            values = [getattr(s, name) for s in self.steps if getattr(s, name) is not None]
            return max(values) if values else None
        pauses = [s.pause_s.p99 for s in self.steps if s.pause_s.p99 is not None and s.concurrency > 1]
        decode, prefill = self.flagged_at("decode_starvation"), self.flagged_at("prefill_starvation")
        return StarvationModel(
            ok=not (decode or prefill),
            ok_at_recommended=self._at_recommended("decode_starvation")
            and self._at_recommended("prefill_starvation"),
            decode_ok=not decode,
            prefill_ok=not prefill,
            pause_p99_max_s=max(pauses) if pauses else None,
            interference_share_max=top("interference_share"),
            admission_wait_max_s=top("admission_wait_max_s"),
            decode_stall_max_ratio=top("decode_stall_max_ratio"),
            prefill_wait_max_s=top("prefill_wait_max_s"),
            decode_flagged_at=decode,
            prefill_flagged_at=prefill,
            interference_warned_at=[c for c, st in self._checks("interference") if st in ("warn", "flagged")],
            decode_by_rung={str(c): st for c, st in self._checks("decode_starvation")},
            prefill_by_rung={str(c): st for c, st in self._checks("prefill_starvation")},
        )

    def step_models(self) -> list[StepModel]:
        """Each rung as the document states it: its figures, how it was judged (the verdict's checks and
        violations, turned into the document's models here and nowhere else) and its gain per doubling."""
        out = []
        intervals = self.gain_intervals or (None,) * len(self.steps)
        for step, verdict, gain, interval in zip(self.steps, self.verdicts, self.gains, intervals, strict=True):
            out.append(StepModel(
                **{f.name: getattr(step, f.name) for f in dataclasses.fields(StepFigures)},
                usable=verdict.usable,
                unusable_reason=verdict.unusable_reason,
                violations=[ViolationModel(constraint=v.constraint, measured=v.measured, limit=v.limit,
                                           detail=v.detail, figure=v.figure, unit=v.unit, setting=v.setting)
                            for v in verdict.violations],
                gain_per_doubling=gain,
                gain_interval=None if interval is None else list(interval),
                checks={name: CheckModel(status=check.status, measured=check.measured,  # type: ignore[arg-type]
                                         limit=check.limit, detail=check.detail, figure=check.figure,
                                         unit=check.unit, setting=check.setting)
                        for name, check in verdict.checks.items()},
            ))
        return out


def _gains(steps: Sequence[StepFigures], verdicts: Sequence[StepVerdict]
           ) -> tuple[list[float | None], list[tuple[float, float] | None]]:
    """Per rung, the gain per doubling over the previous usable rung and its interval."""
    gains: list[float | None] = []
    intervals: list[tuple[float, float] | None] = []
    prev: StepFigures | None = None
    for step, verdict in zip(steps, verdicts, strict=True):
        if not verdict.usable:
            gains.append(None)
            intervals.append(None)
            continue
        gains.append(None if prev is None else gain_per_doubling(
            prev.concurrency, prev.throughput_tok_s, step.concurrency, step.throughput_tok_s))
        intervals.append(None if prev is None else gain_interval(
            prev.concurrency, prev.throughput_ci_tok_s, step.concurrency, step.throughput_ci_tok_s))
        prev = step
    return gains, intervals


def _real_knee(points: Sequence[CurvePoint], min_gain: float) -> Knee | None:
    """Kneedle's knee where the curve really bends: from it to the top rung the fit gains less than
    ``min_gain`` per doubling (never a knee while doublings still pay)."""
    knee = kneedle(points)
    if knee is None:
        return None
    pts = sorted(points, key=lambda p: p.concurrency)
    fit = monotone_fit(pts)
    at = next(i for i, p in enumerate(pts) if p.concurrency == knee.concurrency)
    if gain_per_doubling(pts[at].concurrency, fit[at], pts[-1].concurrency, fit[-1]) >= min_gain:
        return None
    return knee


def _dedupe(steps: Sequence[StepFigures]) -> tuple[list[StepFigures], list[str]]:
    by_c: dict[int, StepFigures] = {}
    notes = []
    for step in steps:
        if step.concurrency in by_c:
            notes.append(f"rung c={step.concurrency} measured twice; the later window is used")
        by_c[step.concurrency] = step
    return [by_c[c] for c in sorted(by_c)], notes


def analyze_lane(lane: str, steps: Sequence[StepFigures], policy: Policy) -> LaneAnalysis:
    """The answer for one lane under ``policy`` (see the module docstring for the walk), its drift judged
    (``core.drift``): ``steps`` may hold re-measures of its rungs (``StepFigures.drift_reference``), which are the
    drift check's and never rungs of the walk."""
    references = [at_confidence(s, policy.confidence) for s in steps if s.drift_reference]
    walk_steps = [s for s in steps if not s.drift_reference]
    walked = _walk(lane, walk_steps, policy)
    usable = [s for s, v in zip(walked.steps, walked.verdicts, strict=True) if v.usable]
    drift = lane_drift(usable, references, policy.confidence, policy.drift_floor)
    if drift is None or not drift.drifted:
        walked = _rechecked(lane, walked, usable, walk_steps, [s for s in steps if s.drift_reference], policy)
    if drift is None:
        return walked
    if not drift.drifted:
        return dataclasses.replace(walked, drift=drift)
    said = drift.said()
    notes = (*walked.notes, f"drift: {said}")
    if policy.on_drift == "report" or walked.recommended_concurrency is None:
        return dataclasses.replace(walked, drift=drift, notes=notes)
    reason = (f"the node changed speed during the walk, so the rungs measured after the change read it as an "
              f"effect of their concurrency: {said}; the answer (c={walked.recommended_concurrency}) is withheld "
              f"(policy.on_drift = withhold): measure the lane again on a steady node")
    return dataclasses.replace(walked, drift=drift, notes=notes, status="degraded", reason=reason,
                               recommended_concurrency=None, saturation_concurrency=None, binding_constraint=None,
                               throughput_at_recommended_tok_s=None, undecided=None, indistinguishable=None,
                               next_rung_constraints=())


def _rechecked(lane: str, walked: LaneAnalysis, usable: Sequence[StepFigures], walk_steps: Sequence[StepFigures],
               again: Sequence[StepFigures], policy: Policy) -> LaneAnalysis:
    """A plateau answer whose rung was measured again at the lane's end and whose doubling the re-measure decides
    otherwise (``core.drift.answer_recheck``): not settled. The walk is taken again from that rung up, with the
    re-measure in the rung's place (the window measured on the node as the rungs above it saw it; the rungs below
    were measured before, against its first window), and the answer is the larger of the two walks' (a plateau
    the data do not show never lowers it), ``undecided``, both gains said."""
    answer = walked.recommended_concurrency
    if answer is None or walked.status != "ok" or walked.binding_constraint != "throughput_plateau":
        return walked
    references = [at_confidence(s, policy.confidence) for s in again]
    why = answer_recheck(usable, references, answer, policy.min_gain_per_doubling)
    if why is None:
        return walked
    remeasure = next(s for s in again if s.concurrency == answer and s.valid)
    above = [dataclasses.replace(remeasure, drift_reference=None), *(s for s in walk_steps if s.concurrency > answer)]
    rewalked = _walk(lane, above, policy)
    raised = rewalked.recommended_concurrency is not None and rewalked.recommended_concurrency > answer
    best = rewalked if raised else walked
    reason = (f"{why}; the answer takes c={best.recommended_concurrency}, the walk from c={answer} up against its "
              f"re-measure (a plateau the data do not show never lowers it), and may be one doubling high: "
              f"measure the lane again on a steady node" if raised else
              f"{why}; the answer stays c={answer} and may be one doubling low: measure the lane again on a "
              f"steady node")
    return dataclasses.replace(best, status="undecided", reason=reason, notes=(*best.notes, f"drift: {why}"))


@dataclass(frozen=True, slots=True)
class _Rungs:
    """One lane's rungs as the walk reads them: deduplicated, in increasing concurrency and at the policy's
    confidence, each with its verdict and its gain over the previous usable rung; the curve's knee and
    saturation rung (which do not depend on where the walk stops) and the notes said before it."""

    lane: str
    policy: Policy
    ordered: list[StepFigures]
    verdicts: list[StepVerdict]
    gains: list[float | None]
    intervals: list[tuple[float, float] | None]
    knee: Knee | None
    fitted: int | None
    notes: list[str]


def _rungs(lane: str, steps: Sequence[StepFigures], policy: Policy) -> _Rungs:
    """Every rung judged against the lowest valid one (its decode step, its memory) and the lane's prompt
    elasticity, a median over rungs (the batch is the lane's, not a rung's)."""
    deduped, notes = _dedupe(steps)
    ordered = [at_confidence(s, policy.confidence) for s in deduped]
    lowest = next((s for s in ordered if s.valid), None)
    baseline = None if lowest is None else (lowest.decode_step_s or lowest.itl_s.p50)
    lowest_memory: MemoryFigures | None = None if lowest is None else lowest.memory_bytes
    shapes = [s.stall_prompt_elasticity for s in ordered if s.valid and s.stall_prompt_elasticity is not None]
    elasticity = float(statistics.median(shapes)) if shapes else None
    verdicts = [check_step(s, policy, baseline, lowest_memory, elasticity) for s in ordered]
    gains, intervals = _gains(ordered, verdicts)
    points = [CurvePoint(s.concurrency, s.throughput_tok_s)
              for s, v in zip(ordered, verdicts, strict=True) if v.usable]
    knee = _real_knee(points, policy.min_gain_per_doubling)
    fitted = saturation_rung(points, policy.min_gain_per_doubling) if len(points) >= 2 else None
    return _Rungs(lane, policy, ordered, verdicts, gains, intervals, knee, fitted, notes + _warnings(verdicts))


def _warnings(verdicts: Sequence[StepVerdict]) -> list[str]:
    """The warn-only checks (interference, memory) said as notes, rung by rung."""
    notes = []
    for v in verdicts:
        for name in ("interference", "memory"):
            warn = v.checks.get(name)
            if warn is not None and warn.status == "warn":
                notes.append(f"c={v.concurrency}: {name}: {warn.detail}")
    return notes


def _unsettled(rungs: _Rungs, open_doubling: Undecided | None, recommended: StepFigures | None, status: str,
               reason: str | None) -> tuple[str, str | None, Undecided | None, list[str]]:
    """An answer that rests on what the data could not decide is ``undecided``, not settled: the straddling
    doubling into its rung, or its rung's decode starvation or TTFT objective not shown either way. The status
    and reason so amended, the doubling if it is the answer's, and the notes that say it."""
    policy, said = rungs.policy, []
    undecided = open_doubling if recommended is not None and open_doubling is not None \
        and open_doubling.larger == recommended.concurrency else None
    if undecided is not None:
        said.append(undecided.said(policy.min_gain_per_doubling, policy.confidence))
        if status in ("ok", "unsaturated"):
            status = "undecided"
            why = undecided.said(policy.min_gain_per_doubling, policy.confidence)
            reason = why if reason is None else f"{why}; {reason}"
    if recommended is None or status not in ("ok", "unsaturated"):
        return status, reason, undecided, said
    late, paced = ttft_open(recommended, policy), itl_open(recommended, policy)
    for open_why in (starvation_open(rungs.verdicts, recommended.concurrency),
                     late and f"the TTFT objective at c={recommended.concurrency} is not settled: {late}; the "
                              f"answer may be one doubling high",
                     paced and f"the ITL objective at c={recommended.concurrency} is not settled: {paced}; the "
                               f"answer may be one doubling high"):
        if open_why:
            said.append(open_why)
            status = "undecided"
            reason = open_why if reason is None else f"{open_why}; {reason}"
    return status, reason, undecided, said


def _answer(rungs: _Rungs, open_doubling: Undecided | None, status: str, reason: str | None,
            recommended: StepFigures | None, binding: str | None, **extra: Any) -> LaneAnalysis:
    """The lane's answer where the walk stopped: ``recommended`` the rung accepted last, ``binding`` what
    stopped it; ``saturation`` (default: the fit's rung) and ``more_notes`` in ``extra``, the rest of it
    ``LaneAnalysis`` fields."""
    saturation = extra.pop("saturation", rungs.fitted)
    more = list(extra.pop("more_notes", []))
    status, reason, undecided, said = _unsettled(rungs, open_doubling, recommended, status, reason)
    return LaneAnalysis(
        lane=rungs.lane, status=status, reason=reason,
        recommended_concurrency=None if recommended is None else recommended.concurrency,
        saturation_concurrency=saturation, binding_constraint=binding,
        throughput_at_recommended_tok_s=None if recommended is None else recommended.throughput_tok_s,
        knee=rungs.knee, steps=tuple(rungs.ordered), verdicts=tuple(rungs.verdicts), gains=tuple(rungs.gains),
        notes=tuple(rungs.notes + more + said), gain_intervals=tuple(rungs.intervals), undecided=undecided,
        **extra,
    )


def _lowest_rung_answer(rungs: _Rungs) -> LaneAnalysis | None:
    """The answer where the walk cannot start: fewer than two rungs, or a lowest rung that breaks a limit or
    cannot be used; ``None`` where it can."""
    ordered = rungs.ordered
    if len(ordered) < 2:
        reason = f"{len(ordered)} step window(s) for this lane: a ladder needs at least 2 rungs"
        return _answer(rungs, None, "insufficient_data", reason, None, None)
    first, first_verdict = ordered[0], rungs.verdicts[0]
    if first_verdict.violations:
        worst = first_verdict.violations[0]
        reason = f"even the lowest rung c={first.concurrency} breaks a limit: {worst.detail}"
        return _answer(rungs, None, "degraded", reason, None, worst.constraint)
    if not first_verdict.usable:
        reason = f"lowest rung c={first.concurrency} cannot be used: {first_verdict.unusable_reason}"
        return _answer(rungs, None, "insufficient_data", reason, None, None)
    return None


def _plateau_answer(rungs: _Rungs, open_doubling: Undecided | None, accepted: StepFigures, step: StepFigures,
                    gain: float, interval: tuple[float, float] | None, broken: tuple[str, ...]) -> LaneAnalysis:
    """The doubling from ``accepted`` to ``step`` is shown not to pay: the plateau binds at ``accepted``, its
    saturation rung too, and the two rungs are named where their throughputs cannot be told apart."""
    policy = rungs.policy
    more = [f"throughput plateau after c={accepted.concurrency}: c={step.concurrency} gained "
            f"{gain:+.1%} per doubling, less than policy.min_gain_per_doubling "
            f"{policy.min_gain_per_doubling:.0%}"
            + ("" if interval is None else f" (its {policy.confidence:.0%} interval "
               f"[{interval[0]:+.1%}, {interval[1]:+.1%}] lies below it)")]
    if interval is None:
        more.append("no throughput interval for this doubling: the point estimate decided the plateau")
    ci_a, ci_b = accepted.throughput_ci_tok_s, step.throughput_ci_tok_s
    pair = ((accepted.concurrency, step.concurrency)
            if ci_a is not None and ci_b is not None and indistinguishable(ci_a, ci_b) else None)
    return _answer(rungs, open_doubling, "ok", None, accepted, "throughput_plateau", next_rung_constraints=broken,
                   indistinguishable=pair, more_notes=more, saturation=accepted.concurrency)


def _unsaturated_answer(rungs: _Rungs, open_doubling: Undecided | None, accepted: StepFigures) -> LaneAnalysis:
    """Every rung accepted: the top rung is a lower bound, and the note says what would settle it."""
    last_gain = next((g for g in reversed(rungs.gains) if g is not None), None)
    gained = "" if last_gain is None else f" (the last doubling gained {last_gain:+.1%})"
    note = (f"saturation not reached within the ladder: throughput still grows at the top rung "
            f"c={accepted.concurrency}{gained}; the answer is a lower bound. Measure higher rungs "
            f"(ladder.extend = true, or a larger ladder.concurrency / ladder.max_concurrency) to settle it")
    return _answer(rungs, open_doubling, "unsaturated", note, accepted, "ladder_top", more_notes=[note],
                   saturation=None)


def _points_past(step: StepFigures, policy: Policy) -> tuple[str, str, str] | None:
    """The first objective the rung points past without showing it (the ITL p95 by its interval, the TTFT share
    by its count: ``itl_past``, ``ttft_past``) as (its constraint, its name, why), ``None`` where none does: the
    walk ends below such a rung (module docstring, 3.)."""
    for past, constraint, what in ((itl_past, ITL_CONSTRAINT, "ITL"), (ttft_past, TTFT_CONSTRAINT, "TTFT")):
        if why := past(step, policy):
            return constraint, what, why
    return None


def _walk(lane: str, steps: Sequence[StepFigures], policy: Policy) -> LaneAnalysis:
    """The walk of the module docstring: each next rung accepted while it is usable, its doubling not shown
    flat and it breaks no limit; the first it does not accept says why the answer stops."""
    rungs = _rungs(lane, steps, policy)
    start = _lowest_rung_answer(rungs)
    if start is not None:
        return start
    ordered, verdicts = rungs.ordered, rungs.verdicts
    accepted = ordered[0]
    if past := _points_past(accepted, policy):  # as a lowest rung that breaks a limit, with its doubt said
        constraint, what, why = past
        return _answer(rungs, None, "degraded", f"even the lowest rung c={accepted.concurrency} may break the "
                       f"{what} objective: {why}", None, constraint)
    open_doubling: Undecided | None = None  # the undecided doubling into the rung accepted last, if any
    for i in range(1, len(ordered)):
        step, verdict = ordered[i], verdicts[i]
        broken = tuple(verdict.constraint_names())
        if not verdict.usable and broken:
            return _answer(rungs, open_doubling, "ok", None, accepted, broken[0], next_rung_constraints=broken)
        if not verdict.usable:
            return _answer(rungs, open_doubling, "degraded",
                           f"rung c={step.concurrency} cannot be used ({verdict.unusable_reason}); "
                           f"the answer stops below it", accepted, None)
        # the walk stops at the first rung it does not accept, so the previous usable rung is ``accepted``
        gain, interval = rungs.gains[i], rungs.intervals[i]
        assert gain is not None
        decision = doubling_decision(gain, interval, policy.min_gain_per_doubling)
        if decision == "plateau":
            return _plateau_answer(rungs, open_doubling, accepted, step, gain, interval, broken)
        if broken:
            return _answer(rungs, open_doubling, "ok", None, accepted, broken[0], next_rung_constraints=broken)
        if past := _points_past(step, policy):  # past the objective, not shown so: the walk ends below it, open
            constraint, what, why = past
            return _answer(rungs, open_doubling, "undecided", f"the {what} objective at c={step.concurrency} is not "
                           f"settled: {why}; the answer may be one doubling low", accepted, constraint,
                           next_rung_constraints=(constraint,))
        unsettled = starvation_stops(ordered, verdicts, i)
        if unsettled is not None:
            return _answer(rungs, open_doubling, "undecided", unsettled, accepted, "decode_starvation")
        open_doubling = None if decision == "pays" or interval is None else Undecided(
            accepted.concurrency, step.concurrency, gain, interval)
        accepted = step
    return _unsaturated_answer(rungs, open_doubling, accepted)
