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
        ({"jain": 0.7}, ["fairness"]),
        ({"max_min_share": 3.0}, ["fairness"]),
        ({"queue_s": Quantiles(0.1, 2.0, 3.5)}, ["fairness"]),
        ({"decode_stall_max_ratio": 12.0}, ["decode_starvation"]),
        ({"prefill_wait_max_s": 9.0}, ["prefill_starvation"]),
        ({"errors": 5}, ["errors"]),  # 5 / 105 > 1 %
        ({"memory_bytes": MemoryFigures(gpu_max=7.9e9, gpu_total=8e9)}, ["memory"]),
        ({"errors": 5, "jain": 0.5, "ttft_s": Quantiles(1, 2, 3)}, ["errors", "slo_ttft", "fairness"]),
        ({"jain": None, "ttft_s": Quantiles(), "decode_stall_max_ratio": None}, []),  # unmeasured: unchecked
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
    verdict = check_step(step(4, 400, requests=2, decode_stall_max_ratio=99.0), POLICY)
    assert not verdict.usable and verdict.constraint_names() == ["decode_starvation"]
    invalid = check_step(step(4, 400, valid=False, decode_stall_max_ratio=99.0), POLICY)
    assert invalid.violations == ()


def test_stable_interval_keeps_a_step_usable() -> None:
    assert check_step(step(4, 400, throughput_ci_tok_s=(390.0, 410.0)), POLICY).ok
