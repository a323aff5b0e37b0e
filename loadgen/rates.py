"""The rate ladder and the rate search, as pure functions: which rate to measure next, given the rungs so far.

``next_rate(measured, arrival, capacity_rps)`` walks the listed ``arrival.rates``, else ``arrival.relative``
factors of the lane's closed-loop capacity (the most requests/s a closed rung served), in increasing order,
until a rate fails; past the top listed factor it keeps stepping by 1.25x while every rate passes, up to
``arrival.max_relative`` times the capacity. Once a passing rate sits below a failing one it bisects the
bracket (its midpoint), ``arrival.search_steps`` times, so the answer is known within ``bracket /
2**search_steps``. A lowest rate that fails is halved, twice at most, to find one that passes. An invalid
rung (the client fell behind its schedule) stops the ascent: the client cannot offer more.

A rung whose attainment interval still straddled the target at the window's limit is *undecided*
(``RateOutcome.decided`` False; ``passed`` is its point share's verdict, which steers the climb). Measuring
again between two such rungs teaches the answer nothing: its interval (``recommender.rate_analysis``) is
bounded by the highest rate that passed decidedly and the lowest that failed decidedly. So the bisection
narrows that bracket from its ends: the next rate halves the wider of the gaps between the decided pass and
the first rate above it and between the last rate below the decided fail and that fail (the whole bracket
where nothing lies inside), ``search_steps`` times; with every rung decided this is the plain bisection.

``judge(figures, arrival, capacity_rps)`` is the load generator's verdict on a finished rung
(``core.attainment.rate_verdict``: not above the closed ladder's capacity, the backlog not growing
significantly, at least ``arrival.target`` of the requests attaining every objective). The recommender judges
the same figures with the same function and its own policy (``recommender.rate_analysis``); the session hands
both the same objectives and target.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from satbench.core.attainment import rate_verdict, step_attainment, step_growth, step_steady
from satbench.core.figures import StepFigures
from satbench.loadgen.config import ArrivalConfig

__all__ = ["RateOutcome", "judge", "next_rate"]


@dataclass(frozen=True, slots=True)
class RateOutcome:
    rate: float
    passed: bool | None  # None: the rung could not be judged (invalid)
    decided: bool = True  # False: its interval straddled the target at the window's limit (passed: its point)


def judge(figures: StepFigures, arrival: ArrivalConfig, capacity_rps: float | None = None,
          confidence: float = 0.95) -> RateOutcome:
    """The load generator's verdict on one finished rate rung (``core.attainment.rate_verdict``, final)."""
    assert figures.rate_rps is not None
    if not figures.valid:
        return RateOutcome(figures.rate_rps, None)
    verdict = rate_verdict(figures.rate_rps, step_attainment(figures), step_growth(figures),
                           target=arrival.target, confidence=confidence, capacity_rps=capacity_rps, final=True,
                           steady=step_steady(figures))
    return RateOutcome(figures.rate_rps, None if verdict.verdict == "undecided" else verdict.verdict == "pass",
                       verdict.decided)


def _ladder(arrival: ArrivalConfig, capacity_rps: float | None) -> list[float]:
    if arrival.rates:
        return sorted(arrival.rates)
    if not capacity_rps or capacity_rps <= 0:
        return []
    factors = sorted(arrival.relative)
    top = factors[-1]
    while top * 1.25 <= arrival.max_relative + 1e-9:
        top *= 1.25
        factors.append(top)
    return [round(f * capacity_rps, 6) for f in factors]


def next_rate(measured: Sequence[RateOutcome], arrival: ArrivalConfig, capacity_rps: float | None, *,
              from_decided: bool = True) -> float | None:
    """The next rate to measure, or ``None`` when the search is over (module docstring); ``from_decided=False``:
    plain bisection between the point verdicts, undecided rungs or not (the trace factor search)."""
    done = {round(o.rate, 6) for o in measured}
    judged = sorted((o for o in measured if o.passed is not None), key=lambda o: o.rate)
    lowest_fail = min((o.rate for o in judged if not o.passed), default=None)
    invalid = min((o.rate for o in measured if o.passed is None), default=None)
    passed = [o.rate for o in judged if o.passed and (lowest_fail is None or o.rate < lowest_fail)]
    ladder = _ladder(arrival, capacity_rps)
    listed = {round(r, 6) for r in ladder}
    halvings = _halvings(measured)
    if lowest_fail is None and invalid is None:  # every rate so far passed: climb
        return next((r for r in ladder if round(r, 6) not in done), None)
    if not passed:  # nothing passed: halve the lowest, twice at most
        if lowest_fail is None or halvings >= 2:
            return None
        return round(min(o.rate for o in measured) / 2, 6)
    if lowest_fail is None:  # the ascent stopped at an invalid rung: the client cannot offer more
        return None
    bisections = sum(1 for o in measured if round(o.rate, 6) not in listed) - halvings
    if bisections >= arrival.search_steps:
        return None
    if not from_decided:
        mid = round((max(passed) + lowest_fail) / 2, 6)
        return None if mid in done else mid
    low, high = _edges(judged, max(passed), lowest_fail)
    between = sorted({o.rate for o in judged if low < o.rate < high})
    below, above = (between[0], between[-1]) if between else (high, low)
    mid = round((low + below) / 2, 6) if below / low >= high / above else round((above + high) / 2, 6)
    return None if mid in done else mid


def _edges(judged: Sequence[RateOutcome], passed: float, failed: float) -> tuple[float, float]:
    """The bracket the search narrows: the highest rate that passed *decidedly* below the lowest that failed
    decidedly (each, where none did, the one its point share passed or failed: module docstring)."""
    fails = [o.rate for o in judged if o.decided and not o.passed]
    high = min(fails, default=failed)
    passes = [o.rate for o in judged if o.decided and o.passed and o.rate < high]
    return max(passes, default=min(passed, high)), high


def _halvings(measured: Sequence[RateOutcome]) -> int:
    """How many measured rates halved the lowest rate measured before them."""
    count, lowest = 0, math.inf
    for o in measured:
        if lowest < math.inf and round(o.rate, 6) == round(lowest / 2, 6):
            count += 1
        lowest = min(lowest, o.rate)
    return count
