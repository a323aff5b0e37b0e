from __future__ import annotations

from typing import Any

import pytest

from core.figures import MemoryFigures, Quantiles
from recommender.policy import SLO, Policy
from recommender.verdicts import check_step, memory_headroom_ratio
from tests.recommender.figures_factory import step

POLICY = Policy(slo=SLO(ttft_p95_s=1.0, itl_p95_s=0.05, e2e_p95_s=5.0), max_min_share_max=2.0,
                queue_p99_max_s=3.0, prefill_wait_max_s=4.0)


def test_memory_headroom_needs_both_figures() -> None:
    assert memory_headroom_ratio(step(1, 100)) == pytest.approx(0.5)
    assert memory_headroom_ratio(step(1, 100, memory_bytes=MemoryFigures(gpu_max=1.0))) is None


@pytest.mark.parametrize(
    ("changes", "constraints"),
    [
        ({}, []),
        ({"ttft_s": Quantiles(0.5, 1.5, 2.0)}, ["slo_ttft"]),
        ({"itl_s": Quantiles(0.01, 0.06, 0.07)}, ["slo_itl"]),
        ({"latency_s": Quantiles(1, 6, 7)}, ["slo_e2e"]),
        ({"jain": 0.7}, []),  # Jain reported, not binding by default
        ({"max_min_share": 3.0}, ["fairness"]),
        ({"queue_s": Quantiles(0.1, 2.0, 3.5)}, ["fairness"]),
        ({"pause_s": Quantiles(0.1, 0.3, 0.4)}, ["decode_starvation"]),  # p99 0.4 s > 0.25 s
        ({"decode_stall_max_ratio": 40.0}, []),  # a long gap against a fast step is not starvation by itself
        ({"prefill_wait_max_s": 9.0}, ["prefill_starvation"]),
        ({"user_wait_p_value": 1e-6, "user_wait_ratio": 3.0}, ["fairness"]),
        ({"user_wait_p_value": 0.2, "user_wait_ratio": 3.0}, []),  # not significant: length noise
        ({"user_wait_p_value": 1e-6, "user_wait_ratio": 1.2}, []),  # significant but not material
        ({"user_wait_p_value": 1e-6, "user_wait_ratio": 3.0, "user_wait_excess_s": 0.004}, []),  # 4 ms: lock-step
        ({"user_wait_p_value": 1e-6, "user_wait_ratio": 3.0, "user_wait_excess_s": 0.4}, ["fairness"]),
        ({"user_itl_p_value": 1e-9, "user_itl_ratio": 3.0, "user_itl_excess_s": 0.02}, ["fairness"]),
        ({"errors": 5}, ["errors"]),  # 5 / 105 > 1 %
        ({"memory_bytes": MemoryFigures(gpu_max=7.9e9, gpu_total=8e9)}, ["memory"]),
        ({"errors": 5, "max_min_share": 5.0, "ttft_s": Quantiles(1, 2, 3)}, ["errors", "slo_ttft", "fairness"]),
        ({"jain": None, "ttft_s": Quantiles(), "pause_s": Quantiles(), "pause_requests": None}, []),  # unmeasured
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
    verdict = check_step(step(4, 400, requests=2, pause_s=Quantiles(0.5, 0.9, 1.0)), POLICY)
    assert not verdict.usable and verdict.constraint_names() == ["decode_starvation"]
    invalid = check_step(step(4, 400, valid=False, pause_s=Quantiles(0.5, 0.9, 1.0)), POLICY)
    assert invalid.violations == ()


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
        (8, {"admission_wait_max_s": 5.0}, "prefill_starvation", "flagged"),  # 5 s > 1.5 x 1.2 s
        (8, {"queued_requests": 2}, "prefill_starvation", "insufficient_data"),
        (4, {"pause_requests": 4}, "decode_starvation", "insufficient_data"),
        (4, {"prefill_events": 1}, "decode_starvation", "insufficient_data"),  # bounded, but barely tried
        (4, {"prefill_events": 1, "pause_s": Quantiles(0.1, 0.5, 0.6)}, "decode_starvation", "flagged"),  # felt
        (4, {"pause_s": Quantiles(), "pause_requests": None, "prefill_events": None}, "decode_starvation",
         "unknown"),
        (4, {"interference_share": 0.4}, "interference", "warn"),  # warned, not binding
        (4, {"user_wait_p_value": None, "user_wait_ratio": None}, "fairness", "insufficient_data"),
    ],
)
def test_every_check_has_a_status(c: int, changes: dict[str, Any], name: str, status: str) -> None:
    verdict = check_step(step(c, 100.0 * c, **changes), Policy())
    assert verdict.checks[name].status == status, verdict.checks[name]
    if status != "flagged":
        assert name not in verdict.constraint_names()


def test_the_pause_ratio_is_reported_against_c1_and_binds_only_when_asked() -> None:
    slow = step(4, 400, pause_s=Quantiles(0.05, 0.1, 0.2))  # 200 ms: inside the 250 ms objective
    check = check_step(slow, Policy(), baseline_itl_s=0.010).checks["decode_starvation"]
    assert check.status == "ok" and "20.0x the decode-only step" in check.detail
    strict = check_step(slow, Policy(max_pause_ratio=5.0), baseline_itl_s=0.010)
    assert strict.constraint_names() == ["decode_starvation"]  # Sarathi-Serve's strict 5x, when asked


def test_interference_binds_only_when_the_policy_bounds_it() -> None:
    heavy = step(4, 400, interference_share=0.4)
    assert check_step(heavy, Policy()).violations == ()
    assert check_step(heavy, Policy(max_interference_share=0.3)).constraint_names() == ["decode_starvation"]
