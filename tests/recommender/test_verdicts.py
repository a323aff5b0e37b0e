from __future__ import annotations

from typing import Any

import pytest

from satbench.answer.judges import memory_headroom_ratio, stall_limit
from satbench.answer.policy import SLO, Policy
from satbench.answer.verdicts import check_step
from satbench.core.figures import MemoryFigures, Quantiles, Tail
from tests.recommender.figures_factory import held, step

POLICY = Policy(slo=SLO(ttft_p95_s=1.0, itl_p95_s=0.05, e2e_p95_s=5.0), max_min_share_max=2.0,
                queue_p99_max_s=3.0, prefill_wait_max_s=4.0)


def test_memory_headroom_is_each_gpus_own() -> None:
    assert memory_headroom_ratio(step(1, 100).memory_bytes) == pytest.approx(0.5)
    assert memory_headroom_ratio(MemoryFigures(gpu_max=1.0)) is None
    # the per-GPU figure wins over the fullest GPU against the largest one
    assert memory_headroom_ratio(MemoryFigures(gpu_max=7e9, gpu_total=8e9, gpu_headroom_min_ratio=0.02)) == 0.02


@pytest.mark.parametrize(
    ("changes", "constraints"),
    [
        ({}, []),
        ({"ttft_s": Quantiles(0.5, 1.5, 2.0), "ttft_tail": Tail.of([1.5] * 10 + [0.5] * 90)}, ["slo_ttft"]),
        # 2 of 100 above the objective: the p95 is not shown to be broken (p = 0.96)
        ({"ttft_s": Quantiles(0.5, 0.9, 2.0), "ttft_tail": Tail.of([1.5] * 2 + [0.5] * 98)}, []),
        ({"itl_s": Quantiles(0.01, 0.06, 0.07)}, ["slo_itl"]),
        ({"latency_s": Quantiles(1, 6, 7), "latency_tail": Tail.of([6.0] * 20 + [1.0] * 80)}, ["slo_e2e"]),
        ({"jain": 0.7}, []),  # Jain reported, not binding by default
        ({"max_min_share": 3.0}, ["fairness"]),
        ({"queue_s": Quantiles(0.1, 2.0, 3.5)}, ["fairness"]),
        (held(10), ["decode_starvation"]),  # 10 of 100 held 0.5 s beyond their step: past the 0.25 s objective
        (held(1), []),  # one of 100 held: a p99 objective allows it
        ({"pause_s": Quantiles(0.3, 0.4, 0.4)}, []),  # slow pauses that no prefill made: not starvation
        ({"decode_stall_max_ratio": 40.0}, []),  # a long gap against a fast step is not starvation by itself
        ({"prefill_wait_max_s": 9.0}, ["prefill_starvation"]),
        ({"user_wait_p_value": 1e-6, "user_wait_ratio": 3.0}, ["fairness"]),
        ({"user_wait_p_value": 0.2, "user_wait_ratio": 3.0}, []),  # not significant: length noise
        ({"user_wait_p_value": 1e-6, "user_wait_ratio": 1.2}, []),  # significant but not material
        ({"user_wait_p_value": 1e-6, "user_wait_ratio": 3.0, "user_wait_excess_s": 0.004}, []),  # 4 ms: lock-step
        ({"user_wait_p_value": 1e-6, "user_wait_ratio": 3.0, "user_wait_excess_s": 0.4}, ["fairness"]),
        ({"user_itl_p_value": 1e-9, "user_itl_ratio": 3.0, "user_itl_excess_s": 0.02}, ["fairness"]),
        ({"errors": 5}, ["errors"]),  # 5 / 105 > 1 %
        ({"memory_bytes": MemoryFigures(gpu_max=4e9, gpu_total=8e9, kv_usage_max_ratio=0.99)}, ["memory"]),
        ({"memory_bytes": MemoryFigures(gpu_max=7.9e9, gpu_total=8e9)}, []),  # no lower rung: cannot say it filled
        ({"errors": 5, "max_min_share": 5.0, "ttft_s": Quantiles(1, 2, 3), "ttft_tail": Tail.of([2.0] * 50)},
         ["errors", "slo_ttft", "fairness"]),
        ({"jain": None, "ttft_s": Quantiles(), "pause_s": Quantiles(), "pause_requests": None,
          "pause_excess_tail": Tail(), "ttft_tail": Tail()}, []),  # unmeasured
    ],
)
def test_check_step_names_every_broken_limit_in_binding_order(changes: dict[str, Any],
                                                              constraints: list[str]) -> None:
    verdict = check_step(step(4, 400, **changes), POLICY)
    assert verdict.usable
    assert verdict.constraint_names() == constraints


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"valid": False, "reason": "client could not keep up"}, "client could not keep up"),
        ({"requests": 3}, "3 requests in the window"),
        ({"throughput_ci_tok_s": (200.0, 600.0)}, "throughput not stable"),
    ],
)
def test_unusable_steps_say_why(changes: dict[str, Any], why: str) -> None:
    verdict = check_step(step(4, 400, **changes), POLICY)
    assert not verdict.usable and not verdict.ok
    assert verdict.unusable_reason is not None and why in verdict.unusable_reason


