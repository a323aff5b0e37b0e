"""Two answers for one fleet, lane by lane: what changed, and whether it is more than the runs' own noise.

The gate after a llama.cpp upgrade is "did anything get worse": a lower answer, less throughput at the same
concurrency, longer latency tails, a verdict that now flags. Each run carries its own uncertainty, so a
change is judged against it, never against a fixed tolerance alone:

- **throughput** at one rung (A's answer, where B measured it too; else the highest rung both measured): the
  difference of the two means with Welch's standard error and degrees of freedom from each step's
  ``throughput_se_tok_s`` and ``throughput_dof`` (``core.statistics.welch_difference``; where a run did not
  publish them, the two intervals' half-widths in quadrature), significant where the interval of the
  difference at the confidence excludes 0;
- **latency quantiles** (TTFT, e2e, and the pause excess: the figures with a ``*_tail``): the p95 of A is the
  limit, each run's tail counts its requests above it, and Fisher's exact test says whether B's share above
  it is larger (``core.statistics.exceedances_differ``; a better tail is tested the other way round). ITL has
  no tail: its change is reported, never judged;
- **verdicts**: a check (decode or prefill starvation, fairness) that held in A and flags in B is a
  regression: the analysis already judged each flag with its own significance;
- **the answer**: a lower recommended concurrency is a regression, unless either run's answer is
  ``undecided`` (its deciding doubling straddled the policy's gain: a coin flip, reported as such).

A figure is a regression where it is worse, significant, and worse by more than ``threshold`` (relative):
significance alone flags a 0.5 % slowdown of a long run, the threshold alone flags noise. The tests of one
comparison are many (several figures of every lane), so each is made at the family's level, Bonferroni's
``(1 - confidence) / m``: two runs of one config then say "no significant change" at the stated confidence,
not once in every few lanes.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from satbench.core.figures import StepFigures, Tail
from satbench.core.statistics import exceedances_differ, t_quantile, welch_difference
from satbench.recommender.document import read_document
from satbench.recommender.models import LaneModel, RecommendationsDocument, said

__all__ = ["Change", "Comparison", "LaneComparison", "compare_documents"]

LATENCIES = (("TTFT p95", "ttft_s", "ttft_tail"), ("e2e p95", "latency_s", "latency_tail"),
             ("ITL p95", "itl_s", None), ("pause excess p95", "pause_excess_s", "pause_excess_tail"))
CHECKS = (("decode starvation", "starvation", "decode_ok"), ("prefill starvation", "starvation", "prefill_ok"),
          ("fairness", "fairness", "ok"))


@dataclass(frozen=True, slots=True)
class Change:
    """One figure of one lane, A against B. ``p_value`` None: nothing to judge it by (no interval or tail)."""

    figure: str
    unit: str
    a: float | None
    b: float | None
    higher_is_better: bool
    p_value: float | None = None
    how: str = ""

    @property
    def relative(self) -> float | None:
        if self.a is None or self.b is None or self.a == 0:
            return None
        return self.b / self.a - 1.0

    @property
    def worse(self) -> bool:
        rel = self.relative
        return rel is not None and (rel < 0 if self.higher_is_better else rel > 0)

    def significant(self, alpha: float) -> bool:
        return self.p_value is not None and self.p_value < alpha

    def regression(self, threshold: float, alpha: float) -> bool:
        rel = self.relative
        return self.worse and self.significant(alpha) and rel is not None and abs(rel) > threshold


@dataclass(frozen=True, slots=True)
class LaneComparison:
    key: str
    answer_a: int | None
    answer_b: int | None
    status_a: str | None
    status_b: str | None
    rung: int | None
    changes: tuple[Change, ...] = ()
    flagged: tuple[str, ...] = ()  # checks that held in A and flag in B
    cleared: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def answer_dropped(self) -> bool:
        undecided = "undecided" in (self.status_a, self.status_b)
        return (not undecided and self.answer_a is not None and self.answer_b is not None
                and self.answer_b < self.answer_a) or (self.answer_a is not None and self.answer_b is None)


@dataclass(frozen=True, slots=True)
class Comparison:
    lanes: tuple[LaneComparison, ...]
    only_a: tuple[str, ...]
    only_b: tuple[str, ...]
    threshold: float
    confidence: float
    tests: int = field(default=0)

    @property
    def alpha(self) -> float:
        """Each test's level: the family's ``1 - confidence`` over the tests made (Bonferroni)."""
        return (1.0 - self.confidence) / max(1, self.tests)

    def regressions(self) -> list[str]:
        """Every regression, one line each, naming the lane and the figure."""
        out = []
        for lane in self.lanes:
            if lane.answer_dropped:
                out.append(f"{lane.key}: recommended concurrency {lane.answer_a} -> {lane.answer_b}")
            for check in lane.flagged:
                out.append(f"{lane.key}: {check} now flagged")
            for change in lane.changes:
                if change.regression(self.threshold, self.alpha):
                    out.append(f"{lane.key}: {describe(change, lane.rung)}")
        out.extend(f"{key}: in A, no answer in B" for key in self.only_a)
        return out


def describe(change: Change, rung: int | None) -> str:
    at = f" at c={rung}" if rung is not None else ""
    rel = change.relative
    moved = "" if rel is None else f" ({rel:+.1%})"
    return f"{change.figure}{at} {_fmt(change.a)} -> {_fmt(change.b)} {change.unit}{moved}" + (
        f", {change.how}" if change.how else "")


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.3g}"


def _steps(lane: LaneModel) -> dict[int, StepFigures]:
    """The lane's valid rungs by concurrency, as the figures the tests read."""
    fields = [f.name for f in dataclasses.fields(StepFigures)]
    return {step.concurrency: StepFigures(**{name: getattr(step, name) for name in fields})
            for step in lane.steps if step.valid and step.concurrency}


