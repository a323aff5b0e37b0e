"""The lane walk against tables of synthetic ladders: each case states the answer and what bound it."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import TypeAdapter

from satbench.answer.analysis import analyze_lane
from satbench.answer.models import StepModel
from satbench.answer.policy import SLO, Policy
from satbench.core.figures import Quantiles, Tail
from tests.recommender.figures_factory import held, ladder, step

POLICY = Policy(min_gain_per_doubling=0.10, slo=SLO(ttft_p95_s=1.0, itl_p95_s=0.05), jain_min=0.9,
                prefill_wait_max_s=5.0, max_error_ratio=0.01)
STALLED = held(30)  # 30 of 100 requests held 0.5 s beyond a 10 ms step by others' prefills
CURVE = {1: 100.0, 2: 200.0, 4: 400.0, 8: 420.0, 16: 425.0}
GROWING = {1: 100.0, 2: 200.0, 4: 400.0, 8: 800.0}


@pytest.mark.parametrize(
    ("curve", "per_rung", "recommended", "binding", "status"),
    [
        (CURVE, {}, 4, "throughput_plateau", "ok"),
        (GROWING, {}, 8, "ladder_top", "unsaturated"),
        (GROWING, {"c4": {"ttft_s": Quantiles(0.5, 1.5, 2.0)}}, 2, "slo_ttft", "ok"),
        (GROWING, {"c8": {"itl_s": Quantiles(0.02, 0.08, 0.1)}}, 4, "slo_itl", "ok"),
        (GROWING, {"c8": STALLED}, 4, "decode_starvation", "ok"),
        (GROWING, {"c8": {"admission_wait_max_s": 9.0, "admission_overrun_max_ratio": 7.5}}, 4,
         "prefill_starvation", "ok"),
        (GROWING, {"c4": {"user_wait_p_value": 1e-9, "user_wait_ratio": 4.0}}, 2, "fairness", "ok"),
        # a flat first doubling: the lowest rung, an end rung, is the answer
        ({1: 100.0, 2: 104.0, 4: 106.0}, {}, 1, "throughput_plateau", "ok"),
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
    starvation = result.starvation_summary()  # a summary never contradicts the binding constraint
    if binding in ("decode_starvation", "prefill_starvation", "fairness"):
        summary = result.fairness_summary() if binding == "fairness" else starvation
        assert summary.ok is False and summary.ok_at_recommended is True


def test_a_limit_broken_on_a_noisy_rung_still_binds() -> None:
    steps = ladder(GROWING, c4={"throughput_ci_tok_s": (100.0, 700.0), **STALLED})
    result = analyze_lane("dense", steps, POLICY)
    assert (result.status, result.recommended_concurrency, result.binding_constraint) == (
        "ok", 2, "decode_starvation")
    noisy_first = ladder(GROWING, c1={"requests": 3, "jain": 0.5})  # the test policy binds Jain
    result = analyze_lane("dense", noisy_first, POLICY)
    assert (result.status, result.binding_constraint) == ("degraded", "fairness")


def test_saturation_and_knee_ignore_latency() -> None:
    result = analyze_lane("dense", ladder(CURVE, c2={"ttft_s": Quantiles(1, 2, 3)}), POLICY)
    assert result.recommended_concurrency == 1
    assert result.saturation_concurrency == 4
    assert result.knee is not None and result.knee.concurrency == 4


def test_no_knee_while_doublings_still_pay_and_the_top_says_unsaturated() -> None:
    rising = {1: 100.0, 2: 180.0, 4: 300.0, 8: 400.0}  # +80 %, +67 %, +33 %: a bend, but still paying
    result = analyze_lane("dense", ladder(rising), POLICY)
    assert result.knee is None and result.saturation_concurrency is None
    assert (result.status, result.binding_constraint, result.recommended_concurrency) == (
        "unsaturated", "ladder_top", 8)
    assert result.reason is not None and "ladder.extend" in result.reason


def test_an_answer_whose_rung_held_more_than_one_percent_is_not_settled_whatever_the_interpolated_p99() -> None:
    """1 of 46 requests held 0.12 s at c=4 and above, where the hold grows with the prompt (0.1 s limit): more
    than the 1 % a p99 allows, too few to show it is more than chance. Interpolated over 46 requests the p99 reads
    95 ms, under the limit, but by the count (the value at most 1 % exceed: here the largest) it is 120 ms: the
    check says that figure, and the walk stops below the rung, undecided, not settled on it; a rung above that
    showed none held would have bounded it (the share held does not fall as concurrency grows)."""
    shape = {"stall_prompt_elasticity": 1.0}
    c4 = {**shape, "requests": 46, "pause_excess_tail": Tail.of([0.12] + [0.005] * 45),
          "pause_excess_s": Quantiles(0.005, 0.005, 0.095)}
    result = analyze_lane("dense", ladder(CURVE, c1=shape, c2=shape, c4=c4, c8=c4, c16=c4), POLICY)
    assert (result.recommended_concurrency, result.status, result.binding_constraint) == (
        2, "undecided", "decode_starvation")
    check = result.verdicts[2].checks["decode_starvation"]
    assert (check.status, check.measured, check.limit) == ("insufficient_data", 0.12, 0.1)
    assert result.reason is not None and "decode starvation at c=4 is not settled" in result.reason
    bounded = analyze_lane("dense", ladder(CURVE, c1=shape, c2=shape, c4=c4, c8=shape, c16=shape), POLICY)
    assert (bounded.recommended_concurrency, bounded.status) == (4, "ok")
    # none held past the limit: settled
    calm = analyze_lane("dense", ladder(CURVE, c1=shape, c2=shape, c4={**c4, **held(0, n=46)}, c8=shape,
                                        c16=shape), POLICY)
    assert (calm.recommended_concurrency, calm.status) == (4, "ok")


@pytest.mark.parametrize(("late", "want", "status"),
                         [(7, 2, "undecided"), (5, 4, "undecided"), (2, 4, "ok"), (15, 2, "ok")])
def test_an_answer_whose_rung_missed_the_ttft_objective_by_more_than_five_percent_is_not_settled(
        late: int, want: int, status: str) -> None:
    """TTFT p95: 7 of 100 requests past the 1 s objective at c=4 is more than the 5 % a p95 allows but not
    significantly (p = 0.23): the objective is neither broken there nor shown met, and the point picks the side:
    the walk ends below it, undecided (one doubling low). 5 of 100 is what a p95 allows, but 5 of 100 cannot show
    that no more than 5 % of the rung's requests miss it (the tail's 95 % bound is 9 %): the rung is accepted,
    undecided (one doubling high). 2 of 100 show it (2 %); 15 of 100 break it significantly, so the walk stops
    below (c=2, settled)."""
    c4 = {"ttft_tail": Tail.of([0.05] * (100 - late) + [1.5] * late),
          "ttft_s": Quantiles(0.05, 1.5 if late > 5 else 0.05, 1.5)}
    result = analyze_lane("dense", ladder(CURVE, c4=c4), POLICY)
    assert (result.recommended_concurrency, result.status) == (want, status)
    if status == "undecided":
        side = "low" if want < 4 else "high"
        assert result.reason is not None and f"TTFT objective at c=4 is not settled: {late} of 100" in result.reason
        assert f"may be one doubling {side}" in result.reason and result.binding_constraint == (
            "slo_ttft" if side == "low" else "throughput_plateau")


def test_a_lowest_rung_that_points_past_the_ttft_objective_leaves_the_lane_degraded() -> None:
    """2 of 14 requests past the objective at c=1 (14 %, p = 0.15) and 4 of 34 at c=2: neither shown, each
    pointing past it. The walk does not take c=1 on the benefit of the doubt: the lane is ``degraded``, the
    doubt said, as the datasheet's draw 1:171, whose long run lets 12 % miss the objective at c=1."""
    c1 = {"requests": 14, "ttft_tail": Tail.of([0.05] * 12 + [1.5] * 2), "ttft_s": Quantiles(0.05, 1.5, 1.5)}
    c2 = {"requests": 34, "ttft_tail": Tail.of([0.05] * 30 + [1.5] * 4), "ttft_s": Quantiles(0.05, 1.5, 1.5)}
    result = analyze_lane("dense", ladder(GROWING, c1=c1, c2=c2), POLICY)
    assert (result.recommended_concurrency, result.status, result.binding_constraint) == (
        None, "degraded", "slo_ttft")
    assert result.reason is not None and "lowest rung c=1 may break the TTFT objective: 2 of 14" in result.reason