def test_unusable_but_valid_steps_are_still_judged() -> None:
    verdict = check_step(step(4, 400, requests=2, **held(10)), POLICY)
    assert not verdict.usable and verdict.constraint_names() == ["decode_starvation"]
    invalid = check_step(step(4, 400, valid=False, **held(10)), POLICY)
    assert invalid.violations == ()


def test_memory_binds_only_where_the_rung_filled_it() -> None:
    full = MemoryFigures(gpu_max=7.9e9, gpu_total=8e9, gpu_other_max=2**31)
    room = MemoryFigures(gpu_max=5e9, gpu_total=8e9)
    flat = check_step(step(4, 400, memory_bytes=full), POLICY, lowest_memory=full)
    assert flat.violations == () and flat.checks["memory"].status == "warn"
    said = flat.checks["memory"].detail
    assert "not a concurrency limit" in said and "other processes" in said
    filled = check_step(step(4, 400, memory_bytes=full), POLICY, lowest_memory=room)
    assert filled.constraint_names() == ["memory"]


def test_stable_interval_keeps_a_step_usable() -> None:
    assert check_step(step(4, 400, throughput_ci_tok_s=(390.0, 410.0)), POLICY).ok


@pytest.mark.parametrize(
    ("c", "changes", "name", "status"),
    [
        (1, {}, "decode_starvation", "not_applicable"),  # one user: nobody's prefill to wait for
        (1, {}, "fairness", "not_applicable"),
        (1, {}, "interference", "not_applicable"),
        (4, {}, "prefill_starvation", "not_applicable"),  # every user has a slot
        (8, {}, "prefill_starvation", "ok"),
        (8, {"admission_wait_max_s": 5.0, "admission_overrun_max_ratio": 4.2, "admission_overruns": 3},
         "prefill_starvation", "flagged"),  # waited 4.2x its own FIFO bound
        # 1.8x a 60 ms bound is 48 ms past it: a late wake-up on a loaded host, not a request passed over
        (8, {"admission_wait_max_s": 0.108, "admission_wait_bound_s": 0.06, "admission_overrun_max_ratio": 1.8,
             "admission_overruns": 1}, "prefill_starvation", "ok"),
        (8, {"admission_wait_max_s": 0.54, "admission_wait_bound_s": 0.3, "admission_overrun_max_ratio": 1.8,
             "admission_overruns": 1}, "prefill_starvation", "flagged"),  # 0.24 s past it: felt
        (8, {"queued_requests": 2}, "prefill_starvation", "insufficient_data"),
        (8, {"admission_overrun_max_ratio": None}, "prefill_starvation", "insufficient_data"),  # no bound told
        (8, {"users_starved": 2}, "fairness", "flagged"),  # served nothing while passed over
        (4, held(0, n=4), "decode_starvation", "insufficient_data"),
        (4, {"prefill_events": 1}, "decode_starvation", "insufficient_data"),  # bounded, but barely tried
        (4, {"prefill_events": 1, **held(30)}, "decode_starvation", "flagged"),  # felt, however few prefills
        (4, {"pause_excess_tail": Tail(), "prefill_events": None}, "decode_starvation", "unknown"),
        (4, {"interference_share": 0.4}, "interference", "warn"),  # warned, not binding
        (4, {"user_wait_p_value": None, "user_wait_ratio": None}, "fairness", "insufficient_data"),
    ],
)
def test_every_check_has_a_status(c: int, changes: dict[str, Any], name: str, status: str) -> None:
    verdict = check_step(step(c, 100.0 * c, **changes), Policy())
    assert verdict.checks[name].status == status, verdict.checks[name]
    if status != "flagged":
        assert name not in verdict.constraint_names()


