"""The per-request objectives: how one rung stands on TTFT, TPOT and e2e p95 and the error ratio
(``answer.judges`` has the other limits and the types a judge returns; the ITL objective is ``answer.itl_judge``).

SLO objectives on per-request quantiles (TTFT p95, e2e p95) are judged like the pause: broken when
significantly more requests than the quantile's share exceed the objective (``core.figures.Tail``), or, where
more requests exceed than the figures keep, by the quantile itself; ITL p95 by its interval over the rung's
gaps, batched over time (they come in clumps: one engine step lengthens every stream's gap at once), broken where
it lies wholly above the objective, open (the answer it touches undecided) where it straddles it (``answer.itl_judge``),
and by its value where the figures carry no interval. Where the TTFT deadline grows with the prompt
(``slo.ttft_per_1k_prompt_s``), each request is judged against its own deadline (``core.objectives``, the one
definition goodput, the looks and the rate and trace
answers use) and the count past it against the 5 % a p95 allows, by the same test.

Where more than the 5 % a p95 allows missed the TTFT objective but too few to show it, the objective is neither
broken nor shown met (``ttft_open``), and the point picks the side (``ttft_past``): the walk ends below such a
rung (``answer.analysis``), as for the ITL objective and decode starvation (DESIGN.md, the quantile objectives).
"""

from __future__ import annotations

from satbench.answer.judges import LaneBasis, Violation, above_limit, quantile_exceeds
from satbench.answer.policy import Policy
from satbench.core.figures import StepFigures, Tail
from satbench.core.statistics import exceedance_p_value, tail_share

__all__ = ["TTFT_CONSTRAINT", "e2e_limit", "error_limit", "late_share_bound", "tpot_limit", "ttft_limit", "ttft_open",
           "ttft_past"]

TTFT_CONSTRAINT = "slo_ttft"  # what the TTFT objective binds as (answer.checks), where the walk names it itself


def _slo(constraint: str, what: str, tail: Tail, point: float | None, limit: float | None, q: float,
         alpha: float) -> Violation | None:
    """A per-request quantile objective (TTFT p95, e2e p95): by the count test where the figures keep a tail,
    else by the quantile's value (module docstring)."""
    if point is None or limit is None:
        return None
    if not tail.n:
        return above_limit(constraint, point, limit, what)
    broken, said = quantile_exceeds(tail, point, limit, q, alpha)
    if not broken:
        return None
    return Violation(constraint, float(point), float(limit), f"{what} {point:.4g} > {limit:.4g}: {said}")


def _missed(step: StepFigures, objective: str, judged: int, alpha: float) -> tuple[int, float] | None:
    """A per-request p95 objective judged by the misses goodput counted (``objective_misses[objective]`` of the
    ``judged`` requests): ``(misses, p)`` where significantly more than the 5 % a p95 allows missed it (the
    binomial count test at ``alpha``), else ``None``."""
    k = min(step.objective_misses.get(objective, 0), judged)
    p = exceedance_p_value(k, judged, 0.95)
    return (k, p) if p < alpha else None


def ttft_limit(step: StepFigures, policy: Policy, lane: LaneBasis) -> Violation | None:
    """The TTFT objective (module docstring). One deadline (``slo.ttft_per_1k_prompt_s`` 0): its p95 against
    ``slo.ttft_p95_s`` (``_slo``). Deadlines that grow with the prompt (``core.objectives.Objectives.
    ttft_deadline_s``) have no one figure for a p95 to hold: the objective is broken when significantly more
    than 5 % of the requests (what a p95 allows) were past their own deadline, the count goodput keeps
    (``objective_misses``). Figures without that count (a source that judged no objectives) are judged
    against ``slo.ttft_p95_s`` alone, every deadline at its shortest: stricter, said as such. Judged past
    their own deadlines, the ``reading`` is ``own_deadline``."""
    alpha = 1 - policy.confidence
    slo = policy.slo
    base = slo.ttft_p95_s
    if not slo.ttft_per_1k_prompt_s or base is None:
        return _slo(TTFT_CONSTRAINT, "TTFT p95 (s)", step.ttft_tail, step.ttft_s.p95, base, 0.95, alpha)
    judged = step.judged_requests
    rule = f"{base:g} s + {slo.ttft_per_1k_prompt_s:g} s per 1,000 prompt tokens"
    if judged is None:
        found = _slo(TTFT_CONSTRAINT, "TTFT p95 (s)", step.ttft_tail, step.ttft_s.p95, base, 0.95, alpha)
        return None if found is None else Violation(
            found.constraint, found.measured, found.limit,
            f"{found.detail}; the figures count no request against its own deadline ({rule}): judged against "
            f"ttft_p95_s alone, every deadline at its shortest")
    missed = _missed(step, "ttft", judged, alpha)
    if missed is None:
        return None
    k, p = missed
    share = k / judged if judged else 0.0
    return Violation(TTFT_CONSTRAINT, share, 0.05,
                     f"{k} of {judged} requests past their own TTFT deadline ({rule}): {share:.1%} > the 5 % a "
                     f"p95 allows (p = {p:.2g})", reading="own_deadline")


