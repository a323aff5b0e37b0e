"""Per-step verdicts: may a step count at all, and which of the policy's limits does it break?

A step is *usable* when its window is marked valid, it holds at least ``min_requests_per_step`` finished
requests, and, where a batch-means interval exists, its throughput is stable (interval half-width over mean
at most ``max_throughput_ci_ratio``). Every step whose window is valid is checked against every limit of
the policy, usable or not: a stall or an unfair share that happened is evidence even when the throughput
is too noisy to compare (a starving batcher makes it so). Each broken limit is a ``Violation`` named after
the ``binding_constraint`` it would become. A figure the source
could not measure (``None``) is not checked: the absence of evidence is reported, not guessed.

Fairness helpers: Jain's index ``(sum x)^2 / (n * sum x^2)`` over per-user output tokens is 1 when every
user got the same and ``1/n`` when one user got everything; the max/min share is best over worst user.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.figures import StepFigures
from core.statistics import relative_half_width
from recommender.policy import Policy

__all__ = [
    "CONSTRAINTS",
    "VIOLATION_ORDER",
    "StepVerdict",
    "Violation",
    "check_step",
    "memory_headroom_ratio",
]

CONSTRAINTS: tuple[str, ...] = (
    "throughput_plateau",
    "slo_ttft",
    "slo_itl",
    "slo_e2e",
    "fairness",
    "decode_starvation",
    "prefill_starvation",
    "errors",
    "memory",
    "ladder_top",
)
# When a rung breaks several limits, the first in this order is named as the binding constraint.
VIOLATION_ORDER: tuple[str, ...] = (
    "errors",
    "memory",
    "slo_ttft",
    "slo_itl",
    "slo_e2e",
    "decode_starvation",
    "prefill_starvation",
    "fairness",
)


@dataclass(frozen=True, slots=True)
class Violation:
    constraint: str
    measured: float
    limit: float
    detail: str


@dataclass(frozen=True, slots=True)
class StepVerdict:
    concurrency: int
    usable: bool
    unusable_reason: str | None
    violations: tuple[Violation, ...]

    @property
    def ok(self) -> bool:
        return self.usable and not self.violations

    def constraint_names(self) -> list[str]:
        return [v.constraint for v in self.violations]


def memory_headroom_ratio(step: StepFigures) -> float | None:
    mem = step.memory_bytes
    if mem.gpu_max is None or not mem.gpu_total:
        return None
    return 1.0 - mem.gpu_max / mem.gpu_total


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


def _above(constraint: str, measured: float | None, limit: float | None, what: str) -> Violation | None:
    if measured is None or limit is None or not measured > limit:
        return None
    return Violation(constraint, float(measured), float(limit), f"{what} {measured:.4g} > {limit:.4g}")


def check_step(step: StepFigures, policy: Policy) -> StepVerdict:
    """The verdict on one step: usable or not (and why), and every limit it breaks, in binding order."""
    reason = _unusable_reason(step, policy)
    if not step.valid:
        return StepVerdict(step.concurrency, False, reason, ())
    found: dict[str, Violation] = {}

    def add(v: Violation | None) -> None:
        if v is not None and v.constraint not in found:
            found[v.constraint] = v

    add(_above("errors", step.error_ratio, policy.max_error_ratio, "error ratio"))
    headroom = memory_headroom_ratio(step)
    if headroom is not None and headroom < policy.memory_headroom_min_ratio:
        add(Violation("memory", headroom, policy.memory_headroom_min_ratio,
                      f"GPU memory headroom {headroom:.2%} < {policy.memory_headroom_min_ratio:.2%}"))
    add(_above("slo_ttft", step.ttft_s.p95, policy.slo.ttft_p95_s, "TTFT p95 (s)"))
    add(_above("slo_itl", step.itl_s.p95, policy.slo.itl_p95_s, "ITL p95 (s)"))
    add(_above("slo_e2e", step.latency_s.p95, policy.slo.e2e_p95_s, "e2e p95 (s)"))
    add(_above("decode_starvation", step.decode_stall_max_ratio, policy.decode_stall_max_ratio,
               "longest decode stall / ITL p50"))
    add(_above("prefill_starvation", step.prefill_wait_max_s, policy.prefill_wait_max_s,
               "longest wait for a first token (s)"))
    if step.jain is not None and step.jain < policy.jain_min:
        detail = f"Jain's index {step.jain:.3f} < {policy.jain_min}"
        add(Violation("fairness", step.jain, policy.jain_min, detail))
    add(_above("fairness", step.max_min_share, policy.max_min_share_max, "max/min user share"))
    add(_above("fairness", step.queue_s.p99, policy.queue_p99_max_s, "queue wait p99 (s)"))
    ordered = tuple(found[name] for name in VIOLATION_ORDER if name in found)
    return StepVerdict(step.concurrency, reason is None, reason, ordered)
