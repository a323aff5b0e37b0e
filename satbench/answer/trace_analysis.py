"""From a lane's trace rungs to the trace answer: "this node takes N x the recorded traffic".

A trace rung (``loadgen.trace_step``) is an open-loop rung whose schedule is a recorded trace's, replayed at a
speed factor: its rate is the trace window's recorded rate times the factor. So the trace answer is the rate
answer (``answer.rate_analysis.rate_answer``: each rung judged by ``core.attainment.rate_verdict``, the
attainment curve against the offered rate, where it falls through the policy's target, never above the closed
ladder's capacity nor a rate whose backlog grew) read in factors: ``max_factor`` is the largest speed factor at
which the lane stays sustainable and within its objectives, the rate answer over the recorded rate. The curve is
each rung's attainment against its factor, its interval the rate answer's (``answer.rate_analysis.rate_interval``)
from each rung's attainment interval, which for a trace rung is read pass against pass
(``core.passes.paired_attainment``: the spread of one pass of the same schedule about its long run, not the
swings the schedule itself makes). ``status`` is the rate answer's: ``settled`` where the interval holds the
answer within ``TOLERANCE`` (10 %), ``undecided`` with the reason (in factors) where it does not,
``unsaturated`` (every factor walked passed: a lower bound) or ``none`` with the reason. Before, the interval
was the bracket of the two rungs around the crossing by their point verdicts, never undecided: it held the
truth in 81.9 % of the datasheet's draws (``docs/accuracy.md``), and two settled answers were off by more than
20 %.

A trace rung's figures are the whole recorded window, measured after the window played once (never cut by a
warm-up rule for stationary processes), and its ``backlog_growth_rps`` is the backlog's growth from one pass of
the window to the next at the same moment of the schedule (``core.backlog.pass_growth``), not the slope over
the window: so "the backlog grew" (binding ``sustained``) means the node falls further behind each time the
traffic comes round, never that the recorded rate rose (``loadgen.trace_step``).

The trace's evidence (the manifest's ``traces`` entry of the lane: file sha256, size, window, the prompt cache
share its block ids imply, what was synthesised) goes with the answer, so a reader knows which traffic it is for.
Pure: figures, factors and the policy in, a frozen ``TraceAnswer`` out (``to_dict()`` for the document).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from satbench.answer.policy import Policy
from satbench.answer.rate_analysis import TOLERANCE, RateAnswer, rate_answer
from satbench.core.figures import StepFigures

__all__ = ["TraceAnswer", "TracePoint", "to_factor", "trace_answer"]


@dataclass(frozen=True, slots=True)
class TracePoint:
    """One trace rung on the curve: its speed factor, rate, attainment (with its interval) and verdict."""

    speed_factor: float
    rate_rps: float
    offered_rps: float | None
    attainment: float | None
    attainment_interval: tuple[float, float] | None
    passed: bool | None
    sustained: bool | None
    goodput_rps: float | None
    reason: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"speed_factor": self.speed_factor, "rate_rps": self.rate_rps, "offered_rps": self.offered_rps,
                "attainment": self.attainment,
                "attainment_interval": None if self.attainment_interval is None else list(self.attainment_interval),
                "passed": self.passed, "sustained": self.sustained, "goodput_rps": self.goodput_rps,
                "reason": self.reason}


@dataclass(frozen=True, slots=True)
class TraceAnswer:
    """The trace answer of one lane (module docstring)."""

    status: str
    reason: str | None
    max_factor: float | None
    interval: tuple[float, float] | None  # in factors
    recorded_rate_rps: float
    max_rate_rps: float | None
    binding: str | None
    target: float
    points: tuple[TracePoint, ...] = ()
    trace: Mapping[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    @property
    def sentence(self) -> str:
        if self.max_factor is None:
            return f"this node takes none of the recorded traffic within its objectives ({self.reason})"
        bound = "at least " if self.status == "unsaturated" else ""
        return (f"this node takes {bound}{self.max_factor:.3g} x the recorded traffic ({self.max_rate_rps:.3g} "
                f"requests/s against {self.recorded_rate_rps:.3g} recorded)")

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "reason": self.reason, "max_factor": self.max_factor,
                "interval": None if self.interval is None else list(self.interval),
                "recorded_rate_rps": self.recorded_rate_rps, "max_rate_rps": self.max_rate_rps,
                "binding_objective": self.binding, "attainment_target": self.target, "sentence": self.sentence,
                "curve": [p.to_dict() for p in self.points], "trace": dict(self.trace), "notes": list(self.notes)}


def trace_answer(rungs: Sequence[tuple[float, StepFigures]], policy: Policy, recorded_rate_rps: float, *,
                 capacity_rps: float | None = None, trace: Mapping[str, Any] | None = None) -> TraceAnswer | None:
    """The trace answer of a lane's trace rungs, each ``(speed factor, figures)`` (module docstring); ``None``
    without any. ``recorded_rate_rps`` is the trace window's recorded rate (the manifest's
    ``traces[lane].recorded_rate_rps``), ``capacity_rps`` the closed ladder's bound
    (``core.attainment.capacity_bound``), ``trace`` the lane's trace evidence."""
    if not rungs:
        return None
    if not recorded_rate_rps > 0:
        raise ValueError(f"recorded_rate_rps must be positive, got {recorded_rate_rps!r}")
    factor_of = {round(step.rate_rps or 0.0, 6): factor for factor, step in rungs}
    rate = rate_answer([step for _, step in rungs], policy, None, capacity_rps)
    assert rate is not None
    points = tuple(TracePoint(factor_of.get(round(p.rate_rps, 6), p.rate_rps / recorded_rate_rps), p.rate_rps,
                              p.offered_rps, p.attainment, p.attainment_interval, p.passed, p.sustained,
                              p.goodput_rps, p.reason) for p in rate.points)
    return _in_factors(rate, points, recorded_rate_rps, trace or {})