def _ttft_misses(step: StepFigures, policy: Policy) -> tuple[int, int, Tail | None, str] | None:
    """The rung's requests judged against the TTFT objective as ``ttft_limit`` reads them: ``(n, misses, the
    tail to bound the share past it from or None, what a miss is)``; ``None`` where there is no objective or no
    request."""
    slo = policy.slo
    if slo.ttft_p95_s is None:
        return None
    if slo.ttft_per_1k_prompt_s and step.judged_requests is not None:  # each request its own deadline
        n = step.judged_requests
        found: tuple[int, int, Tail | None, str] = (n, min(step.objective_misses.get("ttft", 0), n), None,
                                                    "past their own TTFT deadline")
    else:
        k, _ = step.ttft_tail.above(slo.ttft_p95_s)
        found = (step.ttft_tail.n, k, step.ttft_tail, f"over the TTFT objective {slo.ttft_p95_s:g} s")
    return found if found[0] else None


def late_share_bound(tail: Tail, objective_s: float, confidence: float) -> float:
    """The share of a rung's requests past one TTFT objective ``objective_s``, bounded at ``confidence`` from its
    longest TTFTs (``core.statistics.tail_share``): what ``ttft_open`` reads, and the datasheet scores."""
    return tail_share(tail.top, tail.n, objective_s, confidence)


def ttft_open(step: StepFigures, policy: Policy) -> str | None:
    """Why the TTFT objective is not shown met at this rung: more than the 5 % a p95 allows missed it but too
    few to show it is more than chance (``ttft_limit`` breaks it only where they are significantly more), or
    fewer missed it but the rung's longest TTFTs reach so near the objective that the share past it may be
    more than 5 % (``core.statistics.tail_share``'s bound at the policy's confidence, as decode starvation's
    ``ok`` needs its pauses to show at most 1 %): a TTFT is a wait for a slot, and in a closed loop the waits of
    a rung at its slots' edge come and go with the answers running, so 2 of 60 past it in one window says little
    of the 11 % a longer run finds (the datasheet's draw 1:69). As decode starvation's ``insufficient_data``, a
    rung the answer rests on is then not settled. ``None`` where the share missing is shown within 5 % or the
    objective is broken. Deadlines that grow with the prompt: the count alone speaks."""
    found = _ttft_misses(step, policy)
    if found is None:
        return None
    n, k, tail, what = found
    if k <= 0.05 * n:
        bound = 0.0 if tail is None else late_share_bound(tail, policy.slo.ttft_p95_s or 0.0, policy.confidence)
        if bound <= 0.05:
            return None
        return (f"{k} of {n} requests {what}, but the tail of the TTFTs allows up to {bound:.1%} past it "
                f"({policy.confidence:.0%} bound): too few to show at most the 5 % a p95 allows")
    p = exceedance_p_value(k, n, 0.95)
    if p < 1 - policy.confidence:
        return None
    return (f"{k} of {n} requests {what} ({k / n:.1%}, more than the 5 % a p95 allows, p = {p:.2g}): too few to "
            f"show it is more than chance")


def ttft_past(step: StepFigures, policy: Policy) -> str | None:
    """Why the rung's share past the TTFT objective points past the 5 % a p95 allows without being shown so
    (``ttft_open``'s words), ``None`` where it does not. As the ITL objective's ``itl_past`` and decode
    starvation's ``starvation_stops``, the point picks the side and the doubt makes the answer undecided: the
    walk ends below such a rung (the answer at most one doubling low) rather than accepting it on the benefit of
    the doubt, which had answered a rung the long run breaks with every rung below it in the same doubt (the
    datasheet's draw 1:171: 2 of 14 then 4 of 34 past the objective, each not significant, answered c=2 where
    the long run lets 12 % miss it at c=1). ``None`` where it is broken or points within."""
    found = _ttft_misses(step, policy)
    if found is None or found[1] <= 0.05 * found[0]:
        return None
    return ttft_open(step, policy)


def error_limit(step: StepFigures, policy: Policy, lane: LaneBasis) -> Violation | None:
    """The share of requests that failed, against ``max_error_ratio``."""
    return above_limit("errors", step.error_ratio, policy.max_error_ratio, "error ratio")


def tpot_limit(step: StepFigures, policy: Policy, lane: LaneBasis) -> Violation | None:
    """The TPOT objective, a per-request p95 of each request's mean pace after its first token (DistServe's
    TPOT): broken when significantly more than the 5 % a p95 allows of the rung's judged requests were slower
    than ``slo.tpot_p95_s``, the count goodput keeps (``objective_misses``, each request held to that deadline:
    ``policy.objectives_of``); figures without that count (a source that judged no objectives) by the p95's
    value. Where ITL p95 weighs long answers by their many gaps, this weighs every request once, so a rung whose
    short answers crawl breaks it while their few gaps hide in the ITL's thousands."""
    limit, point = policy.slo.tpot_p95_s, step.tpot_s.p95
    judged = step.judged_requests
    if limit is None or point is None or not judged:
        return above_limit("slo_tpot", point, limit, "TPOT p95 (s)")
    missed = _missed(step, "tpot", judged, 1 - policy.confidence)
    if missed is None:
        return None
    k, p = missed
    return Violation("slo_tpot", float(point), float(limit),
                     f"TPOT p95 (s) {point:.4g} > {limit:.4g}: {k} of {judged} requests slower (p = {p:.2g})")


def e2e_limit(step: StepFigures, policy: Policy, lane: LaneBasis) -> Violation | None:
    """The end-to-end latency objective, a per-request p95 (``_slo``)."""
    return _slo("slo_e2e", "e2e p95 (s)", step.latency_tail, step.latency_s.p95, policy.slo.e2e_p95_s, 0.95,
                1 - policy.confidence)
