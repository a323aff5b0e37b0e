"""satbench's answer path on the datasheet's engine: the one module that calls the product (the adapter).

Every call into satbench that makes an answer is here, so a moved or renamed function is one edit and the
datasheet measures whatever the answer path is at the commit it runs on:

- the session's configuration from the draw's policy (``satbench.session.config.SessionConfig`` with the
  session's ``DEFAULT_LOADGEN``: its ladder, windows, extension, ``decide_gain``, objectives and target);
- the closed ladder (``loadgen.ladder.next_step``), each rung's window ended as ``loadgen.step`` ends it
  (``loadgen.stop_rule.stable``, ``deciding``, ``decide``, ``worth_deciding`` at 0.25 s ticks), its figures
  (``core.step_figures.compute_step_figures``) and the answer (``answer.analysis.analyze_lane``);
- the rate search (``loadgen.rates.next_rate``, ``judge``) over rungs looked at as ``loadgen.open_step`` looks
  (``core.attainment.rate_look`` at ``min_window_s`` and 1.5x growing lengths up to ``arrival.max_window_s``,
  the last look's warm-up cut and steadiness), the capacity bound (``core.attainment.capacity_bound``), the
  warm-up the runner gives open rungs, and the answer (``answer.rate_analysis.rate_answer``);
- the trace's factor search (``loadgen.trace_step.next_factor``, ``loadgen.rates.judge``) over the window
  replayed as ``loadgen.trace_step.TraceStepRun`` replays it (warm-up and window whole passes,
  ``loadgen.trace_step.trace_plan``; the window fixed, never cut, its looks pass against pass), and the answer
  (``answer.trace_analysis.trace_answer``).

What the load generator does in its event loop (``OpenStepRun._control``, ``_look``, ``StepRun._control``, the
runner's ``_open_warmup``) has no pure function to call: it is mirrored in ``_rate_window``, ``_closed_window``
and ``_open_warmup`` below, and a change there is to be mirrored here. The requests are served by
``testkit.accuracy.engine`` in virtual time; the records are what the load generator writes (TTFT, e2e and gaps
from the send, the intended time of an open-loop request, the drain's cut-offs).
"""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass
from typing import Any

from satbench.answer.analysis import analyze_lane
from satbench.answer.judges import held_share_bound
from satbench.answer.objective_judges import late_share_bound
from satbench.answer.rate_analysis import rate_answer
from satbench.answer.trace_analysis import trace_answer
from satbench.core.arrivals import ArrivalStream, gamma_shape
from satbench.core.attainment import RateVerdict, capacity_bound, rate_look
from satbench.core.figures import StepFigures
from satbench.core.manifest import StepWindow
from satbench.core.records import RequestRecord
from satbench.core.step_figures import START_BATCHES, compute_step_figures
from satbench.loadgen import stop_rule
from satbench.loadgen.config import LoadgenConfig
from satbench.loadgen.ladder import next_step
from satbench.loadgen.rates import RateOutcome, judge, next_rate
from satbench.loadgen.trace_step import next_factor, trace_plan
from satbench.loadgen.traces import Trace, TraceRequest
from satbench.session.config import DEFAULT_LOADGEN, SessionConfig
from testkit.accuracy.engine import Served, serve_closed, serve_open
from testkit.accuracy.space import Condition
from testkit.accuracy.traffic import TraceRows, long_user
from testkit.accuracy.truth import Rules

__all__ = ["Answer", "ClosedLadder", "closed_rung", "concurrency_answer", "rate_search", "recorded_trace",
           "session_config", "share_bounds", "trace_search"]

LANE = "x"
TICK_S = 0.25  # how often the load generator's window loop wakes


@dataclass(frozen=True, slots=True)
class Answer:
    """One answer as the bench scores it: its value, status, stated interval and what it took."""

    value: float | None
    status: str  # settled | undecided | unsaturated | none | insufficient_data | degraded ...
    interval: tuple[float, float] | None
    reason: str | None
    rungs: int
    window_s: float  # virtual seconds of windows measured
    extra: dict[str, Any]