def test_a_plateau_inside_the_noise_is_undecided_and_never_lowers_the_answer() -> None:
    """2 -> 4 gained 5 % with intervals of +-25 %: neither shown to pay nor shown flat. The answer takes c=4 and
    says it rests on an undecided doubling, whether the ladder ends there or a significant plateau follows."""
    wide = {"c2": {"throughput_ci_tok_s": (150.0, 250.0)}, "c4": {"throughput_ci_tok_s": (160.0, 260.0)}}
    top = analyze_lane("dense", ladder({1: 100.0, 2: 200.0, 4: 210.0}, **wide), POLICY)
    assert (top.recommended_concurrency, top.status, top.binding_constraint) == (4, "undecided", "ladder_top")
    assert top.undecided is not None and (top.undecided.smaller, top.undecided.larger) == (2, 4)
    assert top.reason is not None and "straddles" in top.reason
    flat = analyze_lane("dense", ladder({1: 100.0, 2: 200.0, 4: 210.0, 8: 211.0}, c2=wide["c2"],
                                        c4={"throughput_ci_tok_s": (205.0, 215.0)},
                                        c8={"throughput_ci_tok_s": (209.0, 213.0)}), POLICY)
    assert (flat.recommended_concurrency, flat.status, flat.binding_constraint) == (
        4, "undecided", "throughput_plateau")
    rows = top.step_models()
    interval = rows[2].gain_interval
    assert interval is not None and interval[0] < 0.05 < 0.10 < interval[1]
    # a significant plateau is decided
    tight = analyze_lane("dense", ladder({1: 100.0, 2: 200.0, 4: 210.0}, c2={"throughput_ci_tok_s": (198.0, 202.0)},
                                         c4={"throughput_ci_tok_s": (208.0, 212.0)}), POLICY)
    assert (tight.recommended_concurrency, tight.status, tight.binding_constraint) == (2, "ok", "throughput_plateau")


