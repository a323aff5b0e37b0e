"""Per-step verdicts: may a step count at all, which of the policy's limits does it break, and how does it
stand on each judgment (``checks``)?

A step is *usable* when its window is marked valid, it holds at least ``min_requests_per_step`` finished
requests, and, where a throughput interval exists, its throughput is stable (interval half-width over mean
at most ``max_throughput_ci_ratio``). Every step whose window is valid is checked against every limit of
the policy, usable or not: a stall or an unfair share that happened is evidence even when the throughput
is too noisy to compare. Each broken limit is a ``Violation`` named after the ``binding_constraint`` it
would become.

The judgments (definitions of the figures in ``core.step_figures``; the reasons in DESIGN.md):

- ``decode_starvation``: the p99 over requests of each request's longest pause against the lane's
  time-between-tokens objective (``slo.tbt_p99_s``); its ratio to the lane's decode-only iteration (the
  ITL p50 at c=1, Sarathi-Serve's yardstick) is reported and binds only where ``max_pause_ratio`` is set.
- ``prefill_starvation``: the longest wait of a request that found every slot busy against the bound
  FIFO admission implies, times ``max_admission_wait_ratio``.
- ``fairness``: users' waits differ *significantly* (Kruskal-Wallis, ``fairness_alpha``) *and materially*
  (worst user's mean over the lane's, ``max_user_wait_ratio``), or their decode pace does (slowest user's
  mean over the fastest's, ``max_user_itl_ratio``); Jain's index and the best/worst share
  bind only where the policy sets them.
- ``interference``: the share of decode time lost to others' prefills, warned about above
  ``interference_warn_share``, binding only where ``max_interference_share`` is set.

Each check has a status: ``ok``, ``flagged`` (binding: a violation), ``warn`` (reported, not binding),
``not_applicable`` (c=1 has no other request; a rung where every user has a slot queues nobody),
``insufficient_data`` (the counts say how much was missing) or ``unknown`` (the source did not measure the
figure, as the Prometheus histograms fallback does not). Never "unknown" where a figure can be computed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from core.figures import StepFigures
from core.statistics import relative_half_width
from recommender.policy import Policy

__all__ = [
    "CHECKS",
    "CONSTRAINTS",
    "VIOLATION_ORDER",
    "Check",
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
class Check:
    """Where one step stands on one judgment (module docstring)."""

    status: str
    measured: float | None = None
    limit: float | None = None
    detail: str = ""

    def to_dict(self) -> dict[str, object]:
        return {"status": self.status, "measured": self.measured, "limit": self.limit, "detail": self.detail}


# each check and the binding constraint its flag becomes (interference, where the policy bounds it, starves
# decodes)
CHECKS = {"decode_starvation": "decode_starvation", "prefill_starvation": "prefill_starvation",
          "fairness": "fairness", "interference": "decode_starvation"}


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


def decode_check(step: StepFigures, policy: Policy, baseline_itl_s: float | None) -> Check:
    """Decode starvation: pauses against the time-between-tokens objective (module docstring)."""
    if step.concurrency < 2:
        return Check("not_applicable", detail="one user: no other request's prefill can pause a decode")
    p99, n, events = step.pause_s.p99, step.pause_requests, step.prefill_events
    if p99 is None or n is None or events is None:
        return Check("unknown", detail="this source did not measure per-request pauses")
    limit = policy.slo.tbt_p99_s
    if n < policy.min_pause_requests:
        return Check("insufficient_data", p99, limit,
                     f"{n} requests with a pause (policy needs {policy.min_pause_requests})")
    ratio = p99 / baseline_itl_s if baseline_itl_s else None
    said = f"pause p99 {p99 * 1000:.0f} ms over {n} requests, {events} prefills beside a decode"
    if ratio is not None and baseline_itl_s:
        said += f", {ratio:.1f}x the decode-only step ({baseline_itl_s * 1000:.1f} ms at c=1)"
    # a pause past the objective is felt whatever caused it; an absence of pauses proves something only
    # where prefills ran beside decodes
    if limit is not None and p99 > limit:
        return Check("flagged", p99, limit, f"{said} > objective {limit * 1000:.0f} ms")
    if ratio is not None and policy.max_pause_ratio is not None and ratio > policy.max_pause_ratio:
        return Check("flagged", ratio, policy.max_pause_ratio,
                     f"{said}: ratio > policy.max_pause_ratio {policy.max_pause_ratio:g}")
    if events < policy.min_prefill_events:
        return Check("insufficient_data", p99, limit,
                     f"{said}: too few prefills beside a decode to show the pauses bounded (policy needs "
                     f"{policy.min_prefill_events})")
    bound = "" if limit is None else f" <= objective {limit * 1000:.0f} ms"
    return Check("ok", p99, limit, said + bound)


def interference_check(step: StepFigures, policy: Policy) -> Check:
    """Prefill interference: share of decode time lost to others' prefills; warned, binding if set."""
    if step.concurrency < 2:
        return Check("not_applicable", detail="one user: no other request's prefill")
    share, events = step.interference_share, step.prefill_events
    if events is None:
        return Check("unknown", detail="this source did not measure prefill interference")
    if share is None:
        return Check("insufficient_data", detail=f"{events} prefills beside a decode")
    per = step.stall_per_prompt_s
    said = (f"{share:.1%} of decode time lost to {events} prefills"
            + ("" if per is None else f", {per * 1000:.0f} ms per stalled step")
            + ("" if step.stall_ms_per_prompt_token is None
               else f" ({step.stall_ms_per_prompt_token:.3f} ms per prompt token)"))
    bound = policy.max_interference_share
    if bound is not None and share > bound:
        return Check("flagged", share, bound, f"{said} > policy.max_interference_share {bound:.0%}")
    if share > policy.interference_warn_share:
        return Check("warn", share, policy.interference_warn_share,
                     f"{said} > policy.interference_warn_share {policy.interference_warn_share:.0%}")
    return Check("ok", share, bound, said)