def session_config(cond: Condition, rules: Rules) -> SessionConfig:
    """The session's configuration for the draw's objectives (the session's own defaults and derivations)."""
    loadgen = {**DEFAULT_LOADGEN,
               "arrival": {"process": "poisson" if abs(cond.cv - 1) < 1e-9 else "gamma",
                           **({} if abs(cond.cv - 1) < 1e-9 else {"cv": cond.cv})},
               "trace": {"path": "recorded.jsonl"}}
    return SessionConfig.model_validate({
        "policy": {"min_gain_per_doubling": rules.min_gain, "attainment_target": rules.target,
                   "slo": {"ttft_p95_s": cond.ttft_s, "ttft_per_1k_prompt_s": cond.ttft_per_1k_s,
                           "itl_p95_s": cond.tpot_s, "tbt_p99_s": rules.pause_s}},
        "loadgen": loadgen})


def _record(r: Served, *, concurrency: int, phase: str, cut_at: float, rate: float | None, censored: bool
            ) -> RequestRecord:
    tokens = [t for t in (r.tokens or []) if t <= cut_at]
    ended = r.end is not None and r.end <= cut_at
    ttft = tokens[0] - r.sent if tokens else None
    last = r.end if ended and r.end is not None else cut_at
    return RequestRecord(
        run_id="accuracy", lane=LANE, concurrency=concurrency, user=r.user, request_id=f"{r.user}-{r.sent!r}",
        phase=phase, sent_at=r.sent, ttft_s=ttft, e2e_s=last - r.sent,  # type: ignore[arg-type]
        queue_s=None if r.admitted is None or not tokens else r.admitted - r.sent,
        itl_s=tuple(b - a for a, b in itertools.pairwise(tokens)), prompt_tokens=r.prompt,
        output_tokens=len(tokens), outcome="ok" if ended else "dropped",
        error=None if ended else "cancelled at drain", rate_rps=rate,
        intended_at=None if rate is None else r.sent, extra={"censored": True} if censored and not ended else {})


# ---- the closed ladder: the concurrency answer ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClosedLadder:
    figures: list[StepFigures]
    answer: Answer