def _rung(lane_a: LaneModel, a: Mapping[int, StepFigures], b: Mapping[int, StepFigures]) -> int | None:
    answer = lane_a.recommended_concurrency
    if answer is not None and answer in a and answer in b:
        return answer
    common = sorted(set(a) & set(b))
    return common[-1] if common else None


def _half_width(step: StepFigures) -> float | None:
    ci = step.throughput_ci_tok_s
    return None if ci is None else (ci[1] - ci[0]) / 2


def _throughput(a: StepFigures, b: StepFigures, confidence: float) -> Change:
    """Welch's test of the difference (module docstring); the p-value of |t| two-sided."""
    diff = b.throughput_tok_s - a.throughput_tok_s
    p: float | None = None
    how = "no interval in one run"
    if None not in (a.throughput_se_tok_s, a.throughput_dof, b.throughput_se_tok_s, b.throughput_dof):
        se, dof = welch_difference(float(a.throughput_se_tok_s or 0.0), float(a.throughput_dof or 1.0),
                                   float(b.throughput_se_tok_s or 0.0), float(b.throughput_dof or 1.0))
        p = _two_sided_t(diff, se, dof)
        how = f"Welch t over {dof:.0f} dof, p={p:.2g}"
    elif (ha := _half_width(a)) is not None and (hb := _half_width(b)) is not None:
        half = math.hypot(ha, hb)
        z = t_quantile(confidence, 1e6)  # the intervals' own level, read as normal
        p = _two_sided_t(diff, half / z, 1e6) if half > 0 else (0.0 if diff else 1.0)
        how = f"intervals in quadrature, p={p:.2g}"
    return Change("output tok/s", "tok/s", a.throughput_tok_s, b.throughput_tok_s, True, p, how)


def _two_sided_t(diff: float, se: float, dof: float) -> float:
    if se <= 0:
        return 0.0 if diff else 1.0
    from scipy import stats

    return float(2 * stats.t.sf(abs(diff) / se, max(dof, 1.0)))