def prefill_check(step: StepFigures, policy: Policy) -> Check:
    """Prefill starvation: a queued request's wait against the FIFO bound (module docstring)."""
    absolute = policy.prefill_wait_max_s
    if absolute is not None and step.prefill_wait_max_s is not None and step.prefill_wait_max_s > absolute:
        return Check("flagged", step.prefill_wait_max_s, absolute,
                     f"longest wait for a first token {step.prefill_wait_max_s:.3g} s > "
                     f"policy.prefill_wait_max_s {absolute:g} s")
    queued, wait, bound = step.queued_requests, step.admission_wait_max_s, step.admission_wait_bound_s
    if queued is None or bound is None:
        why = ("one user" if step.concurrency < 2 else
               "every user has a slot (c <= slots) or the runtime did not say its slots")
        return Check("not_applicable", detail=f"{why}: no request waits for admission")
    if queued < policy.min_queued_requests or wait is None:
        return Check("insufficient_data", wait, bound,
                     f"{queued} queued requests (policy needs {policy.min_queued_requests})")
    limit = bound * policy.max_admission_wait_ratio
    said = (f"longest wait of {queued} queued requests {wait:.3g} s, FIFO admission bound {bound:.3g} s "
            f"(x{policy.max_admission_wait_ratio:g} = {limit:.3g} s)")
    return Check("flagged" if wait > limit else "ok", wait, limit, said)


def fairness_check(step: StepFigures, policy: Policy) -> Check:
    """Fairness: users' waits differ significantly and materially; Jain / share where the policy sets them."""
    if step.jain is not None and policy.jain_min is not None and step.jain < policy.jain_min:
        return Check("flagged", step.jain, policy.jain_min, f"Jain's index {step.jain:.3f} < policy.jain_min "
                                                            f"{policy.jain_min}")
    share = step.max_min_share
    if share is not None and policy.max_min_share_max is not None and share > policy.max_min_share_max:
        return Check("flagged", share, policy.max_min_share_max, f"max/min user share {share:.3g} > "
                                                                 f"{policy.max_min_share_max:g}")
    q99 = step.queue_s.p99
    if q99 is not None and policy.queue_p99_max_s is not None and q99 > policy.queue_p99_max_s:
        return Check("flagged", q99, policy.queue_p99_max_s, f"queue wait p99 (s) {q99:.4g} > "
                                                             f"{policy.queue_p99_max_s:.4g}")
    if step.concurrency < 2:
        return Check("not_applicable", detail="one user")
    # (p-value, ratio, its bound, the difference in seconds, its floor, words)
    tests = [(step.user_wait_p_value, step.user_wait_ratio, policy.max_user_wait_ratio,
              step.user_wait_excess_s, policy.min_user_wait_gap_s,
              "worst user's mean wait {r:.2f}x the lane's mean (p = {p:.2g} that users wait alike)"),
             (step.user_itl_p_value, step.user_itl_ratio, policy.max_user_itl_ratio,
              step.user_itl_excess_s, policy.min_user_itl_gap_s,
              "slowest user's decode pace (median gap) {r:.2f}x the fastest's (p = {p:.2g})")]
    jain = "" if step.jain is None else f"; Jain's index {step.jain:.3f}"
    known = [(p, r, bound, gap, floor, text.format(r=r, p=p)) for p, r, bound, gap, floor, text in tests
             if p is not None and r is not None]
    if not known:
        if step.pause_requests is None:  # the source measured no per-request figures at all
            return Check("unknown", step.jain, None, f"users' waits not measured by this source{jain}")
        return Check("insufficient_data",
                     detail=f"fewer than two users with a queued wait or a decode pace in the window{jain}")
    said = "; ".join(text for *_, text in known) + jain
    for p, r, bound, gap, floor, _ in known:
        if p < policy.fairness_alpha and r > bound and (gap is None or gap >= floor):
            return Check("flagged", r, bound,
                         f"{said}: significant (< {policy.fairness_alpha:g}), beyond {bound:g}x"
                         + ("" if gap is None else f" and {gap * 1000:.0f} ms apart"))
    p, r, bound, *_ = known[0]
    return Check("ok", r, bound, said)


def check_step(step: StepFigures, policy: Policy, baseline_itl_s: float | None = None) -> StepVerdict:
    """The verdict on one step: usable or not (and why), every limit it breaks in binding order, and every
    check. ``baseline_itl_s`` is the lane's decode-only iteration (ITL p50 at c=1), when measured."""
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
    checks = {
        "decode_starvation": decode_check(step, policy, baseline_itl_s),
        "prefill_starvation": prefill_check(step, policy),
        "fairness": fairness_check(step, policy),
        "interference": interference_check(step, policy),
    }
    for name, constraint in CHECKS.items():
        check = checks[name]
        if check.status == "flagged" and check.measured is not None and check.limit is not None:
            add(Violation(constraint, check.measured, check.limit, check.detail))
    ordered = tuple(found[name] for name in VIOLATION_ORDER if name in found)
    return StepVerdict(step.concurrency, reason is None, reason, ordered, checks)