def _closed_window(cfg: LoadgenConfig, served: list[Served], start: float, reference: StepFigures | None,
                   c: int) -> float:
    """Where ``loadgen.step.StepRun._control`` ends the window (virtual seconds): the same
    ``loadgen.stop_rule.WindowEnd`` asked at the same wake-ups, with the window's figures as the step sees them
    (its tokens binned as each request ends, so the bins from the oldest streaming request's first token on are
    not yet complete)."""
    batch = cfg.batch_s or cfg.min_window_s / START_BATCHES
    deciding = stop_rule.deciding(reference, c, cfg.decide_gain)
    rule = stop_rule.WindowEnd.of(cfg.min_window_s, cfg.max_window_s, cfg.decide_max_window_s, deciding,
                                  cfg.usable_ci_rel, cfg.hold_max_window_s)
    window = sorted((r for r in served if r.end is not None and r.sent >= start), key=lambda r: r.end or 0.0)
    ends = [r.end or 0.0 for r in window]
    firsts = [(r.tokens[0], r.end if r.end is not None else math.inf) for r in served if r.tokens]
    counts: dict[int, int] = {}
    binned = 0
    now = start
    while now < start + rule.cap_s:
        while binned < len(window) and ends[binned] <= now:  # a request's tokens are binned as it ends
            for t in window[binned].tokens or ():
                if t >= start:
                    k = int((t - start) // batch)
                    counts[k] = counts.get(k, 0) + 1
            binned += 1
        horizon = min([first for first, end in firsts if first <= now < end] + [now])
        rates = [counts.get(k, 0) / batch for k in range(max(0, int((horizon - start) // batch)))]
        ok = binned
        enough = now - start >= cfg.min_window_s and ok >= cfg.min_requests

        def decide(rates: list[float] = rates, elapsed: float = now - start) -> str:
            assert reference is not None and cfg.decide_gain is not None
            return stop_rule.decide(rates, reference, c, cfg.decide_gain, elapsed)[0]

        def worth(rates: list[float] = rates, elapsed: float = now - start) -> bool:
            assert reference is not None and cfg.decide_gain is not None
            return stop_rule.worth_deciding(rates, reference, c, cfg.decide_gain, elapsed,
                                            max(cfg.max_window_s, cfg.decide_max_window_s))

        if rule.ends(now - start, enough, lambda rates=rates: stop_rule.stable(rates, cfg.ci_rel_bound),  # type: ignore[misc]
                     decide, worth, lambda rates=rates, ok=ok, elapsed=now - start: stop_rule.held(  # type: ignore[misc]
                         stop_rule.as_final_batches(rates, batch, elapsed, cfg.batch_s), ok, cfg.min_requests,
                         cfg.usable_ci_rel)):
            return now
        now += TICK_S
    return start + rule.cap_s


def closed_rung(cond: Condition, cfg: LoadgenConfig, c: int, reference: StepFigures | None,
                seed: str) -> StepFigures:
    """One closed rung as ``loadgen.step`` measures it: warm-up, the window its stop rule ends, the drain."""
    cap = max(cfg.max_window_s, cfg.decide_max_window_s, cfg.hold_max_window_s or 0.0)
    start = cfg.warmup_s
    horizon = start + cap

    def draw(user: int, rng: random.Random) -> tuple[int, int]:
        return cond.lengths(rng, long_user(cond, user))

    served = serve_closed(cond.engine, c, horizon + cfg.request_timeout_s, draw, seed=seed, keep_tokens=True,
                          follow_after=horizon)
    end = _closed_window(cfg, served, start, reference, c)
    inside = [r for r in served if start <= r.sent <= end]
    stop = max((r.end or end for r in inside), default=end)
    cut = stop + cfg.drain_settle_s
    records = [_record(r, concurrency=c, cut_at=cut, rate=None, censored=False,
                       phase="warmup" if r.sent < start else ("window" if r.sent <= end else "drain"))
               for r in served if r.sent <= stop]
    window = StepWindow(lane=LANE, concurrency=c, start=start, end=end, warmup_start=0.0, drain_end=cut,
                        slots=cond.engine.slots)
    return compute_step_figures(records, window, batch_s=cfg.batch_s, objectives=_objectives(cfg))


def _objectives(cfg: LoadgenConfig) -> Any:
    return None if cfg.objectives is None else cfg.objectives.objectives()


def concurrency_answer(cond: Condition, rules: Rules) -> ClosedLadder:
    """The closed ladder the session walks on the draw's engine, and ``analyze_lane``'s answer."""
    session = session_config(cond, rules)
    cfg = session.loadgen
    figures: list[StepFigures] = []
    while (c := next_step(figures, cfg)) is not None and len(figures) < 16:
        below = [f for f in figures if f.concurrency < c and f.valid]
        reference = max(below, key=lambda f: f.concurrency) if below else None
        figures.append(closed_rung(cond, cfg, c, reference, f"{cond.name}:rung:{c}"))
    analysis = analyze_lane(LANE, figures, session.policy)
    intervals = {f"{a}-{b}": list(i) for (a, b), i in _gain_intervals(analysis).items()}
    return ClosedLadder(figures, Answer(
        None if analysis.recommended_concurrency is None else float(analysis.recommended_concurrency),
        "settled" if analysis.status == "ok" else analysis.status, None, analysis.reason, len(figures),
        sum(f.window_s for f in figures),
        {"binding": analysis.binding_constraint, "gain_intervals": intervals,
         "itl_intervals": {str(f.concurrency): [f.itl_p95_low_s, f.itl_p95_high_s] for f in figures
                           if f.itl_p95_low_s is not None and f.itl_p95_high_s is not None},
         "rungs": [f.concurrency for f in figures]}))


def share_bounds(figures: list[StepFigures], cond: Condition, stall_limit_s: float, confidence: float = 0.95
                 ) -> dict[str, dict[str, float]]:
    """The one-sided bounds the verdicts state of each measured rung, at ``confidence``: the share of requests
    held past ``stall_limit_s`` (``answer.judges.held_share_bound``, from c=2) and, where the draw has one TTFT
    objective for every request, the share past it (``answer.objective_judges.late_share_bound``)."""
    held = {str(f.concurrency): held_share_bound(f, stall_limit_s, confidence)[0] for f in figures
            if f.concurrency >= 2 and f.pause_excess_tail.n}
    late = {} if cond.ttft_per_1k_s else {
        str(f.concurrency): late_share_bound(f.ttft_tail, cond.ttft_s, confidence) for f in figures if f.ttft_tail.n}
    return {"held": held, "ttft": late}


def _gain_intervals(analysis: Any) -> dict[tuple[int, int], tuple[float, float]]:
    """Each stated gain-per-doubling interval, by the pair of rungs it is between."""
    out: dict[tuple[int, int], tuple[float, float]] = {}
    steps = analysis.steps
    for i, interval in enumerate(analysis.gain_intervals):
        if interval is None or i == 0:
            continue
        out[(steps[i - 1].concurrency, steps[i].concurrency)] = (float(interval[0]), float(interval[1]))
    return out


# ---- open-loop rungs: the rate and trace answers -------------------------------------------------------


def _open_warmup(cfg: LoadgenConfig, closed: list[StepFigures]) -> float:
    """``loadgen.runner.LoadgenRunner._open_warmup``."""
    if cfg.arrival.warmup_s is not None:
        return cfg.arrival.warmup_s
    top = max((f for f in closed if f.valid), key=lambda f: f.requests_per_s, default=None)
    latency = top.latency_s.mean if top is not None else None
    ttft = cfg.objectives.ttft_s if cfg.objectives is not None else None
    return max(cfg.warmup_s, 2 * (latency or 0.0), ttft or 0.0)


def _look(cfg: LoadgenConfig, served: list[Served], start: float, now: float, rate: float,
          capacity: float | None, fixed: bool = False, period: float | None = None,
          early: bool = False) -> RateVerdict:
    """``loadgen.open_step.OpenStepRun._look`` at ``now``: the requests ended, and those in flight."""
    objectives = _objectives(cfg)
    done, pending = [], []
    for r in served:
        if r.sent > now:
            continue
        if r.end is not None and r.end <= now:
            first = r.first if r.first is not None else r.end
            tpot = r.tpot_s
            missed = objectives.misses(ok=True, ttft_s=first - r.sent, tpot_s=tpot, pause_excess_s=None,
                                       e2e_s=r.end - r.sent, prompt_tokens=r.prompt) if objectives else []
            done.append((r.sent, first - r.sent, r.end, not missed))
        else:
            seen = r.first if r.first is not None and r.first <= now else None
            wait = (seen if seen is not None else now) - r.sent
            overdue = objectives is not None and seen is None and objectives.ttft_overdue(wait, r.prompt)
            pending.append((r.sent, wait, overdue))
    return rate_look(done, pending, start, now, rate, target=cfg.arrival.target, capacity_rps=capacity,
                     cut=not fixed, period=period, early=early)


def _open_rung(cfg: LoadgenConfig, cond: Condition, sends: list[tuple[float, int, int]], *, rate: float,
               warmup: float, cap_s: float, decide_early: bool, capacity: float | None,
               speed_factor: float | None, seed: str, period: float | None = None) -> StepFigures:
    """One open-loop rung as ``loadgen.open_step`` runs it: warm-up, looks, window, drain, figures. ``period``: a
    trace rung's pass (``loadgen.trace_step``): its window fixed at ``[warmup, warmup + cap_s]``, never cut nor
    ended early, its looks' backlog growth pass against pass."""
    fixed = period is not None
    served = serve_open(cond.engine, sends, seed=seed, keep_tokens=True, until=warmup + cap_s + 4 * 3600)
    start = warmup
    cap_end = start + cap_s
    now = min(cap_end, start + cfg.min_window_s)
    while True:
        verdict = _look(cfg, served, start, now, rate, capacity, fixed, period, early=decide_early and now < cap_end)
        if (verdict.verdict != "undecided" and decide_early) or now >= cap_end:
            break
        now = min(cap_end, start + 1.5 * (now - start))
    end = cap_end if fixed else now
    early = None if fixed else now < cap_end
    wstart = start if fixed or verdict.start is None else max(start, verdict.start)
    inside = [r for r in served if wstart <= r.sent <= end]
    follow = cfg.drain_timeout_s if cfg.drain_timeout_s is not None else cfg.request_timeout_s
    stop = min(end + follow, max((r.end if r.end is not None else math.inf for r in inside), default=end))
    cut = stop + cfg.drain_settle_s
    records = [_record(r, concurrency=0, cut_at=cut, rate=rate, censored=wstart <= r.sent <= end,
                       phase="window" if wstart <= r.sent <= end else ("warmup" if r.sent < wstart else "drain"))
               for r in served if r.sent <= stop]
    window = StepWindow(lane=LANE, concurrency=0, start=wstart, end=end, warmup_start=0.0, drain_end=cut,
                        slots=cond.engine.slots, rate_rps=rate, steady=None if fixed else verdict.steady,
                        speed_factor=speed_factor, period_s=period, decided_early=early)
    return compute_step_figures(records, window, batch_s=cfg.batch_s, objectives=_objectives(cfg))


def _points(answer: Any) -> list[dict[str, Any]]:
    return [{"rate_rps": p.rate_rps, "offered_rps": p.offered_rps, "attainment": p.attainment,
             "attainment_interval": None if p.attainment_interval is None else list(p.attainment_interval),
             "passed": p.passed, "sustained": p.sustained} for p in answer.points]


def rate_search(cond: Condition, rules: Rules, closed: list[StepFigures]) -> Answer:
    """The session's rate search on the draw's engine after its closed ladder, and ``rate_answer``'s answer."""
    session = session_config(cond, rules)
    cfg = session.loadgen
    arrival = cfg.arrival
    valid = [f for f in closed if f.valid]
    capacity = max((f.requests_per_s for f in valid), default=None)
    bound = capacity_bound([(f.concurrency, f.requests_per_s) for f in valid], cond.engine.slots)
    warmup = _open_warmup(cfg, closed)
    cap_s = max(arrival.max_window_s, cfg.min_window_s)
    outcomes: list[RateOutcome] = []
    steps: list[StepFigures] = []
    shape = gamma_shape(arrival.burstiness, arrival.cv)
    while (rate := next_rate(outcomes, arrival, capacity)) is not None and len(steps) < 24:
        stream = ArrivalStream(arrival.process, rate, f"{cfg.workload.seed}:{LANE}:{rate!r}", shape)
        rng = random.Random(f"{cond.name}:open:{rate!r}")
        sends = []
        while (at := stream.next_offset()) < warmup + cap_s:
            long = cond.long_share > 0 and rng.random() < cond.long_share
            sends.append((at, *cond.lengths(rng, long)))
        figures = _open_rung(cfg, cond, sends, rate=rate, warmup=warmup, cap_s=cap_s, decide_early=True,
                             capacity=bound, speed_factor=None, seed=f"{cond.name}:rate:{rate!r}")
        steps.append(figures)
        outcomes.append(judge(figures, arrival, bound))
    if not steps:
        return Answer(None, "none", None, "no rate rung (no closed capacity)", 0, 0.0, {})
    answer = rate_answer(steps, session.policy, None, bound)
    assert answer is not None
    return Answer(answer.max_rate_rps, answer.status, answer.interval, answer.reason, len(steps),
                  sum(f.window_s for f in steps), {"binding": answer.binding, "points": _points(answer)})


def recorded_trace(rows: TraceRows) -> Trace:
    """The draw's recorded window as the load generator reads a trace file."""
    requests = tuple(TraceRequest(at, p, o, (), i + 1) for i, (at, p, o) in enumerate(rows.rows))
    return Trace("recorded.jsonl", "mooncake", "0" * 64, 0, requests, length_s=rows.length_s)


def trace_search(cond: Condition, rules: Rules, closed: list[StepFigures], rows: TraceRows) -> Answer:
    """The session's speed-factor search over the draw's trace, and ``trace_answer``'s answer."""
    session = session_config(cond, rules)
    cfg = session.loadgen
    assert cfg.trace is not None
    trace = recorded_trace(rows)
    warmup = _open_warmup(cfg, closed)
    outcomes: list[RateOutcome] = []
    rungs: list[tuple[float, StepFigures]] = []
    n = len(trace.requests)
    while (factor := next_factor(outcomes, cfg.trace, cfg.arrival, trace.rate_rps)) is not None:
        plan = trace_plan(trace, factor, warmup, cfg.min_window_s)  # warm-up and window: whole passes
        offsets = trace.offsets(factor)
        sends = []
        for k in itertools.count():
            at = (k // n) * plan.period_s + offsets[k % n]
            if at >= plan.until_s:
                break
            req = trace.requests[k % n]
            sends.append((at, req.input_tokens, req.output_tokens))
        figures = _open_rung(cfg, cond, sends, rate=trace.rate_rps * factor, warmup=plan.warmup_s,
                             cap_s=plan.window_s, decide_early=False, capacity=None, speed_factor=factor,
                             seed=f"{cond.name}:factor:{factor!r}", period=plan.period_s)
        rungs.append((factor, figures))
        outcomes.append(judge(figures, cfg.arrival, None))
    answer = trace_answer(rungs, session.policy, trace.rate_rps)
    assert answer is not None
    return Answer(answer.max_factor, answer.status, answer.interval, answer.reason, len(rungs),
                  sum(f.window_s for _, f in rungs),
                  {"binding": answer.binding, "factors": [f for f, _ in rungs],
                   "recorded_rate_rps": trace.rate_rps,
                   "points": [{"speed_factor": p.speed_factor, **q} for p, q in zip(answer.points, _points(answer),
                                                                                     strict=True)]})
