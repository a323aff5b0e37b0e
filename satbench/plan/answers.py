"""What a capacity plan may rest on: one lane's answer read at its conservative end, or why it may not be used.

A plan multiplies a node's answer by a node count, so an answer that is wrong by a tenth makes every node of the
plan wrong by a tenth. Each answer is therefore read at the end of its interval that promises least:

- **rate** (the rate answer, ``answer.rate_analysis``): the answer is where the attainment curve falls
  through the target; its ``interval`` is where the curves drawn through the rungs' attainment bounds fall
  through it, so its lower end is the least rate the crossing can be at the policy's confidence. A rung that
  *passed decided* (sustained, its attainment interval wholly at or above the target) is another lower bound
  on the crossing: attainment falls as the rate grows, so the crossing lies above a rate shown to pass. The
  plan takes the larger of the two lower bounds, never above the answer itself, and at that rung the least of
  the rate asked and the rate its schedule offered (a rung whose arrivals ran light proves only the lighter
  rate). Where both lower bounds are 0 (the lowest rung still straddled the target) no rate is promised and the
  lane is not used. An ``unsaturated`` answer (every rate measured passed) is a lower bound as it stands and is
  taken whole. The interval's upper end (finite, below the closed ladder's capacity) is where the answer
  says the lane fails: the plan reads one node fewer against it.
- **users** (the concurrency answer): the recommended concurrency, which the walk accepted with every check
  held; an ``undecided`` answer rests on a doubling whose gain straddled the policy's, and the plan takes the
  smaller side of that doubling. The next rung measured above the answer is where the walk stopped.

Not used, each listed with why: a lane a node lists without an answer, a stale one (its node changed, or the
recommender serves its last good document while its source is unreachable), one measured on something else
(validity ``changed``), one nobody compared with its live node (validity ``unknown``: used only when asked,
``unchecked``), one without a fingerprint (nodes like it cannot be told apart), and one without an answer of the
target's kind. A rate target is never read off a concurrency answer through Little's law: the closed rung at
the answer served ``c / W`` requests/s with every slot busy, a rate at which open arrivals queue without bound
(the engine's truth misses the target there: ``tests/plan``), so a lane without a rate answer is not used for
a rate plan and the reason says to plan it by users or to measure rates.

The node kind is what the fingerprint says decides capacity: the model (file hashes, else its path), the
runtime build, every server setting (slots, batch and micro-batch, context, KV layout, threads...) and the
hardware (the accelerator's name, count and memory, and the CPU, which serves what is not offloaded): the
fields the validity check compares, less the driver and the package (a rolling driver update would split
identical nodes). Not the digest, which also moves when a pending hash completes. Nodes with the same kind are
the identical nodes a plan counts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from satbench.answer.models import FingerprintModel, LaneModel, RecommendationsDocument
from satbench.answer.open_loop_models import RateModel
from satbench.recommender.capabilities import lane_place_of, unusable_why
from satbench.recommender.node_kind import kind_id, model_revision

__all__ = ["NodeAnswer", "Target", "Unusable", "node_kind", "read_answer"]

Target = Literal["rate", "users"]


@dataclass(frozen=True, slots=True)
class NodeAnswer:
    """One node's usable answer: ``per_node`` the conservative figure (requests/s or users), ``point`` the
    answer as stated, ``upper`` where the answer says the lane fails (None: nothing measured above it)."""

    key: str
    node: str
    lane: str
    kind: str
    kind_said: str
    slots: int | None
    concurrency: int | None
    per_node: float
    point: float
    upper: float | None
    basis: str
    status: str
    run_id: str
    measured_at: str | None
    age_s: float | None
    validity: str


@dataclass(frozen=True, slots=True)
class Unusable:
    key: str
    node: str
    lane: str
    why: str


def node_kind(fingerprint: FingerprintModel) -> tuple[str, str, int | None]:
    """``(kind id, kind in words, slots)`` of a lane's fingerprint (module docstring)."""
    settings = dict(fingerprint.settings or {})
    hardware = fingerprint.hardware_facts
    slots = settings.get("slots") if isinstance(settings.get("slots"), int) else None
    revision = model_revision(fingerprint.model)
    model = (str(revision[0])[:19] if isinstance(revision, list) else str(revision).rsplit("/", 1)[-1]) \
        if revision else "model unknown"
    words = [model, f"slots {slots}" if slots else "slots unknown"]
    if settings.get("batch") or settings.get("ubatch"):
        words.append(f"batch {settings.get('batch')}/{settings.get('ubatch')}")
    if hardware.gpu:
        words.append(f"{hardware.gpu_count or 1}x {hardware.gpu}")
    return kind_id(fingerprint), ", ".join(words), slots