def _above(tail: Tail, limit: float) -> int:
    return tail.above(limit)[0]


def _latency(name: str, figure: str, tail_name: str | None, a: StepFigures, b: StepFigures) -> Change | None:
    qa, qb = getattr(a, figure).p95, getattr(b, figure).p95
    if qa is None or qb is None:
        return None
    if tail_name is None:
        return Change(name, "ms", qa * 1e3, qb * 1e3, False, None, "no tail to judge by")
    ta, tb = getattr(a, tail_name), getattr(b, tail_name)
    if not ta.n or not tb.n:
        return Change(name, "ms", qa * 1e3, qb * 1e3, False, None, "no tail in one run")
    if qb >= qa:  # is B's share above A's p95 larger?
        ka, kb = _above(ta, qa), _above(tb, qa)
        p = exceedances_differ(ka, ta.n, kb, tb.n)
        how = f"{kb} of {tb.n} above A's p95 against {ka} of {ta.n}, p={p:.2g}"
    else:  # better: is A's share above B's p95 larger?
        ka, kb = _above(ta, qb), _above(tb, qb)
        p = exceedances_differ(kb, tb.n, ka, ta.n)
        how = f"{ka} of {ta.n} above B's p95 in A against {kb} of {tb.n}, p={p:.2g}"
    return Change(name, "ms", qa * 1e3, qb * 1e3, False, p, how)


def _checks(lane_a: LaneModel, lane_b: LaneModel) -> tuple[tuple[str, ...], tuple[str, ...]]:
    flagged, cleared = [], []
    for name, group, field_name in CHECKS:
        was = said(getattr(lane_a, group), field_name)
        now = said(getattr(lane_b, group), field_name)
        if was is True and now is False:
            flagged.append(name)
        elif was is False and now is True:
            cleared.append(name)
    return tuple(flagged), tuple(cleared)


def compare_lane(key: str, lane_a: LaneModel, lane_b: LaneModel, confidence: float) -> LaneComparison:
    a, b = _steps(lane_a), _steps(lane_b)
    rung = _rung(lane_a, a, b)
    changes: list[Change] = []
    notes: list[str] = []
    if rung is None:
        notes.append("no rung measured in both runs")
    else:
        changes.append(_throughput(a[rung], b[rung], confidence))
        changes.extend(c for name, fig, tail in LATENCIES if (c := _latency(name, fig, tail, a[rung], b[rung])))
    flagged, cleared = _checks(lane_a, lane_b)
    return LaneComparison(key, lane_a.recommended_concurrency, lane_b.recommended_concurrency, lane_a.status,
                          lane_b.status, rung, tuple(changes), flagged, cleared, tuple(notes))


def compare_documents(doc_a: RecommendationsDocument | Mapping[str, Any],
                      doc_b: RecommendationsDocument | Mapping[str, Any], *, threshold: float = 0.05,
                      confidence: float | None = None, lanes: Sequence[str] = ()) -> Comparison:
    """Every lane both documents answer (or ``lanes`` of them), compared (module docstring). ``confidence``:
    the family's, default A's policy's (its default, 0.95, where it says none). Documents as JSON are
    validated here (``recommender.document.read_document``)."""
    doc_a, doc_b = read_document(doc_a), read_document(doc_b)
    la, lb = doc_a.lanes, doc_b.lanes
    keys = [k for k in sorted(set(la) & set(lb)) if not lanes or k in lanes]
    conf = confidence if confidence is not None else doc_a.policy.confidence
    compared = tuple(compare_lane(k, la[k], lb[k], conf) for k in keys)
    tests = sum(1 for lane in compared for c in lane.changes if c.p_value is not None)
    return Comparison(compared, tuple(sorted(set(la) - set(lb))), tuple(sorted(set(lb) - set(la))), threshold,
                      conf, tests)
