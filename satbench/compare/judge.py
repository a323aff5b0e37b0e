"""Two deployments' answers, lane by lane: what changed, whether it is more than the runs' own noise and more
than a practical floor, and the gate's verdict: PASS, FAIL or INCONCLUSIVE.

The gate after a llama.cpp upgrade is "did anything get worse". Each run carries its own uncertainty, so a
change is judged against it, and a change too small to matter is not one however sure it is:

- **the sides** must differ only in the deployment (``satbench.compare.comparable``): a workload, policy or
  ladder that differs refuses the comparison unless ``allow`` names it; the fingerprint fields that differ
  (build, model, settings, hardware) head the verdict;
- **throughput** at one rung (A's answer, where B measured it too; else the highest rung both measured):
  Welch's difference of the means from each step's ``throughput_se_tok_s`` and ``throughput_dof``
  (``core.statistics.welch_difference``; where a run did not publish them, the two intervals' half-widths in
  quadrature), with its interval;
- **latency tails** (TTFT, e2e and the pause excess: the figures with a ``*_tail``): the count of each side's
  requests above A's p95, exact from a run folder's records, else bounded from the document's tail and
  quantiles, and Fisher's exact test of B's share being larger (``satbench.compare.tails``, which says why and
  how the bound is honoured); the ratio of the p95s with its interval where the values allow one, and the
  test's power to see B's p95 at A's p90 at these sample sizes. ITL has no tail: reported, never judged;
- **verdicts**: a check (decode or prefill starvation, fairness) that held in A and flags in B;
- **answers**: the recommended concurrency and the rate answer each with its interval (an ``undecided`` or
  ``indistinguishable`` doubling spans both rungs; a rate, its bracket): lower only where B's interval lies
  wholly below A's.

A figure **fails** where it is worse, significant (one-sided, at the family's level: Bonferroni's
``(1 - confidence) / m`` over the ``m`` tests made, so two runs of one deployment pass at the stated
confidence) and beyond its floor: worse by more than the relative floor *and* the absolute one
(``DEFAULT_FLOORS``: throughput 5 % and 1 tok/s; TTFT 10 % and 5 ms; e2e 10 % and 50 ms; pause excess 10 % and
2 ms; answers 10 %; each configurable). A figure worse beyond its floor but not significant, or one that
could not be judged (no interval, no tail), is **unsettled**. The verdict: FAIL where anything fails,
INCONCLUSIVE where nothing fails and something is unsettled (or nothing could be compared), else PASS.

Repeated runs on a side are pooled: tails over every run's requests (exact where every run gave its
records), throughput as the mean of the runs' means with the larger of the runs' own standard error and
their spread's, answers as the span of the runs' intervals.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from satbench.answer.document import read_document
from satbench.answer.models import LaneModel, RecommendationsDocument, said
from satbench.compare.comparable import deployment_changes, differences, refuse
from satbench.compare.tails import TailSide, exceedance_test, ratio_interval
from satbench.compare.verdict import (
    CHECKS,
    DEFAULT_FLOORS,
    FIGURES,
    Answer,
    Change,
    Comparison,
    Figure,
    Floor,
    LaneComparison,
    describe,
)
from satbench.core.figures import StepFigures, Tail
from satbench.core.statistics import t_quantile, welch_difference

__all__ = ["DEFAULT_FLOORS", "FIGURES", "Answer", "Change", "Comparison", "Figure", "Floor", "LaneComparison",
           "Run", "RungTails", "compare_documents", "compare_runs", "describe"]


@dataclass(frozen=True, slots=True)
class RungTails:
    """One rung's tails with every value, from the run folder's records (``satbench.compare.runs``)."""

    ttft_tail: Tail
    latency_tail: Tail
    pause_excess_tail: Tail


@dataclass(frozen=True, slots=True)
class Run:
    """One run of a side: its document and, where its folder had records, each rung's full tails
    (``{lane: {concurrency: RungTails}}``)."""

    document: RecommendationsDocument
    tails: Mapping[str, Mapping[int, RungTails]] = field(default_factory=dict)


def _steps(run: Run, key: str) -> dict[int, StepFigures]:
    """The lane's valid closed-loop rungs by concurrency, as the figures the tests read (full tails where the
    run kept its records)."""
    fields = [f.name for f in dataclasses.fields(StepFigures)]
    full = run.tails.get(key, {})
    out = {}
    for step in run.document.lanes[key].steps:
        if step.valid and step.concurrency and step.rate_rps is None:
            fig = StepFigures(**{name: getattr(step, name) for name in fields})
            kept = full.get(step.concurrency)
            out[step.concurrency] = fig if kept is None else dataclasses.replace(
                fig, ttft_tail=kept.ttft_tail, latency_tail=kept.latency_tail,
                pause_excess_tail=kept.pause_excess_tail)
    return out


def _rung(lanes_a: Sequence[LaneModel], a: Sequence[Mapping[int, StepFigures]],
          b: Sequence[Mapping[int, StepFigures]]) -> int | None:
    common = set.intersection(*(set(s) for s in (*a, *b)))
    answers = [lane.recommended_concurrency for lane in lanes_a if lane.recommended_concurrency in common]
    if answers:
        return statistics.mode(answers)
    return max(common) if common else None


def _half_width(step: StepFigures) -> float | None:
    ci = step.throughput_ci_tok_s
    return None if ci is None else (ci[1] - ci[0]) / 2


def _mean_se(steps: Sequence[StepFigures], confidence: float) -> tuple[float, float | None, float]:
    """A side's throughput: the mean of its runs' means, its standard error and dof (module docstring)."""
    means = [s.throughput_tok_s for s in steps]
    mean = sum(means) / len(means)
    within: list[tuple[float, float]] = []
    for s in steps:
        if s.throughput_se_tok_s is not None and s.throughput_dof is not None:
            within.append((float(s.throughput_se_tok_s), float(s.throughput_dof)))
        elif (half := _half_width(s)) is not None:
            within.append((half / t_quantile(confidence, 1e6), 1e6))
    if len(within) < len(steps):
        return mean, None, 1.0
    m = len(steps)
    var = sum(se * se for se, _ in within) / (m * m)
    dof = var * var / max(sum((se * se / (m * m)) ** 2 / d for se, d in within), 1e-300) if var > 0 else 1e6
    if m > 1:
        spread = statistics.variance(means) / m
        if spread > var:
            var, dof = spread, float(m - 1)
    return mean, math.sqrt(var), dof


def _throughput(a: Sequence[StepFigures], b: Sequence[StepFigures], confidence: float, floor: Floor) -> Change:
    """Welch's test of the difference (module docstring); the p-value one-sided, towards less throughput."""
    ma, sa, da = _mean_se(a, confidence)
    mb, sb, db = _mean_se(b, confidence)
    if sa is None or sb is None:
        return Change("output tok/s", "tok/s", ma, mb, True, None, "no interval in one run", floor)
    se, dof = welch_difference(sa, da, sb, db)
    diff = mb - ma
    p = _one_sided_t(-diff, se, dof)
    half = t_quantile(confidence, dof) * se
    interval = ((diff - half) / ma, (diff + half) / ma) if ma else None
    return Change("output tok/s", "tok/s", ma, mb, True, p, f"Welch t over {dof:.0f} dof, p={p:.2g}", floor,
                  interval)