def _age(lane: LaneModel, document: RecommendationsDocument, now: datetime | None) -> float | None:
    if lane.age_s is not None:
        return lane.age_s
    if document.age_s is not None:
        return document.age_s
    if now is None or not lane.measured_at:
        return None
    try:
        return max(0.0, (now - datetime.fromisoformat(lane.measured_at)).total_seconds())
    except (ValueError, TypeError):
        return None


def _rate_reading(rate: RateModel) -> tuple[float, float, float | None, str] | str:
    """``(conservative, point, upper, basis)`` of a rate answer, or why it promises no rate."""
    if rate.max_rate_rps is None or rate.status == "none":
        return f"its rate answer is {rate.status}: {rate.reason or 'no rate within the objectives'}"
    point = rate.max_rate_rps
    low = point if rate.status == "unsaturated" else (rate.interval[0] or 0.0) if rate.interval else 0.0
    proven = [min(p.rate_rps, p.offered_rps or p.rate_rps) for p in rate.curve
              if p.passed and p.sustained is not False and p.attainment_interval is not None
              and p.attainment_interval[0] >= rate.attainment_target]
    decided = max((r for r in proven if r <= point), default=0.0)
    conservative = min(point, max(low, decided))
    if conservative <= 0:
        return (f"its rate answer ({rate.status}, {point:.3g} requests/s) promises no rate: its interval reaches 0 "
                "and no rung passed decided (measure longer, or list lower rates)")
    upper = rate.interval[1] if rate.interval and rate.interval[1] is not None and math.isfinite(rate.interval[1]) \
        else None
    basis = ("the interval's lower end" if low >= decided else "the highest rung that passed decided")
    if conservative == point:
        basis = "the answer itself (a lower bound)" if rate.status == "unsaturated" else "the answer itself"
    return conservative, point, upper, basis


def _users_reading(lane: LaneModel) -> tuple[float, float, float | None, str]:
    answer = lane.recommended_concurrency
    assert answer is not None
    above = sorted(s.concurrency for s in lane.steps if s.concurrency > answer)
    upper = float(above[0]) if above else None
    if lane.status == "undecided" and lane.undecided is not None and lane.undecided.smaller < answer:
        return (float(lane.undecided.smaller), float(answer), upper,
                f"the smaller side of its undecided doubling {lane.undecided.smaller} -> {lane.undecided.larger}")
    return float(answer), float(answer), upper, "the recommended concurrency"


def _why_not(document: RecommendationsDocument, key: str, lane: LaneModel | None, target: Target,
             unchecked: bool) -> str | None:
    if lane is None:
        return unusable_why(document, key, lane)
    if lane.status == "stale" or document.stale:
        return f"stale: {lane.reason or 'the recommender serves its last good answer'}"
    state = "unknown" if lane.validity is None else lane.validity.state
    if state == "changed" or (target == "users" and lane.recommended_concurrency is None):
        return unusable_why(document, key, lane)
    if state == "unknown" and not unchecked:
        said = None if lane.validity is None else lane.validity.reason
        return (f"validity unknown ({said or 'never compared with its live node'}): --unchecked plans from it")
    if lane.fingerprint is None:
        return "no fingerprint: what it was measured on cannot be told, so nodes like it cannot be counted"
    if target == "rate" and lane.rate is None and lane.recommended_concurrency is None:
        return unusable_why(document, key, lane)
    if target == "rate" and lane.rate is None:
        return ("no rate answer (its run walked no open-loop rates); a concurrency answer is not turned into a rate "
                "(Little's law gives the rate with every slot busy, where open arrivals queue without bound): "
                "plan it with --users, or measure rates (satbench run --arrival poisson)")
    return None


def read_answer(document: RecommendationsDocument, key: str, lane: LaneModel | None, target: Target, *,
                unchecked: bool = False, now: datetime | None = None) -> NodeAnswer | Unusable:
    """Lane ``key``'s answer for ``target`` at its conservative end, or why the plan may not use it."""
    node, name = lane_place_of(document, key, lane)
    why = _why_not(document, key, lane, target, unchecked)
    if why is not None or lane is None or lane.fingerprint is None:
        return Unusable(key, node, name, why or "no answer")
    if target == "rate":
        assert lane.rate is not None
        reading = _rate_reading(lane.rate)
        if isinstance(reading, str):
            return Unusable(key, node, name, reading)
        status: str = lane.rate.status
    else:
        reading, status = _users_reading(lane), lane.status
    conservative, point, upper, basis = reading
    kind, said, slots = node_kind(lane.fingerprint)
    validity = "unknown" if lane.validity is None else lane.validity.state
    return NodeAnswer(key=key, node=node, lane=name, kind=kind, kind_said=said, slots=slots,
                      concurrency=lane.recommended_concurrency, per_node=conservative, point=point, upper=upper,
                      basis=basis + ("" if lane.partial is None else f"; from a run that did not finish: "
                                     f"{lane.partial}"), status=status, run_id=lane.run_id,
                      measured_at=lane.measured_at, age_s=_age(lane, document, now), validity=validity)