def test_a_doubling_that_measured_the_gain_is_never_a_plateau() -> None:
    steps = ladder({1: 100.0, 2: 200.0, 4: 260.0}, c2={"throughput_ci_tok_s": (150.0, 250.0)},
                   c4={"throughput_ci_tok_s": (200.0, 320.0)})  # +30 %, intervals overlap
    result = analyze_lane("dense", steps, POLICY)
    assert result.recommended_concurrency == 4 and result.indistinguishable is None


def test_decode_starvation_is_flagged_and_a_fair_batcher_is_not() -> None:
    starving = ladder(GROWING, c4=STALLED, c8=STALLED)
    fair = ladder(GROWING, c4={"decode_stall_max_ratio": 18.0}, c8={"decode_stall_max_ratio": 20.0})
    bad, good = analyze_lane("dense", starving, POLICY), analyze_lane("dense", fair, POLICY)
    assert bad.binding_constraint == "decode_starvation"
    summary = bad.starvation_summary()
    assert summary.ok is False and summary.decode_ok is False and summary.ok_at_recommended is True
    assert summary.decode_flagged_at == [4, 8]
    assert summary.decode_by_rung == {"1": "not_applicable", "2": "ok", "4": "flagged", "8": "flagged"}
    assert bad.step_models()[2].violations[0].constraint == "decode_starvation"
    assert good.binding_constraint == "ladder_top"  # long gaps against a fast step, pauses inside the objective
    assert good.starvation_summary().ok is True
    assert good.starvation_summary().pause_p99_max_s == pytest.approx(0.03)


def test_a_uniformly_slow_decode_is_never_starvation() -> None:
    """A 285 ms step at every rung (a large MoE on a small device): every pause is slow and no prefill makes it
    longer; the ITL objective, relaxed for this lane, holds; the answer follows throughput."""
    slow = {c: {"itl_s": Quantiles(0.285, 0.3, 0.31), "pause_s": Quantiles(0.29, 0.31, 0.33),
                "decode_step_s": 0.285, **held(0, rest=0.002)} for c in (1, 2, 4, 8)}
    curve = {1: 3.5, 2: 6.6, 4: 12.7, 8: 23.7}
    result = analyze_lane("moe", ladder(curve, **{f"c{c}": v for c, v in slow.items()}),
                          Policy(slo=SLO(itl_p95_s=1.0)))
    assert (result.recommended_concurrency, result.binding_constraint) == (8, "ladder_top")
    assert result.starvation_summary().decode_ok is True
    strict = analyze_lane("moe", ladder(curve, **{f"c{c}": v for c, v in slow.items()}), Policy())
    assert (strict.status, strict.binding_constraint) == ("degraded", "slo_itl")  # slow at c=1 too: said so


