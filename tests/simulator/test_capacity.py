"""The analytic capacity against the engine run in virtual time, and the shape the ladder relies on."""

from __future__ import annotations

import itertools

import pytest

from satbench.simulator.capacity import CapacityError, capacity_curve, closed_loop_capacity
from satbench.simulator.profile import load_profile
from satbench.simulator.stepcost import distinct_experts, microbatch_sizes, step_seconds
from satbench.simulator.virtual import run_closed_loop

LADDER = [1, 2, 4, 8]


@pytest.mark.parametrize("name", ["dense", "moe"])
@pytest.mark.parametrize(("prompt", "output"), [(32, 32), (128, 64)])
def test_throughput_follows_the_analytic_curve_within_2_percent(name: str, prompt: int, output: int) -> None:
    profile = load_profile(name)
    for point in capacity_curve(profile, prompt, output, [*LADDER, 12]):
        assert point.method == "closed_form"
        measured = run_closed_loop(profile, point.concurrency, prompt, output, requests_per_user=5)
        assert measured.throughput_tok_s == pytest.approx(point.throughput_tok_s, rel=0.02)


def test_desynchronised_users_stay_close_to_the_curve() -> None:
    """Users that do not start together mix prefills into decode steps; the curve still holds within 5%."""
    profile = load_profile("dense")
    point = closed_loop_capacity(profile, 64, 64, 4)
    measured = run_closed_loop(profile, 4, 64, 64, requests_per_user=12, offsets_s=(0.0, 0.013, 0.029, 0.071))
    assert measured.throughput_tok_s == pytest.approx(point.throughput_tok_s, rel=0.05)


def test_chunked_prefill_falls_back_to_the_virtual_engine() -> None:
    profile = load_profile("dense").with_overrides(batch=64, ubatch=64)
    point = closed_loop_capacity(profile, 128, 32, 4)
    assert point.method == "virtual_time"
    assert point.throughput_tok_s > 0 and point.itl_s > 0


def test_default_profiles_saturate_at_different_concurrency() -> None:
    """dense gains nothing past its 4 slots; moe still gains >= 10% from 4 to 8 users."""
    dense = [p.throughput_tok_s for p in capacity_curve(load_profile("dense"), 64, 64, LADDER)]
    moe = [p.throughput_tok_s for p in capacity_curve(load_profile("moe"), 64, 64, LADDER)]
    gains_dense = [b / a - 1 for a, b in itertools.pairwise(dense)]
    gains_moe = [b / a - 1 for a, b in itertools.pairwise(moe)]
    assert gains_dense[0] > 0.5 and gains_dense[1] > 0.5 and gains_dense[2] == pytest.approx(0.0, abs=1e-9)
    assert all(g > 0.10 for g in gains_moe)
    assert gains_moe[0] > gains_moe[1] > gains_moe[2]


def test_default_session_is_fast() -> None:
    """A 5 s rung at concurrency 1 with 64/64-token requests sees a few hundred tokens or more."""
    for name in ("dense", "moe"):
        point = closed_loop_capacity(load_profile(name), 64, 64, 1)
        assert point.throughput_tok_s * 5 >= 300
        assert point.e2e_s < 1.0


def test_queue_time_beyond_the_slots_is_whole_cycles() -> None:
    point = closed_loop_capacity(load_profile("dense"), 64, 64, 8)
    assert point.running == 4
    assert point.queue_s == pytest.approx(point.cycle_s)
    assert point.ttft_s > point.queue_s


def test_bad_workloads_are_refused() -> None:
    with pytest.raises(CapacityError):
        closed_loop_capacity(load_profile("dense"), 0, 10, 1)
    with pytest.raises(CapacityError):
        closed_loop_capacity(load_profile("dense"), 30000, 10000, 1)


def test_step_cost_shape() -> None:
    dense, moe = load_profile("dense").cost, load_profile("moe").cost
    assert microbatch_sizes(1100, 512) == [512, 512, 76]
    assert microbatch_sizes(0, 512) == []
    assert distinct_experts(dense, 8) == 0.0
    experts = [distinct_experts(moe, n) for n in (1, 2, 8, 64, 4096)]
    assert experts[0] == pytest.approx(8.0)
    assert experts == sorted(experts) and experts[-1] == pytest.approx(256.0, rel=1e-6)
    # per-token decode cost falls with the batch for both, but far less for the MoE
    per_token = {
        name: [step_seconds(c, b, 0, 512) / b for b in (1, 8)] for name, c in (("dense", dense), ("moe", moe))
    }
    assert per_token["dense"][1] < 0.3 * per_token["dense"][0]
    assert per_token["moe"][1] > 0.4 * per_token["moe"][0]
    assert step_seconds(dense, 0, 0, 512) == 0.0
    assert step_seconds(dense, 1, 0, 512, time_scale=2.0) == pytest.approx(2 * step_seconds(dense, 1, 0, 512))