def to_factor(rate_rps: float, points: Sequence[TracePoint], recorded: float) -> float:
    """A rate on the rate answer's axis (the OFFERED rate a rung's window saw) in speed factors. The part of the
    trace a rung measures can be lighter or heavier than the whole window (1.78 req/s offered at 1x against
    1.9 recorded), so dividing by the window's rate would say a lane that served 1x whole takes 0.94x: each
    rung is its own (offered, factor) point, a rate between two rungs is read on the line between them, and
    one beyond them at the nearest rung's offered rate per factor."""
    known = sorted({(p.offered_rps or p.rate_rps, p.speed_factor) for p in points if p.speed_factor > 0})
    if not known:
        return rate_rps / recorded
    for (o1, f1), (o2, f2) in itertools.pairwise(known):
        if o1 <= rate_rps <= o2:
            return f1 if o2 == o1 else f1 + (f2 - f1) * (rate_rps - o1) / (o2 - o1)
    offered, factor = known[0] if rate_rps < known[0][0] else known[-1]
    return rate_rps * factor / offered if offered > 0 else rate_rps / recorded


def _in_factors(rate: RateAnswer, points: tuple[TracePoint, ...], recorded: float,
                trace: Mapping[str, Any]) -> TraceAnswer:
    factor = None if rate.max_rate_rps is None else to_factor(rate.max_rate_rps, points, recorded)
    interval = None if rate.interval is None else (to_factor(rate.interval[0], points, recorded),
                                                   to_factor(rate.interval[1], points, recorded))
    reason = rate.reason
    if rate.status == "undecided":  # said in factors, and how a trace rung is measured longer
        if factor is not None and interval is not None:
            high = "no bound above" if interval[1] == math.inf else f"{interval[1]:.3g}"
            reason = (f"the factor's interval [{interval[0]:.3g}, {high}] x does not hold the answer within "
                      f"{TOLERANCE:.0%}: the trace rungs beside the crossing straddle the {rate.target:.0%} target, "
                      "pass against pass (raise loadgen.min_window_s for more passes a rung, or list factors "
                      "nearer the answer in trace.factors)")
        else:
            lowest = min((p.speed_factor for p in points if p.passed is not None), default=None)
            reason = (f"the lowest factor measured{'' if lowest is None else f', {lowest:.3g}x,'} straddled the "
                      f"{rate.target:.0%} target pass against pass: the answer lies near or below it (list lower "
                      "factors in trace.factors)")
    return TraceAnswer(rate.status, reason, factor, interval, recorded, rate.max_rate_rps, rate.binding,
                       rate.target, points, dict(trace), rate.notes)
