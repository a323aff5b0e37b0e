"""The ITL objective judged by its p95's interval (``answer.itl_judge.itl_limit``, ``itl_open``, ``itl_past``).

Each case gives the rungs' ITL p95 and its 95 % interval; the truth is which side of the objective the interval
lies on, read off the case. A rung whose interval lies wholly above the objective breaks it and the answer is the
rung below, settled; one whose point is above but whose interval reaches below it is not shown broken, so the
answer below it is undecided (at most one doubling low) and the walk does not go past it; a recommended rung whose
point is within but whose interval reaches above it is undecided too (at most one doubling high). Without an
interval (figures from the Prometheus histograms keep no gaps) the point decides, as before.
"""

from __future__ import annotations

from satbench.answer.analysis import analyze_lane
from satbench.answer.policy import SLO, Policy
from satbench.core.figures import Quantiles
from tests.recommender.figures_factory import ladder

LIMIT = 0.05
POLICY = Policy(slo=SLO(ttft_p95_s=2.0, itl_p95_s=LIMIT))
CURVE = {1: 100.0, 2: 200.0, 4: 400.0, 8: 800.0, 16: 1600.0}


def _itl(point: float, low: float | None, high: float | None) -> dict[str, object]:
    return {"itl_s": Quantiles(point * 0.8, point, point * 1.1), "itl_p95_low_s": low, "itl_p95_high_s": high,
            "itl_p95_dof": None if low is None else 19.0}


def _answer(**per_rung: dict[str, object]) -> tuple[int | None, str, str | None, str | None]:
    lane = analyze_lane("dense", ladder(CURVE, **per_rung), POLICY)
    return lane.recommended_concurrency, lane.status, lane.binding_constraint, lane.reason


def test_an_interval_wholly_above_the_objective_breaks_it_and_settles_the_rung_below() -> None:
    c, status, binding, _ = _answer(c8=_itl(0.07, 0.06, 0.08), c16=_itl(0.09, 0.08, 0.1))
    assert (c, status, binding) == (4, "ok", "slo_itl")


def test_a_point_above_with_an_interval_reaching_below_leaves_the_rung_below_undecided() -> None:
    c, status, binding, reason = _answer(c8=_itl(0.055, 0.045, 0.065), c16=_itl(0.09, 0.08, 0.1))
    assert (c, status, binding) == (4, "undecided", "slo_itl")
    assert reason is not None and "one doubling low" in reason and "c=8" in reason


def test_a_recommended_rung_whose_interval_reaches_above_the_objective_is_undecided() -> None:
    c, status, binding, reason = _answer(c8=_itl(0.048, 0.04, 0.056), c16=_itl(0.09, 0.08, 0.1))
    assert (c, status, binding) == (8, "undecided", "slo_itl")
    assert reason is not None and "one doubling high" in reason


def test_without_an_interval_the_point_decides() -> None:
    assert _answer(c8=_itl(0.055, None, None))[:3] == (4, "ok", "slo_itl")
    assert _answer(c8=_itl(0.048, None, None), c16=_itl(0.09, None, None))[:3] == (8, "ok", "slo_itl")


def test_a_lowest_rung_that_may_break_the_objective_gets_no_answer() -> None:
    c, status, binding, reason = _answer(c1=_itl(0.055, 0.045, 0.065))
    assert (c, status, binding) == (None, "degraded", "slo_itl")
    assert reason is not None and "may break" in reason