def _one_sided_t(diff: float, se: float, dof: float) -> float:
    """P(T >= diff / se): small where ``diff`` (the worsening) is large against its standard error."""
    if se <= 0:
        return 0.0 if diff > 0 else 1.0
    from scipy import stats

    return float(stats.t.sf(diff / se, max(dof, 1.0)))


def _latency(fig: Figure, a: Sequence[StepFigures], b: Sequence[StepFigures], confidence: float, floor: Floor
             ) -> Change | None:
    if fig.tail is None:
        pa = [getattr(s, fig.attr).p95 for s in a]
        pb = [getattr(s, fig.attr).p95 for s in b]
        if None in pa or None in pb:
            return None
        return Change(fig.label, fig.unit, statistics.fmean(pa) * fig.scale, statistics.fmean(pb) * fig.scale,
                      False, None, "no tail to judge by", floor, judged=False)
    side_a = TailSide.pooled([(getattr(s, fig.tail), getattr(s, fig.attr)) for s in a])
    side_b = TailSide.pooled([(getattr(s, fig.tail), getattr(s, fig.attr)) for s in b])
    qa, qb = side_a.p95, side_b.p95
    if qa is None or qb is None:
        return None
    if not side_a.n or not side_b.n:
        return Change(fig.label, fig.unit, qa * fig.scale, qb * fig.scale, False, None, "no tail in one run", floor)
    tested = exceedance_test(side_a, side_b)
    ratio = ratio_interval(side_a, side_b, confidence)
    p, how = tested if tested is not None else (None, "no tail to judge by")
    return Change(fig.label, fig.unit, qa * fig.scale, qb * fig.scale, False, p, how, floor,
                  None if ratio is None else (ratio[0] - 1, ratio[1] - 1), sizes=(side_a.n, side_b.n))


