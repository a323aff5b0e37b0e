"""The ITL objective judged by its p95's interval (``core.itl_interval``): broken where the interval lies wholly
above the objective (``itl_limit``), open where it straddles it (``itl_open``: the answer it touches is
undecided), the walk ended below a rung whose p95 is above it but not shown so (``itl_past``); figures without an
interval (the Prometheus histograms keep no gaps) are judged by the point. Why: DESIGN.md, the quantile
objectives.
"""

from __future__ import annotations

from satbench.answer.judges import LaneBasis, Violation, above_limit
from satbench.answer.policy import Policy
from satbench.core.figures import StepFigures
from satbench.core.itl_interval import ITL_CONFIDENCE, QuantileInterval

__all__ = ["ITL_CONSTRAINT", "itl_interval", "itl_limit", "itl_open", "itl_past"]

ITL_CONSTRAINT = "slo_itl"  # what the ITL objective binds as (answer.checks), where the walk names it itself


def itl_interval(step: StepFigures, policy: Policy) -> tuple[float, float] | None:
    """The ITL p95's interval at the policy's confidence, rebuilt from the published 95 % one and its dof
    (``core.itl_interval.QuantileInterval.at``); ``None`` where the figures carry none (too few gaps, or a source
    that keeps no gaps: the Prometheus histograms)."""
    point, low, high, dof = step.itl_s.p95, step.itl_p95_low_s, step.itl_p95_high_s, step.itl_p95_dof
    if point is None or low is None or high is None or dof is None:
        return None
    return QuantileInterval(point, low, high, max(1.0, dof), ITL_CONFIDENCE).at(policy.confidence)


def itl_limit(step: StepFigures, policy: Policy, lane: LaneBasis) -> Violation | None:
    """The ITL objective, by its p95 over the rung's gaps: broken where the p95's interval lies wholly above the
    objective (module docstring); a point above it with the interval reaching below is not shown broken
    (``itl_open`` says so), and figures without an interval are judged by the point."""
    limit, point = policy.slo.itl_p95_s, step.itl_s.p95
    interval = itl_interval(step, policy)
    if interval is None or limit is None or point is None or not point > limit:
        return above_limit(ITL_CONSTRAINT, point, limit, "ITL p95 (s)")
    if interval[0] <= limit:
        return None
    return Violation(ITL_CONSTRAINT, float(point), float(limit), f"ITL p95 (s) {point:.4g} > {limit:.4g} (its "
                     f"{policy.confidence:.0%} interval [{interval[0]:.4g}, {interval[1]:.4g}] lies above it)")


def itl_past(step: StepFigures, policy: Policy) -> str | None:
    """Why the rung's ITL p95 lies above the objective without being shown so (``itl_open``'s words), ``None``
    where it does not: not shown broken, so the answer below it is not settled; the rungs above it pace slower
    still, so the walk ends there (``answer.analysis``: the answer is the rung below, at most one doubling low)
    rather than going on past it."""
    limit, point = policy.slo.itl_p95_s, step.itl_s.p95
    return itl_open(step, policy) if limit is not None and point is not None and point > limit else None


def itl_open(step: StepFigures, policy: Policy) -> str | None:
    """Why the ITL objective is neither shown met nor shown broken at this rung: its p95's interval straddles the
    objective. ``None`` where the interval lies on one side, or there is none (the point decides)."""
    limit, point = policy.slo.itl_p95_s, step.itl_s.p95
    interval = itl_interval(step, policy)
    if interval is None or limit is None or point is None or not interval[0] <= limit < interval[1]:
        return None
    return (f"ITL p95 {point:.4g} s, its {policy.confidence:.0%} interval [{interval[0]:.4g}, {interval[1]:.4g}] "
            f"straddles the objective {limit:.4g} s")