@pytest.mark.parametrize(("unbounded", "ratio", "step_s", "limit"), [
    (None, None, 0.010, 0.25),  # shape unknown (one prompt size): the time objective
    (False, None, 0.010, 0.25),  # bounded (chunked prefill): the time objective
    (True, None, 0.010, 0.1),  # grows with the prompt (whole-prompt prefill): once felt
    (True, None, 0.285, 0.1),  # whatever the step
    (None, 5.0, 0.010, 0.1),  # Sarathi-Serve's strict ratio where asked: 4 steps, never under the felt floor
    (None, 5.0, 0.050, 0.2),
])
def test_the_stall_limit(unbounded: bool | None, ratio: float | None, step_s: float, limit: float) -> None:
    assert stall_limit(Policy(max_pause_ratio=ratio), step_s, unbounded) == pytest.approx(limit)
    assert stall_limit(Policy(slo=SLO(tbt_p99_s=None)), step_s, None) is None


@pytest.mark.parametrize(("elasticity", "status"), [(1.05, "flagged"), (0.45, "ok"), (None, "ok")])
def test_a_hold_counts_once_felt_where_it_grows_with_the_prompt(elasticity: float | None, status: str) -> None:
    """30 of 100 requests held 150 ms beyond their step: starvation where the holds grow with the prompt (a
    whole-prompt prefill: unbounded in it), not where they are bounded (a chunked prefill) or of unknown
    shape, inside the 250 ms objective; the step's length does not enter."""
    for step_s in (0.003, 0.3):
        held_rung = step(4, 400, decode_step_s=step_s, stall_prompt_elasticity=elasticity, **held(30, excess=0.15))
        check = check_step(held_rung, Policy()).checks["decode_starvation"]
        assert check.status == status, check
    lane_wide = step(4, 400, stall_prompt_elasticity=None, **held(30, excess=0.15))
    assert check_step(lane_wide, Policy(), elasticity=1.0).checks["decode_starvation"].status == "flagged"


def test_requests_one_step_held_together_show_no_more_than_the_steps_do() -> None:
    """83 requests at c=8, held in groups of seven by twelve steps (one prefill holds every decode beside it), their
    longest pauses 35-70 ms against a 100 ms limit: taken for 83 independent pauses, their tight top (seven
    requests at 70 ms, seven at 68) bounds the share past the limit at nothing; but they are twelve draws of the
    steps' holds, and the 60 held steps they met (30-70 ms, six a request) bound it at 1.7 %, past the 1 % a p99
    allows: not shown. The datasheet's draw 1:182: 0 of 83 held past 0.1 s, where the long run holds 6.3 %."""
    holds = [0.03 + 0.04 * i / 59 for i in range(60)]
    groups = [max(holds[i::12]) for i in range(12)]
    pauses = [g for g in groups for _ in range(7)][:83]
    rung = {"stall_prompt_elasticity": 1.0, "requests": 83, "prefill_events": 83,
            "pause_excess_tail": Tail.of(pauses), "pause_excess_s": Quantiles(0.05, 0.069, 0.07)}
    alone = check_step(step(8, 800, **rung), Policy()).checks["decode_starvation"]
    assert alone.status == "ok", alone  # the figures without their steps: the requests' own pauses speak
    together = check_step(step(8, 800, **rung, pause_step_tail=Tail.of(holds), pause_steps_per_request=6.0),
                          Policy()).checks["decode_starvation"]
    assert together.status == "insufficient_data" and "60 held steps' pauses (6.0 a request) allows up to 1.7%" \
        in together.detail, together
    # the same steps' holds far below the limit (at most 40 ms): shown, six a request or not
    calm = check_step(step(8, 800, **rung, pause_step_tail=Tail.of([h * 0.55 for h in holds]),
                           pause_steps_per_request=6.0), Policy()).checks["decode_starvation"]
    assert calm.status == "ok", calm


def test_interference_binds_only_when_the_policy_bounds_it() -> None:
    heavy = step(4, 400, interference_share=0.4)
    assert check_step(heavy, Policy()).violations == ()
    assert check_step(heavy, Policy(max_interference_share=0.3)).constraint_names() == ["decode_starvation"]