def _checks(lanes_a: Sequence[LaneModel], lanes_b: Sequence[LaneModel]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    flagged, cleared = [], []
    for name, group, field_name in CHECKS:
        was = [said(getattr(lane, group), field_name) for lane in lanes_a]
        now = [said(getattr(lane, group), field_name) for lane in lanes_b]
        if all(w is True for w in was) and any(n is False for n in now):
            flagged.append(name)
        elif any(w is False for w in was) and all(n is True for n in now):
            cleared.append(name)
    return tuple(flagged), tuple(cleared)


def _concurrency(lanes: Sequence[LaneModel]) -> Answer:
    values, lows, highs = [], [], []
    for lane in lanes:
        if lane.recommended_concurrency is None:
            return Answer(None, None, None, lane.status)
        span = lane.undecided or lane.indistinguishable
        value = lane.recommended_concurrency
        values.append(value)
        lows.append(min(value, span.smaller) if span is not None else value)
        highs.append(max(value, span.larger) if span is not None else value)
    return Answer(statistics.median(values), min(lows), max(highs), lanes[0].status)


def _rate(lanes: Sequence[LaneModel]) -> Answer | None:
    rates = [lane.rate for lane in lanes]
    if any(r is None for r in rates):
        return None
    values, lows, highs = [], [], []
    for r in rates:
        assert r is not None
        if r.max_rate_rps is None:
            return Answer(None, None, None, r.status)
        span = [v for v in r.interval or () if v is not None]  # null: no bound above, none stated
        values.append(r.max_rate_rps)
        lows.append(min(*span, r.max_rate_rps))
        highs.append(max(*span, r.max_rate_rps))
    return Answer(statistics.median(values), min(lows), max(highs), rates[0].status if rates[0] else None)


def compare_lane(key: str, runs_a: Sequence[Run], runs_b: Sequence[Run], confidence: float,
                 floors: Mapping[str, Floor]) -> LaneComparison:
    lanes_a = [r.document.lanes[key] for r in runs_a]
    lanes_b = [r.document.lanes[key] for r in runs_b]
    a, b = [_steps(r, key) for r in runs_a], [_steps(r, key) for r in runs_b]
    rung = _rung(lanes_a, a, b)
    changes: list[Change] = []
    notes: list[str] = []
    if rung is None:
        notes.append("no rung measured in both runs")
    else:
        at_a, at_b = [s[rung] for s in a], [s[rung] for s in b]
        for fig in FIGURES:
            floor = floors[fig.key]
            if fig.key == "throughput":
                changes.append(_throughput(at_a, at_b, confidence, floor))
            elif (change := _latency(fig, at_a, at_b, confidence, floor)) is not None:
                changes.append(change)
    flagged, cleared = _checks(lanes_a, lanes_b)
    rate_a, rate_b = _rate(lanes_a), _rate(lanes_b)
    return LaneComparison(key, lanes_a[0].recommended_concurrency, lanes_b[0].recommended_concurrency,
                          lanes_a[0].status, lanes_b[0].status, rung, tuple(changes), flagged, cleared, tuple(notes),
                          deployment_changes(lanes_a[0], lanes_b[0]),
                          (_concurrency(lanes_a), _concurrency(lanes_b)),
                          None if rate_a is None or rate_b is None else (rate_a, rate_b), floors["answer"])


def _floors(threshold: float | None, floors: Mapping[str, Floor] | None) -> dict[str, Floor]:
    out = dict(DEFAULT_FLOORS)
    if threshold is not None:
        out = {k: Floor(threshold, v.absolute) for k, v in out.items()}
    out.update(floors or {})
    return out


def compare_runs(runs_a: Sequence[Run], runs_b: Sequence[Run], *, threshold: float | None = None,
                 floors: Mapping[str, Floor] | None = None, confidence: float | None = None,
                 lanes: Sequence[str] = (), allow: Sequence[str] = ()) -> Comparison:
    """Every lane every run answers (or ``lanes`` of them), compared (module docstring). ``threshold``: one
    relative floor for every figure (``DEFAULT_FLOORS`` otherwise; ``floors`` names some); ``confidence``:
    the family's, default A's policy's. ``NotComparable`` where the sides differ in more than the deployment
    and ``allow`` does not name it."""
    if not runs_a or not runs_b:
        raise ValueError("compare: each side needs at least one run")
    docs_a, docs_b = [r.document for r in runs_a], [r.document for r in runs_b]
    every = [set(d.lanes) for d in (*docs_a, *docs_b)]
    keys = [k for k in sorted(set.intersection(*every)) if not lanes or k in lanes]
    pairs = [(k, docs_a[0].lanes[k], other.lanes[k]) for k in keys for other in (*docs_a[1:], *docs_b)]
    found = differences(pairs, docs_a[:1], [*docs_a[1:], *docs_b])
    refuse(found, allow)
    conf = confidence if confidence is not None else docs_a[0].policy.confidence
    chosen = _floors(threshold, floors)
    compared = tuple(compare_lane(k, runs_a, runs_b, conf, chosen) for k in keys)
    tests = sum(1 for lane in compared for c in lane.changes if c.p_value is not None)
    all_a, all_b = set.union(*(set(d.lanes) for d in docs_a)), set.union(*(set(d.lanes) for d in docs_b))
    return Comparison(compared, tuple(sorted(all_a - all_b)), tuple(sorted(all_b - all_a)), threshold, conf, tests,
                      tuple(found.items()), (len(runs_a), len(runs_b)))


def compare_documents(doc_a: RecommendationsDocument | Mapping[str, Any],
                      doc_b: RecommendationsDocument | Mapping[str, Any], *, threshold: float | None = None,
                      floors: Mapping[str, Floor] | None = None, confidence: float | None = None,
                      lanes: Sequence[str] = (), allow: Sequence[str] = ()) -> Comparison:
    """Two documents compared (``compare_runs`` of one run a side, tails from the documents). Documents as
    JSON are validated here (``answer.document.read_document``)."""
    return compare_runs([Run(read_document(doc_a))], [Run(read_document(doc_b))], threshold=threshold,
                        floors=floors, confidence=confidence, lanes=lanes, allow=allow)
