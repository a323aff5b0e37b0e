"""Per-step verdicts: may a step count at all, which of the policy's limits does it break, and how does it
stand on each judgment (``checks``)?

A step is *usable* when its window is marked valid, it holds at least ``min_requests_per_step`` finished
requests, and, where a throughput interval exists, its throughput is stable (interval half-width over mean
at most ``max_throughput_ci_ratio``). Every step whose window is valid is checked against every limit of
the policy, usable or not: a stall or an unfair share that happened is evidence even when the throughput
is too noisy to compare. Each broken limit is a ``Violation`` named after the ``binding_constraint`` it
would become.

The limits, their judges and their order are the registry's (``answer.checks``); the judgments themselves
are ``answer.judges``. ``check_step`` runs every judge of the registry in its order, states each judgment's
figure, unit and setting from the entry (the reading its judge named), keeps the first violation of each
constraint and orders them by binding order.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TypeVar

from satbench.answer.checks import REGISTRY, Entry, lists_of
from satbench.answer.judges import Check, LaneBasis, Violation
from satbench.answer.policy import Policy
from satbench.core.figures import MemoryFigures, StepFigures
from satbench.core.statistics import relative_half_width

__all__ = ["StepVerdict", "check_step"]

_Judged = TypeVar("_Judged", Check, Violation)


@dataclass(frozen=True, slots=True)
class StepVerdict:
    concurrency: int
    usable: bool
    unusable_reason: str | None
    violations: tuple[Violation, ...]
    checks: dict[str, Check] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.usable and not self.violations

    def constraint_names(self) -> list[str]:
        return [v.constraint for v in self.violations]


def _unusable_reason(step: StepFigures, policy: Policy) -> str | None:
    if not step.valid:
        return f"step marked invalid: {step.reason or 'no reason given'}"
    if step.requests < policy.min_requests_per_step:
        return f"{step.requests} requests in the window, policy needs {policy.min_requests_per_step}"
    ci = step.throughput_ci_tok_s
    if ci is not None:
        ratio = relative_half_width(ci, step.throughput_tok_s)
        if ratio > policy.max_throughput_ci_ratio:
            return (
                f"throughput not stable: interval half-width is {ratio:.0%} of the mean, "
                f"policy allows {policy.max_throughput_ci_ratio:.0%}"
            )
    return None


def _stated(judged: _Judged, entry: Entry) -> _Judged:
    """A judgment with the figure, unit and setting of the reading its judge named (its entry's first
    where it named none)."""
    said = entry.readings.get(judged.reading, entry.reading)
    return replace(judged, figure=said.figure, unit=said.unit, setting=said.setting)


def check_step(step: StepFigures, policy: Policy, baseline_step_s: float | None = None,
               lowest_memory: MemoryFigures | None = None, elasticity: float | None = None,
               registry: tuple[Entry, ...] = REGISTRY) -> StepVerdict:
    """The verdict on one step: usable or not (and why), every limit it breaks in binding order, and every
    check. ``baseline_step_s`` is the lane's decode step at its lowest rung, ``lowest_memory`` that rung's
    memory and ``elasticity`` its holds' shape over every rung, when measured (``LaneBasis``); ``registry``
    the limits judged (``answer.checks.REGISTRY``)."""
    reason = _unusable_reason(step, policy)
    if not step.valid:
        return StepVerdict(step.concurrency, False, reason, ())
    lane = LaneBasis(baseline_step_s, lowest_memory, elasticity)
    found: dict[str, Violation] = {}
    checks: dict[str, Check] = {}
    for entry in registry:
        judged = None if entry.judge is None else entry.judge(step, policy, lane)
        if isinstance(judged, Check):
            checks[entry.name] = check = _stated(judged, entry)
            if check.status == "flagged" and check.measured is not None and check.limit is not None:
                judged = Violation(entry.binds_as, check.measured, check.limit, check.detail, check.reading)
        if isinstance(judged, Violation) and judged.constraint not in found:
            found[judged.constraint] = _stated(judged, entry)
    ordered = tuple(found[name] for name in lists_of(registry).violation_order if name in found)
    return StepVerdict(step.concurrency, reason is None, reason, ordered, checks)
