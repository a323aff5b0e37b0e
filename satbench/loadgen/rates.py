"""The rate ladder and the rate search, as pure functions: which rate to measure next, given the rungs so far.

``next_rate(measured, arrival, capacity_rps)`` walks the listed ``arrival.rates``, else ``arrival.relative``
factors of the lane's closed-loop capacity (the most requests/s a closed rung served), in increasing order,
until a rate fails; past the top listed factor it keeps stepping by 1.25x while every rate passes, up to
``arrival.max_relative`` times the capacity. Once a passing rate sits below a failing one it bisects the
bracket (its midpoint), ``arrival.search_steps`` times, so the answer is known within ``bracket /
2**search_steps``. A lowest rate that fails is halved, twice at most, to find one that passes. An invalid
rung (the client fell behind its schedule) stops the ascent: the client cannot offer more.

A rate the search computes (a relative rung, a halving, a midpoint) is kept to ``RATE_DECIMALS`` decimals
(``rate_key``), a listed one as listed, and a rung measured is known by the same key, so a rung is never asked
for twice because its rate came back a rounding away. Every search ends: it measures at most ``rung_bound``
rungs (every rung of its ladder, two halvings and ``search_steps`` bisections, the most an honest walk needs),
whatever its outcomes say, and ``search_end`` says why it ended: decided, a lower bound, none, or
``undecided`` at the bound with its reason.

A rung whose attainment interval still straddled the target at the window's limit is *undecided*
(``RateOutcome.decided`` False; ``passed`` is its point share's verdict, which steers the climb). Measuring
again between two such rungs teaches the answer nothing: its interval (``answer.rate_analysis``) is
bounded by the highest rate that passed decidedly and the lowest that failed decidedly. So the bisection
narrows that bracket from its ends: the next rate halves the wider of the gaps between the decided pass and
the first rate above it and between the last rate below the decided fail and that fail (the whole bracket
where nothing lies inside), ``search_steps`` times; with every rung decided this is the plain bisection. A
search that ``narrow``s (the trace factor search, whose answer is settled only where its interval holds it
within ``answer.rate_analysis.TOLERANCE``) bisects on, up to ``search_steps`` times more, while that decided
bracket's ends are more than the given ratio apart.

``judge(figures, arrival, capacity_rps)`` is the load generator's verdict on a finished rung
(``core.attainment.rate_verdict``: not above the closed ladder's capacity, the backlog not growing
significantly, at least ``arrival.target`` of the requests attaining every objective). The recommender judges
the same figures with the same function and its own policy (``answer.rate_analysis``); the session hands
both the same objectives and target.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from satbench.core.attainment import rate_verdict, step_attainment, step_confidence, step_growth, step_steady
from satbench.core.figures import StepFigures
from satbench.loadgen.config import ArrivalConfig

__all__ = ["RATE_DECIMALS", "RateOutcome", "factor_label", "judge", "next_rate", "rate_key", "rung_bound",
           "search_end"]

RATE_DECIMALS = 6  # a rate (or a trace's speed factor) the search names, and the key a measured rung is known by
HALVINGS = 2  # a failing bottom is halved at most this often


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
    verdict = rate_verdict(figures.rate_rps, step_attainment(figures), step_growth(figures), target=arrival.target,
                           confidence=step_confidence(figures, confidence), capacity_rps=capacity_rps, final=True,
                           steady=step_steady(figures))
    return RateOutcome(figures.rate_rps, None if verdict.verdict == "undecided" else verdict.verdict == "pass",
                       verdict.decided)


def rate_key(rate: float) -> float:
    """The rate the search names, and the key a measured rung is known by: ``RATE_DECIMALS`` decimals."""
    return round(rate, RATE_DECIMALS)


def factor_label(factor: float) -> str:
    """A speed factor (a rate's multiple) as listed: ``0.5x``, ``1x``, ``9.765625x``: every digit the search
    keeps, none a rounding adds."""
    return f"{factor:.{RATE_DECIMALS + 4}g}x"


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
    return [rate_key(f * capacity_rps) for f in factors]


def rung_bound(arrival: ArrivalConfig, capacity_rps: float | None, narrow: float | None = None) -> int:
    """The most rungs one search measures (module docstring): its ladder's, ``HALVINGS`` and ``search_steps``
    (twice that where it ``narrow``s)."""
    return len(_ladder(arrival, capacity_rps)) + HALVINGS + _most_bisections(arrival, narrow)


def _most_bisections(arrival: ArrivalConfig, narrow: float | None) -> int:
    """``search_steps``, twice that for a search that ``narrow``s."""
    return arrival.search_steps * (1 if narrow is None else 2)


def next_rate(measured: Sequence[RateOutcome], arrival: ArrivalConfig, capacity_rps: float | None, *,
              narrow: float | None = None) -> float | None:
    """The next rate to measure, or ``None`` when the search is over (module docstring); ``narrow``: bisect on
    past ``search_steps``, as many times again at most, while the decided bracket's ends are more than that
    ratio apart (the trace factor search)."""
    return _step(measured, arrival, capacity_rps, narrow=narrow)[0]


def search_end(measured: Sequence[RateOutcome], arrival: ArrivalConfig, capacity_rps: float | None,
               unit: str = "requests/s", *, narrow: float | None = None) -> str | None:
    """Why the search is over, ``None`` while it goes on; one that reached ``rung_bound`` without its answer
    says ``undecided`` and why. ``unit`` names the rates (a trace's factor search: ``x``)."""
    rate, why = _step(measured, arrival, capacity_rps, unit, narrow=narrow)
    return None if rate is not None else why


def _step(measured: Sequence[RateOutcome], arrival: ArrivalConfig, capacity_rps: float | None,
          unit: str = "requests/s", *, narrow: float | None = None) -> tuple[float | None, str]:
    """The next rate (``None``: over) and why the search stands where it does."""
    rate, why = _next(measured, arrival, capacity_rps, unit, narrow)
    bound = rung_bound(arrival, capacity_rps, narrow)
    if rate is not None and len(measured) >= bound:
        steps = _most_bisections(arrival, narrow)
        return None, (f"undecided: the search measured {len(measured)} rungs, its bound ({bound}: the ladder's "
                      f"{bound - HALVINGS - steps}, {HALVINGS} halvings, {steps} bisections), and would still "
                      f"measure {_said(rate, unit)}: its outcomes do not close a bracket")
    return rate, why


def _next(measured: Sequence[RateOutcome], arrival: ArrivalConfig, capacity_rps: float | None,
          unit: str, narrow: float | None = None) -> tuple[float | None, str]:
    done = {rate_key(o.rate) for o in measured}
    judged = sorted((o for o in measured if o.passed is not None), key=lambda o: o.rate)
    lowest_fail = min((o.rate for o in judged if not o.passed), default=None)
    invalid = min((o.rate for o in measured if o.passed is None), default=None)
    passed = [o.rate for o in judged if o.passed and (lowest_fail is None or o.rate < lowest_fail)]
    ladder = _ladder(arrival, capacity_rps)
    if not ladder and not measured:
        return None, "no rate to measure: no rates listed and no capacity to scale"
    listed = {rate_key(r) for r in ladder}
    halvings = _halvings(measured)
    if lowest_fail is None and invalid is None:  # every rate so far passed: climb
        rate = next((r for r in ladder if rate_key(r) not in done), None)
        top = _said(max(ladder, default=None), unit)
        return rate, f"every rate passed, up to the ladder's top {top}: a lower bound"
    if not passed:  # nothing passed: halve the lowest, twice at most
        if lowest_fail is None:
            return None, f"the lowest rung ({_said(invalid, unit)}) could not be judged: no answer"
        if halvings >= HALVINGS:
            return None, (f"none passed: the lowest rate failed, halved {HALVINGS} times down to "
                          f"{_said(lowest_fail, unit)}")
        return rate_key(min(o.rate for o in measured) / 2), "halving a failing bottom"
    if lowest_fail is None:  # the ascent stopped at an invalid rung: the client cannot offer more
        return None, f"a rung at {_said(invalid, unit)} could not be judged (the client fell behind): a lower bound"
    bracket = f"between {_said(max(passed), unit)} (passed) and {_said(lowest_fail, unit)} (failed)"
    bisections = sum(1 for o in measured if rate_key(o.rate) not in listed) - halvings
    narrowed = narrow is None or _ratio(judged, passed, lowest_fail) <= narrow
    if bisections >= _most_bisections(arrival, narrow) or (bisections >= arrival.search_steps and narrowed):
        return None, f"decided {bracket} after {bisections} bisections"
    low, high = _edges(judged, max(passed), lowest_fail)
    between = sorted({o.rate for o in judged if low < o.rate < high})
    below, above = (between[0], between[-1]) if between else (high, low)
    mid = rate_key((low + below) / 2) if below / low >= high / above else rate_key((above + high) / 2)
    return (None, f"decided {bracket}: its midpoint was measured already") if mid in done else (mid, "bisecting")


def _said(rate: float | None, unit: str) -> str:
    if rate is None:
        return "none"
    return factor_label(rate) if unit == "x" else f"{rate:.{RATE_DECIMALS + 4}g} {unit}"


def _ratio(judged: Sequence[RateOutcome], passed: Sequence[float], failed: float) -> float:
    """How far apart the decided bracket's ends are (``_edges``), as a ratio."""
    low, high = _edges(judged, max(passed), failed)
    return high / low if low > 0 else math.inf


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
        if lowest < math.inf and rate_key(o.rate) == rate_key(lowest / 2):
            count += 1
        lowest = min(lowest, o.rate)
    return count
