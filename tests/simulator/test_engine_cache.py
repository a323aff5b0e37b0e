"""The engine's prompt cache in virtual time: a held prefix costs no prefill; no token ids, no cache."""

from __future__ import annotations

import pytest

from satbench.simulator.capacity import closed_loop_capacity
from satbench.simulator.engine import Engine, RequestSpec
from satbench.simulator.profile import load_profile
from satbench.simulator.stepcost import step_seconds
from satbench.simulator.virtual import run_closed_loop


def run_one(engine: Engine, spec: RequestSpec, now: float) -> tuple[float, float]:
    req = engine.submit(spec, now)
    while req.state not in ("done", "cancelled"):
        plan = engine.begin_step(now)
        assert plan is not None
        now = engine.finish_step().end
    assert req.first_token is not None and req.admitted is not None
    return req.first_token - req.admitted, now


def test_a_held_prefix_costs_no_prefill_and_is_counted_apart() -> None:
    profile = load_profile("dense").with_overrides(slots=1)
    engine = Engine(profile)
    ids = tuple(range(1, 101))
    spec = RequestSpec("a", 100, 4, ignore_eos=True, prompt_ids=ids)
    ttft_cold, now = run_one(engine, spec, 0.0)
    ttft_warm, now = run_one(engine, RequestSpec("b", 100, 4, ignore_eos=True, prompt_ids=ids), now)
    s = profile.server
    assert ttft_cold == pytest.approx(step_seconds(profile.cost, 0, 100, s.ubatch), abs=1e-12)
    # all but the last token reused: the prompt step evaluates one token
    assert ttft_warm == pytest.approx(step_seconds(profile.cost, 0, 1, s.ubatch), abs=1e-12)
    half = (*ids[:50], 999, *ids[51:])
    run_one(engine, RequestSpec("c", 100, 4, ignore_eos=True, prompt_ids=half), now)
    c = engine.counters
    assert c.prompt_tokens_cached_total == 99 + 50
    assert c.prompt_tokens_total == 100 + 1 + 50


def test_cache_prompt_false_and_specs_without_ids_leave_the_timing_model_alone() -> None:
    profile = load_profile("dense").with_overrides(slots=1)
    engine = Engine(profile)
    ids = tuple(range(1, 41))
    _, now = run_one(engine, RequestSpec("a", 40, 2, ignore_eos=True, prompt_ids=ids), 0.0)
    ttft, now = run_one(engine, RequestSpec("b", 40, 2, ignore_eos=True, prompt_ids=ids, cache_prompt=False), now)
    assert ttft == pytest.approx(step_seconds(profile.cost, 0, 40, profile.server.ubatch), abs=1e-12)
    ttft, _ = run_one(engine, RequestSpec("c", 40, 2, ignore_eos=True), now)
    assert ttft == pytest.approx(step_seconds(profile.cost, 0, 40, profile.server.ubatch), abs=1e-12)
    dense = load_profile("dense")
    point = closed_loop_capacity(dense, 64, 32, 4)
    res = run_closed_loop(dense, 4, 64, 32)
    assert res.throughput_tok_s == pytest.approx(point.throughput_tok_s, rel=1e-9)


def test_slot_with_the_best_prefix_is_chosen() -> None:
    profile = load_profile("dense").with_overrides(slots=2)
    engine = Engine(profile)
    a, b = tuple(range(1, 51)), tuple(range(100, 150))
    for spec in (RequestSpec("a", 50, 2, ignore_eos=True, prompt_ids=a),
                 RequestSpec("b", 50, 2, ignore_eos=True, prompt_ids=b)):
        engine.submit(spec, 0.0)
    now = 0.0
    while engine.has_work():
        assert engine.begin_step(now) is not None
        now = engine.finish_step().end
    slot_of_b = next(r.slot for r in engine.truth if r.request_id == "b")
    req = engine.submit(RequestSpec("b2", 50, 2, ignore_eos=True, prompt_ids=b), now)
    engine.begin_step(now)
    assert req.slot == slot_of_b and req.cache_n == 49
