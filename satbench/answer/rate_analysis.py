"""From a lane's open-loop rate rungs to its rate answer: the highest request rate it serves within its
objectives (goodput), beside the concurrency answer.

Each rung is judged by ``core.attainment.rate_verdict`` (the load generator's own verdict on it, from the same
figures): it *fails* above the capacity the closed ladder measured with every slot busy, where its backlog
grew by more than a tenth of the rate, or where its attainment (the share of the requests meant to be sent in
the window that met every per-request objective, ``core.objectives``: TTFT and e2e from the intended send
time, TPOT, pause excess) lies below ``policy.attainment_target`` (90 %, DistServe); its interval is reported.

The answer (``max_rate_rps``) is where the attainment curve falls through the target. The curve is each judged
rung's attainment against the rate it was *offered* in its window (its schedule's realization, which differs
from the rate asked by the count's noise: a rung that passed because its arrivals happened to run light says
so), made non-increasing by the pool-adjacent-violators fit weighted by the requests judged, and read between
the last rate at or above the target and the next below it (linear); DistServe reads its goodput off the same
curve. It never exceeds the closed ladder's capacity nor a rate whose backlog grew. ``interval`` follows from
the rungs' attainment intervals (``core.attainment``): the same fit drawn through their lower bounds, the
highest rate where it is still at or above the target, is the least the crossing can be; through their upper
bounds, the lowest rate where it is below, the most (``rate_interval``; the ceiling where the upper bounds never
fall). Nothing is read between two rungs: the curve can fall anywhere between them. ``status`` is ``settled`` where that
interval holds the answer within ``TOLERANCE`` (10 %: ``0.9 high <= answer <= 1.1 low``, so a truth inside it
is within 10 % of the answer), else ``undecided`` with the reason: under bursty arrivals a rung near the
target holds few independent stretches and its interval still straddles the target at
``arrival.max_window_s``, which is said, never a settled answer off by a third (the audit's gamma cv 3 and 4
searches with 90 s windows were 33 % and 51 % high, all ``settled``). Where every rate passed: the highest
offered, a lower bound (``unsaturated``); where none did: ``none`` with the reason (``undecided`` where the
lowest rate measured still straddled the target). The ``binding`` objective
is what failed at the first failing rate: ``sustained`` (above capacity, or the backlog grew) or the most
missed objective. Goodput and attainment at the best passing rung, and the whole curve, go with it.

How good was it before the interval followed the attainment's? Against the simulator's engine in virtual time
(``testkit.open_truth``: the truth from 600 s runs, three seeds pooled, never this code), with the session's
looks up to ``arrival.max_window_s`` = 90 s, ``bench/rate_accuracy.py`` finds every answer of dense and MoE,
Poisson and gamma (shape 0.5), three seeds each, within 10 % of the truth (worst 9.6 %; dense Poisson within
5 %). The MoE lane sits near its open-loop capacity, where a queue's excursions last tens of seconds: with 60 s
windows its worst error was 17 %.

Little's law (L = lambda W) ties the two answers: the closed rung at the concurrency answer c served c / W
requests/s; the rate answer meets it within 15 % where both are bound by what the lane serves; it sits lower
where the objectives bind open traffic first (arrivals come in bursts a closed loop never sends), higher where
the closed answer stopped for its own constraint; ``littles_law`` says which, with the in-flight count at the
rate answer (rate x its mean latency).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from satbench.answer.open_loop_models import RateModel, RatePointModel
from satbench.answer.policy import Policy
from satbench.core.attainment import rate_verdict, step_attainment, step_confidence, step_growth, step_steady
from satbench.core.figures import StepFigures

__all__ = ["TOLERANCE", "RateAnswer", "RatePoint", "attainment_curve", "crossing", "rate_answer", "rate_interval",
           "rate_passes"]

TOLERANCE = 0.10  # a settled rate answer is held within this share of the truth by its interval


@dataclass(frozen=True, slots=True)
class RatePoint:
    rate_rps: float
    offered_rps: float | None
    valid: bool
    sustained: bool | None
    attainment: float | None
    attainment_interval: tuple[float, float] | None
    goodput_rps: float | None
    goodput_tok_s: float | None
    passed: bool | None
    missed_most: str | None
    latency_mean_s: float | None
    ttft_p95_s: float | None
    judged: int = 0
    reason: str | None = None
    decided: bool = True  # False: its interval straddled the target at the window's limit (passed: its point)

    @property
    def served_rate(self) -> float:
        """The rate the rung was offered in its window (its schedule's realization), else the one it asked."""
        return self.offered_rps if self.offered_rps else self.rate_rps

    def model(self) -> RatePointModel:
        """The rung as the document states it (``answer.models.RatePointModel``)."""
        return RatePointModel(
            rate_rps=self.rate_rps, offered_rps=self.offered_rps, valid=self.valid, sustained=self.sustained,
            attainment=self.attainment,
            attainment_interval=None if self.attainment_interval is None else list(self.attainment_interval),
            goodput_rps=self.goodput_rps, goodput_tok_s=self.goodput_tok_s, passed=self.passed,
            missed_most=self.missed_most, latency_mean_s=self.latency_mean_s, ttft_p95_s=self.ttft_p95_s,
            judged_requests=self.judged, reason=self.reason)


@dataclass(frozen=True, slots=True)
class RateAnswer:
    status: str
    reason: str | None
    max_rate_rps: float | None
    interval: tuple[float, float] | None
    goodput_rps: float | None
    goodput_tok_s: float | None
    attainment: float | None
    binding: str | None
    target: float
    points: tuple[RatePoint, ...] = ()
    littles_law: dict[str, Any] | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def rpm(self) -> int | None:
        return None if self.max_rate_rps is None else int(self.max_rate_rps * 60)

    def model(self) -> RateModel:
        """The answer as the document states it (``answer.models.RateModel``)."""
        return RateModel(
            status=self.status, reason=self.reason, max_rate_rps=self.max_rate_rps,  # type: ignore[arg-type]
            max_rate_rpm=self.rpm, interval=None if self.interval is None else list(self.interval),
            goodput_rps=self.goodput_rps, goodput_tok_s=self.goodput_tok_s, attainment=self.attainment,
            attainment_target=self.target, binding_objective=self.binding, curve=[p.model() for p in self.points],
            littles_law=self.littles_law, notes=list(self.notes), energy=None)


def rate_passes(step: StepFigures, policy: Policy, capacity_rps: float | None = None) -> RatePoint:
    """One rate rung judged (module docstring; ``core.attainment.rate_verdict``, as the load generator judged
    it)."""
    assert step.rate_rps is not None
    attainment = step_attainment(step)
    confidence = step_confidence(step, policy.confidence)
    verdict = rate_verdict(step.rate_rps, attainment, step_growth(step), target=policy.attainment_target,
                           confidence=confidence, capacity_rps=capacity_rps, final=True,
                           steady=step_steady(step)) if step.valid else None
    passed = None if verdict is None or verdict.verdict == "undecided" else verdict.verdict == "pass"
    misses = {k: v for k, v in step.objective_misses.items() if v}
    return RatePoint(rate_rps=step.rate_rps, offered_rps=step.offered_rps, valid=step.valid,
                     sustained=None if verdict is None else verdict.sustained, attainment=step.attainment,
                     attainment_interval=None if attainment is None else attainment.interval(confidence),
                     goodput_rps=step.goodput_rps, goodput_tok_s=step.goodput_tok_s, passed=passed,
                     missed_most=max(misses, key=lambda k: misses[k]) if misses else None,
                     latency_mean_s=step.latency_intended_s.mean or step.latency_s.mean,
                     ttft_p95_s=step.ttft_intended_s.p95 or step.ttft_s.p95, judged=step.judged_requests or 0,
                     reason=step.reason if not step.valid else None if verdict is None else verdict.reason,
                     decided=verdict is None or verdict.decided)


def attainment_curve(points: Sequence[RatePoint]) -> list[tuple[float, float]]:
    """The attainment against the rate each rung was offered, made non-increasing (the pool-adjacent-violators
    fit, each rung weighted by its judged requests): one noisy rung cannot make more load look better. A rung
    that was not sustained has no steady attainment to draw."""
    pts = sorted((p.served_rate, p.attainment, max(1, p.judged)) for p in points
                 if p.valid and p.attainment is not None and p.sustained is not False)
    blocks: list[list[float]] = []  # [first index, last index, weighted sum, weight]
    for i, (_, y, w) in enumerate(pts):
        blocks.append([i, i, y * w, w])
        while len(blocks) > 1 and blocks[-2][2] / blocks[-2][3] < blocks[-1][2] / blocks[-1][3]:
            last = blocks.pop()
            blocks[-1][1], blocks[-1][2], blocks[-1][3] = last[1], blocks[-1][2] + last[2], blocks[-1][3] + last[3]
    fitted = [0.0] * len(pts)
    for first, last_i, total, weight in blocks:
        for i in range(int(first), int(last_i) + 1):
            fitted[i] = total / weight
    return [(x, y) for (x, _, _), y in zip(pts, fitted, strict=True)]


def crossing(curve: Sequence[tuple[float, float]], target: float) -> tuple[float, tuple[float, float]] | None:
    """Where the fitted curve falls through ``target``: linear between the last rate at or above it and the
    next below, with that bracket; ``None`` where it never falls (or starts below)."""
    for (x0, y0), (x1, y1) in itertools.pairwise(curve):
        if y0 >= target > y1:
            return x0 + (y0 - target) / (y0 - y1) * (x1 - x0), (x0, x1)
    return None


def rate_answer(steps: Sequence[StepFigures], policy: Policy, closed_at_answer: StepFigures | None = None,
                capacity_rps: float | None = None, tolerance: float = TOLERANCE) -> RateAnswer | None:
    """The rate answer of a lane's rate rungs (module docstring), ``None`` without any; ``closed_at_answer`` is
    the closed rung at the lane's concurrency answer, for Little's law; ``capacity_rps`` the most requests/s
    its closed ladder served with every slot busy (``core.attainment.capacity_bound``). ``tolerance``: the
    interval follows from the rungs' attainment intervals and an answer it does not hold within that share
    is ``undecided``."""
    rungs = sorted((s for s in steps if s.rate_rps is not None), key=lambda s: s.rate_rps or 0.0)
    if not rungs:
        return None
    points = [rate_passes(s, policy, capacity_rps) for s in rungs]
    target = policy.attainment_target
    judged = [p for p in points if p.passed is not None]
    failing = [p for p in judged if not p.passed]
    ceiling = min((p.rate_rps for p in failing), default=None)
    passing = [p for p in judged if p.passed and (ceiling is None or p.rate_rps < ceiling)]
    if not passing:
        why = ("no rate rung could be judged (each invalid: " + "; ".join(
            f"{p.rate_rps:g}/s {p.reason}" for p in points) + ")") if not judged else (
            f"even the lowest rate measured, {judged[0].rate_rps:g} requests/s, is not served within the objectives "
            f"({_failure(judged[0], target)})")
        if judged and not judged[0].decided:
            return RateAnswer("undecided", f"the lowest rate measured, {judged[0].rate_rps:g} requests/s, still "
                              f"straddled the {target:.0%} target at the window's limit (arrival.max_window_s): the "
                              "answer lies near or below it (measure longer, or list lower rates)", None, None,
                              None, None, None, None, target, tuple(points))
        return RateAnswer("none", why, None, None, None, None, None,
                          None if not failing else _binding(failing[0]), target, tuple(points))
    best = passing[-1]
    first_fail = next((p for p in failing if p.rate_rps > best.rate_rps), None)
    notes: list[str] = []
    # where the attainment curve (against the rate each rung was offered) falls through the target, never above
    # the capacity the closed ladder measured nor a rate whose backlog grew
    cross = crossing(attainment_curve(points), target)
    answer = cross[0] if cross is not None else best.served_rate
    interval: tuple[float, float] | None = None
    limits = [x for x in (capacity_rps, *(p.rate_rps for p in failing if p.sustained is False)) if x]
    if limits and answer > min(limits):
        answer = min(limits)
        notes.append(f"held at {answer:.3g} requests/s: the closed ladder's capacity or a rate whose backlog grew")
    status = "settled" if first_fail is not None or cross is not None else "unsaturated"
    reason = None if status == "settled" else (
        f"every rate measured passed, up to {best.served_rate:.3g} requests/s: the answer is a lower bound")
    if status == "settled":
        interval = rate_interval(points, target, min(limits) if limits else None)
        low, high = interval
        if not (high * (1 - tolerance) <= answer <= low * (1 + tolerance)):
            status = "undecided"
            shown = f"[{low:.3g}, {'inf' if high == math.inf else f'{high:.3g}'}]"
            doubtful = [p for p in points if p.reason is not None and "undecided" in p.reason]
            reason = (f"the rate's {policy.confidence:.0%} interval {shown} requests/s does not hold the answer "
                      f"within {tolerance:.0%}: " + (
                          f"{len(doubtful)} rung(s) near it still straddled the target at the window's limit "
                          "(arrival.max_window_s): measure them longer" if doubtful else
                          "the rungs around the crossing are too far apart or too short"))
    if first_fail is not None:
        notes.append(f"{first_fail.rate_rps:g} requests/s fails: {_failure(first_fail, target)}")
    return RateAnswer(status, reason, answer, interval, best.goodput_rps, best.goodput_tok_s, best.attainment,
                      None if first_fail is None else _binding(first_fail), target, tuple(points),
                      _littles_law(best, answer, closed_at_answer), tuple(notes))


def rate_interval(points: Sequence[RatePoint], target: float, ceiling: float | None = None) -> tuple[float, float]:
    """Where the crossing can lie, read from the rungs' attainment intervals, each bound made non-increasing as
    the curve is (``attainment_curve``): from the highest rate whose lower bound is at or above ``target`` (the
    curve is non-increasing, so the crossing is at or above it) to the lowest rate whose upper bound is below it
    (the crossing is below it). Between two rungs the interval says nothing more: the curve between them can
    fall anywhere, and near a lane's capacity it falls as a cliff, so a line drawn between the two bounds (this
    function before) put the crossing's bound inside the bracket and missed the truth in 20 of 173 draws
    (``bench/accuracy.py``). Where the lower bounds start below the target, 0; where the upper bounds never fall
    below it, ``ceiling`` (the closed ladder's capacity or a rate whose backlog grew), else infinity."""
    bounds = [(p, p.attainment_interval) for p in points if p.attainment is not None]
    lows = [dataclasses.replace(p, attainment=i[0]) for p, i in bounds if i is not None]
    highs = [dataclasses.replace(p, attainment=i[1]) for p, i in bounds if i is not None]
    low_curve, high_curve = attainment_curve(lows), attainment_curve(highs)
    high_end = math.inf if ceiling is None else ceiling
    met = [x for x, y in low_curve if y >= target]
    low = met[-1] if met and low_curve[0][1] >= target else 0.0
    fallen = [x for x, y in high_curve if y < target]
    high = min(fallen[0], high_end) if fallen else high_end
    return low, max(low, high)


def _binding(point: RatePoint) -> str:
    return "sustained" if point.sustained is False else (point.missed_most or "attainment")


def _failure(point: RatePoint, target: float) -> str:
    if point.sustained is False:
        return "its backlog grew over the window (the lane does not sustain it)"
    share = "unknown" if point.attainment is None else f"{point.attainment:.0%}"
    return (f"{share} of its requests attained every objective, below the {target:.0%} target"
            + ("" if point.missed_most is None else f"; most missed: {point.missed_most}"))


def _littles_law(point: RatePoint, rate: float, closed: StepFigures | None) -> dict[str, Any] | None:
    """Little's law (L = lambda W) between the two answers (module docstring): the closed rung at the
    concurrency answer served ``c / W`` requests/s, which the rate answer meets where both are bound by
    throughput."""
    if point.latency_mean_s is None:
        return None
    in_flight = rate * point.latency_mean_s
    out: dict[str, Any] = {"rate_rps": rate, "latency_mean_s": point.latency_mean_s, "in_flight": in_flight,
                           "concurrency_answer": None, "closed_rate_rps": None, "ratio": None, "note": None}
    latency = None if closed is None else closed.latency_s.mean
    if closed is None or not latency:
        return out
    closed_rate = closed.concurrency / latency  # Little's law on the closed rung: its c users over its latency
    ratio = rate / closed_rate
    out.update(concurrency_answer=closed.concurrency, closed_rate_rps=closed_rate, ratio=ratio)
    said = (f"the closed answer c={closed.concurrency} served {closed_rate:.3g} requests/s (c / its mean latency "
            f"{latency * 1000:.0f} ms, Little's law); the rate answer is {rate:.3g} requests/s, {ratio:.0%} of it, "
            f"holding {in_flight:.1f} in flight on average (rate x its mean latency {point.latency_mean_s * 1000:.0f}"
            " ms)")
    if abs(ratio - 1) <= 0.15:
        out["note"] = f"consistent within 15 %: {said}; both answers are bound by what the lane serves"
    elif ratio < 1:
        out["note"] = (f"{said}: the objectives bind open traffic first (arrivals come in bursts a closed loop "
                       "never sends, and their queueing reaches the objectives below the closed throughput)")
    else:
        out["note"] = (f"{said}: the closed answer stops below the lane's capacity (bound by its own constraint, "
                       "not by throughput), while open traffic within the objectives goes further")
    return out
