"""The lane walk against tables of synthetic ladders: each case states the answer and what bound it."""

from __future__ import annotations

from typing import Any

import pytest

from core.figures import Quantiles
from recommender.analysis import analyze_lane
from recommender.policy import SLO, Policy
from tests.recommender.figures_factory import ladder, step

POLICY = Policy(min_gain_per_doubling=0.10, slo=SLO(ttft_p95_s=1.0, itl_p95_s=0.05), jain_min=0.9,
                decode_stall_max_ratio=5.0, prefill_wait_max_s=5.0, max_error_ratio=0.01)
CURVE = {1: 100.0, 2: 200.0, 4: 400.0, 8: 420.0, 16: 425.0}
GROWING = {1: 100.0, 2: 200.0, 4: 400.0, 8: 800.0}


@pytest.mark.parametrize(
    ("curve", "per_rung", "recommended", "binding", "status"),
    [
        (CURVE, {}, 4, "throughput_plateau", "ok"),
        (GROWING, {}, 8, "ladder_top", "ok"),
        (GROWING, {"c4": {"ttft_s": Quantiles(0.5, 1.5, 2.0)}}, 2, "slo_ttft", "ok"),
        (GROWING, {"c8": {"itl_s": Quantiles(0.02, 0.08, 0.1)}}, 4, "slo_itl", "ok"),
        (GROWING, {"c8": {"decode_stall_max_ratio": 9.0}}, 4, "decode_starvation", "ok"),
        (GROWING, {"c4": {"prefill_wait_max_s": 30.0}}, 2, "prefill_starvation", "ok"),
        (GROWING, {"c4": {"jain": 0.6}}, 2, "fairness", "ok"),
        (GROWING, {"c8": {"errors": 10}}, 4, "errors", "ok"),
        # a plateau and a broken SLO at the same rung: throughput alone already stops the walk
        (CURVE, {"c8": {"ttft_s": Quantiles(0.5, 1.5, 2.0)}}, 4, "throughput_plateau", "ok"),
        # an invalid rung in the middle stops the answer below it
        (GROWING, {"c4": {"valid": False, "reason": "runtime restarted"}}, 2, None, "degraded"),
        (GROWING, {"c4": {"requests": 2}}, 2, None, "degraded"),
        (GROWING, {"c8": {"throughput_ci_tok_s": (100.0, 1500.0)}}, 4, None, "degraded"),
        # no answer at all
        (GROWING, {"c1": {"ttft_s": Quantiles(1, 2, 3)}}, None, "slo_ttft", "degraded"),
        (GROWING, {"c1": {"requests": 0}}, None, None, "insufficient_data"),
        ({4: 400.0}, {}, None, None, "insufficient_data"),
        # an invalid rung past the stopping point does not matter
        (CURVE, {"c16": {"valid": False, "reason": "x"}}, 4, "throughput_plateau", "ok"),
    ],
)
def test_analyze_lane(curve: dict[int, float], per_rung: dict[str, dict[str, Any]], recommended: int | None,
                      binding: str | None, status: str) -> None:
    result = analyze_lane("dense", ladder(curve, **per_rung), POLICY)
    assert (result.recommended_concurrency, result.binding_constraint, result.status) == (
        recommended, binding, status)
    assert (result.reason is None) == (status == "ok")


def test_a_limit_broken_on_a_noisy_rung_still_binds() -> None:
    steps = ladder(GROWING, c4={"throughput_ci_tok_s": (100.0, 700.0), "decode_stall_max_ratio": 60.0})
    result = analyze_lane("dense", steps, POLICY)
    assert (result.status, result.recommended_concurrency, result.binding_constraint) == (
        "ok", 2, "decode_starvation")
    noisy_first = ladder(GROWING, c1={"requests": 3, "jain": 0.5})
    result = analyze_lane("dense", noisy_first, POLICY)
    assert (result.status, result.binding_constraint) == ("degraded", "fairness")


def test_saturation_and_knee_ignore_latency() -> None:
    result = analyze_lane("dense", ladder(CURVE, c2={"ttft_s": Quantiles(1, 2, 3)}), POLICY)
    assert result.recommended_concurrency == 1
    assert result.saturation_concurrency == 4
    assert result.knee is not None and result.knee.concurrency == 4


def test_rungs_that_cannot_be_told_apart_prefer_the_smaller() -> None:
    steps = ladder({1: 100.0, 2: 200.0, 4: 260.0, 8: 400.0},
                   c2={"throughput_ci_tok_s": (170.0, 250.0)}, c4={"throughput_ci_tok_s": (220.0, 300.0)})
    result = analyze_lane("dense", steps, POLICY)
    assert result.recommended_concurrency == 2
    assert result.binding_constraint == "throughput_plateau"
    assert result.indistinguishable == (2, 4)
    assert any("cannot be told apart" in n for n in result.notes)


def test_separated_intervals_let_the_walk_go_on() -> None:
    steps = ladder({1: 100.0, 2: 200.0, 4: 260.0}, c2={"throughput_ci_tok_s": (195.0, 205.0)},
                   c4={"throughput_ci_tok_s": (250.0, 270.0)})
    assert analyze_lane("dense", steps, POLICY).recommended_concurrency == 4


def test_decode_starvation_is_flagged_and_a_fair_batcher_is_not() -> None:
    starving = ladder(GROWING, c4={"decode_stall_max_ratio": 40.0}, c8={"decode_stall_max_ratio": 80.0})
    fair = ladder(GROWING, c4={"decode_stall_max_ratio": 1.8}, c8={"decode_stall_max_ratio": 2.0})
    bad, good = analyze_lane("dense", starving, POLICY), analyze_lane("dense", fair, POLICY)
    assert bad.binding_constraint == "decode_starvation"
    assert bad.starvation_summary()["decode_ok"] is True  # the recommended rungs themselves are fine
    assert "decode_starvation" in bad.steps_as_dicts()[2]["violations"][0]["constraint"]
    assert good.binding_constraint == "ladder_top"
    assert good.starvation_summary() == {"ok": True, "decode_ok": True, "prefill_ok": True,
                                         "decode_stall_max_ratio": 2.0, "prefill_wait_max_s": 0.1,
                                         "decode_flagged_at": [], "prefill_flagged_at": []}
    assert bad.starvation_summary()["decode_flagged_at"] == [4, 8]


def test_unfair_admission_is_flagged_fairness() -> None:
    unfair = ladder(GROWING, c4={"jain": 0.55, "max_min_share": 12.0})
    result = analyze_lane("dense", unfair, POLICY)
    assert result.binding_constraint == "fairness"
    assert result.recommended_concurrency == 2
    assert result.fairness_summary()["ok"] is True
    assert result.fairness_summary()["jain_min"] == pytest.approx(0.99)
    assert result.fairness_summary()["flagged_at"] == [4]


def test_duplicate_rungs_keep_the_later_window_and_say_so() -> None:
    steps = [step(1, 100), step(2, 50), step(2, 200), step(4, 400)]
    result = analyze_lane("dense", steps, POLICY)
    assert result.recommended_concurrency == 4
    assert any("measured twice" in n for n in result.notes)


def test_gains_are_listed_per_step() -> None:
    rows = analyze_lane("dense", ladder(CURVE), POLICY).steps_as_dicts()
    assert [r["gain_per_doubling"] for r in rows][:3] == [None, pytest.approx(1.0), pytest.approx(1.0)]
    assert "lane" not in rows[0]