def test_unfair_admission_is_flagged_fairness() -> None:
    unfair = ladder(GROWING, c8={"user_wait_p_value": 1e-12, "user_wait_ratio": 3.5})
    result = analyze_lane("dense", unfair, POLICY)
    assert result.binding_constraint == "fairness"
    assert result.recommended_concurrency == 4
    summary = result.fairness_summary()
    assert summary.ok is False and summary.ok_at_recommended is True
    assert summary.flagged_at == [8] and summary.user_wait_ratio_max == pytest.approx(3.5)


def test_duplicate_rungs_keep_the_later_window_and_say_so() -> None:
    steps = [step(1, 100), step(2, 50), step(2, 200), step(4, 400)]
    result = analyze_lane("dense", steps, POLICY)
    assert result.recommended_concurrency == 4
    assert any("measured twice" in n for n in result.notes)


def test_gains_are_listed_per_step() -> None:
    rows = analyze_lane("dense", ladder(CURVE), POLICY).step_models()
    assert [r.gain_per_doubling for r in rows][:3] == [None, pytest.approx(1.0), pytest.approx(1.0)]
    assert "lane" not in TypeAdapter(StepModel).dump_python(rows[0]), "the document's key names the lane"


def _spread(n: int, high: float, low: float) -> dict[str, Any]:
    """A rung of ``n`` requests whose 16 longest pauses run evenly from ``high`` down to ``low`` seconds past their
    decode step (the rest are shorter): too few requests to show the share past the stall limit either way."""
    top = [high - (high - low) * i / 15 for i in range(16)]
    values = top + [low / 2] * (n - 16)
    ordered = sorted(values)
    return {"pause_excess_tail": Tail.of(values),
            "pause_excess_s": Quantiles(ordered[n // 2], ordered[round(0.95 * (n - 1))],
                                        ordered[round(0.99 * (n - 1))])}


PAST = _spread(30, 0.24, 0.09)  # no request past the 250 ms limit, but their tail points past 1 % of them
WITHIN = _spread(20, 0.10, 0.04)  # their tail points within 1 %, and 20 requests cannot bound it there


def test_the_spread_rungs_are_what_they_say() -> None:
    from satbench.core.statistics import tail_share

    for rung, point_past in ((PAST, True), (WITHIN, False)):
        tail = rung["pause_excess_tail"]
        assert tail_share(tail.top, tail.n, 0.25, 0.95) > 0.01  # not bounded within 1 %
        assert (tail_share(tail.top, tail.n, 0.25) > 0.01) is point_past
        assert tail.above(0.25)[0] == 0


def test_a_rung_whose_pauses_may_break_the_stall_limit_is_not_taken_on_trust() -> None:
    """Decode starvation neither shown nor bounded within 1 %: where the rung's pauses point past the limit the
    walk stops below it, undecided; where a higher rung shows its pauses within the limit, that bounds this one
    too (a higher rung puts more prefills beside each decode); where they point within it the walk goes on, and
    an answer on such a rung is undecided."""
    stopped = analyze_lane("dense", ladder(GROWING, c2=PAST, c4=PAST, c8=STALLED), POLICY)
    assert (stopped.recommended_concurrency, stopped.status, stopped.binding_constraint) == \
        (1, "undecided", "decode_starvation")
    assert stopped.verdicts[1].checks["decode_starvation"].status == "insufficient_data"
    assert "c=2 is not settled" in (stopped.reason or "") and "one doubling low" in (stopped.reason or "")
    bounded = analyze_lane("dense", ladder(GROWING, c2=PAST), POLICY)  # c=4 and c=8 show 0 of 100 held
    assert (bounded.recommended_concurrency, bounded.status) == (8, "unsaturated")
    on_trust = analyze_lane("dense", ladder(GROWING, c8=WITHIN), POLICY)
    assert (on_trust.recommended_concurrency, on_trust.status) == (8, "undecided")
    assert "c=8 is not settled" in (on_trust.reason or "") and "one doubling high" in (on_trust.reason or "")
    flagged = analyze_lane("dense", ladder(GROWING, c2=PAST, c4=STALLED), POLICY)
    assert (flagged.recommended_concurrency, flagged.status) == (1, "undecided")
