"""The engine in virtual time: admission order, waiting, decode stalls, lengths, KV limits, counters."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from satbench.simulator.engine import ContextLimitError, Engine, RequestSpec
from satbench.simulator.profile import Profile, load_profile
from satbench.simulator.stepcost import step_seconds
from satbench.simulator.virtual import run_closed_loop, run_requests


def _dense(**server: object) -> Profile:
    return load_profile("dense").with_overrides(**server)


def _gaps(emissions: list[tuple[float, str, int]], rid: str) -> list[float]:
    times = [t for t, r, n in emissions if r == rid and n > 0]
    return [b - a for a, b in itertools.pairwise(times)]


def test_requests_beyond_slots_wait_and_are_admitted_fifo() -> None:
    profile = _dense(slots=2)
    arrivals = [
        (i * 0.001, RequestSpec(f"r{i}", 16, 8, ignore_eos=True, user=f"user-{9 - i}")) for i in range(6)
    ]
    engine, _ = run_requests(profile, arrivals)
    by_id = {r.request_id: r for r in engine.truth}
    admitted = sorted(by_id.values(), key=lambda r: (r.admitted or 0.0, r.request_id))
    assert [r.request_id for r in admitted] == [f"r{i}" for i in range(6)]
    first_done = min(r.last_token for r in by_id.values() if r.last_token is not None)
    assert by_id["r2"].admitted == pytest.approx(first_done)
    assert (by_id["r2"].admitted or 0.0) > by_id["r2"].arrival
    assert {r.slot for r in by_id.values()} == {0, 1}
    assert all(r.output_tokens == 8 for r in by_id.values())


def test_unfair_admission_favours_low_user_numbers_and_starves_the_rest() -> None:
    profile = _dense(slots=2, admission="unfair")
    result = run_closed_loop(profile, concurrency=4, prompt_tokens=16, output_tokens=8, requests_per_user=6)
    served: dict[str, int] = {}
    for r in result.truth:
        served[r.user or ""] = served.get(r.user or "", 0) + 1
    assert served.get("user-0") == 6 and served.get("user-1") == 6
    first_high = min(r.admitted or 0.0 for r in result.truth if r.user in ("user-2", "user-3"))
    last_low = max(r.admitted or 0.0 for r in result.truth if r.user in ("user-0", "user-1"))
    assert first_high >= last_low  # users 2 and 3 wait until users 0 and 1 have nothing left to send

    fair = run_closed_loop(
        _dense(slots=2), concurrency=4, prompt_tokens=16, output_tokens=8, requests_per_user=6
    )
    fair_first_high = min(r.admitted or 0.0 for r in fair.truth if r.user in ("user-2", "user-3"))
    assert fair_first_high < first_high


@pytest.mark.parametrize(("batch", "expect_long_stall"), [(2048, True), (256, False)])
def test_long_prompt_stalls_running_decodes_unless_prefill_is_chunked(
    batch: int, expect_long_stall: bool
) -> None:
    profile = _dense(batch=batch, ubatch=min(batch, 512))
    long_prompt = 1600
    arrivals = [
        (0.0, RequestSpec("short-a", 16, 200, ignore_eos=True)),
        (0.0, RequestSpec("short-b", 16, 200, ignore_eos=True)),
        (0.1, RequestSpec("long", long_prompt, 4, ignore_eos=True)),
    ]
    engine, emissions = run_requests(profile, arrivals)
    s, c = profile.server, profile.cost
    itl = step_seconds(c, 2, 0, s.ubatch)
    worst = max(_gaps(emissions, "short-a"))
    if expect_long_stall:
        # the whole prompt runs in one step together with the two decodes
        assert worst == pytest.approx(step_seconds(c, 2, long_prompt, s.ubatch), rel=1e-9)
        assert worst > 20 * itl
    else:
        assert worst == pytest.approx(step_seconds(c, 2, batch - 2, s.ubatch), rel=1e-9)
        assert worst < 8 * itl
    long_rec = next(r for r in engine.truth if r.request_id == "long")
    assert long_rec.first_token is not None and long_rec.admitted is not None
    assert long_rec.first_token - long_rec.admitted >= step_seconds(c, 0, long_prompt, s.ubatch) * 0.5


def test_max_tokens_and_ignore_eos_are_honoured() -> None:
    profile = _dense()
    engine, _ = run_requests(
        profile,
        [
            (0.0, RequestSpec("fixed", 8, 40, ignore_eos=True)),
            (0.0, RequestSpec("eos", 8, 1000, ignore_eos=False)),
            (0.0, RequestSpec("short-max", 8, 3, ignore_eos=False)),
        ],
    )
    out = {r.request_id: r for r in engine.truth}
    assert out["fixed"].output_tokens == 40 and out["fixed"].finish_reason == "length"
    lo, hi = profile.eos_tokens
    assert lo <= out["eos"].output_tokens <= hi and out["eos"].finish_reason == "stop"
    assert out["short-max"].output_tokens == 3 and out["short-max"].finish_reason == "length"


def test_unlimited_generation_stops_at_the_slot_context() -> None:
    profile = dataclasses.replace(
        load_profile("dense"), server=dataclasses.replace(load_profile("dense").server, ctx_tokens=64)
    )
    engine, _ = run_requests(profile, [(0.0, RequestSpec("all", 10, -1, ignore_eos=True))])
    assert engine.truth[0].output_tokens == 54


def test_prompt_longer_than_context_is_refused() -> None:
    engine = Engine(_dense())
    with pytest.raises(ContextLimitError):
        engine.submit(RequestSpec("huge", 40000, 8), 0.0)


def test_requests_wait_when_the_kv_cache_is_full() -> None:
    base = load_profile("dense")
    profile = dataclasses.replace(base, server=dataclasses.replace(base.server, ctx_tokens=300))
    engine, _ = run_requests(
        profile,
        [
            (0.0, RequestSpec("a", 100, 100, ignore_eos=True)),
            (0.0, RequestSpec("b", 100, 100, ignore_eos=True)),
        ],
    )
    a, b = sorted(engine.truth, key=lambda r: r.request_id)
    assert a.admitted == 0.0
    assert b.admitted == pytest.approx(a.last_token)  # a free slot alone is not enough


def test_counters_follow_llama_server_semantics() -> None:
    profile = _dense(slots=2)
    engine, _ = run_requests(profile, [(0.0, RequestSpec(f"r{i}", 10, 5, ignore_eos=True)) for i in range(2)])
    c = engine.counters
    assert c.prompt_tokens_total == 20
    assert c.tokens_predicted_total == 10
    assert c.n_decode_total == 5  # one prefill step (both prompts) + 4 decode steps
    assert c.n_busy_slots_total / c.n_decode_total == pytest.approx(2.0)
    assert c.n_tokens_max == 15
    assert c.bucket_predicted_tokens == 10


def test_cancel_frees_the_slot_for_the_next_waiting_request() -> None:
    engine = Engine(_dense(slots=1))
    a = engine.submit(RequestSpec("a", 8, 100, ignore_eos=True), 0.0)
    b = engine.submit(RequestSpec("b", 8, 100, ignore_eos=True), 0.0)
    c = engine.submit(RequestSpec("c", 8, 100, ignore_eos=True), 0.0)
    plan = engine.begin_step(0.0)
    assert plan is not None and a.slot == 0 and b.state == "waiting"
    engine.cancel(c, 0.001)  # a waiting request just leaves the queue
    engine.cancel(a, 0.002)  # a running one frees its slot; the step in flight emits nothing for it
    result = engine.finish_step()
    assert result.emissions == ()
    engine.begin_step(result.end)
    assert b.slot == 0 and b.admitted == result.end
    assert [(r.request_id, r.finish_reason) for r in engine.truth] == [("c", "cancelled"), ("a", "cancelled")]


def test_time_scale_stretches_every_step() -> None:
    fast, _ = run_requests(_dense(), [(0.0, RequestSpec("r", 16, 10, ignore_eos=True))])
    slow, _ = run_requests(_dense(time_scale=3.0), [(0.0, RequestSpec("r", 16, 10, ignore_eos=True))])
    f, s = fast.truth[0], slow.truth[0]
    assert f.last_token is not None and s.last_token is not None
    assert s.last_token == pytest.approx(3 * f.last_token)
