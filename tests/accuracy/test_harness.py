"""The accuracy datasheet's harness checked against closed forms, not the accuracy figures themselves.

The engine and the truths (``testkit.accuracy``) are the datasheet's ruler: each test puts the engine where
queueing theory or arithmetic knows the answer (a deterministic one-slot server, an M/D/1 queue, evenly spaced
trace arrivals) and compares the harness's truth with it. One seeded draw then runs the whole answer path, so a
moved satbench function breaks here, in ``make test``, before the bench.
"""

from __future__ import annotations

import dataclasses
import math
import random
import statistics

import pytest

from testkit.accuracy.datasheet import measure_draw, render, table
from testkit.accuracy.engine import EngineSpec, serve_closed, serve_open
from testkit.accuracy.space import Condition, Lengths, Space, TraceShape, sample
from testkit.accuracy.traffic import TraceRows, open_arrivals, unit_gaps
from testkit.accuracy.truth import (
    Rules,
    RungTruth,
    concurrency_margin,
    hold_elasticity,
    hold_shape,
    shape_margin,
    stall_limit,
    true_capacity,
    true_factor,
    true_rate,
    true_rungs,
)

A, B, P = 0.02, 0.001, 0.0001  # step cost: fixed, per decoding slot, per prompt token


def condition(slots: int, prompt: int, output: int, *, ttft_s: float = 1000.0, tpot_s: float = 1000.0,
              cv: float = 1.0, chunk: int = 0) -> Condition:
    """A draw with fixed lengths (sigma 0) and no noise: every step's cost is known."""
    return Condition(seed=0, index=0, engine=EngineSpec(slots, A, B, P, chunk, 0.0), model="dense", speed="fast",
                     prompt=Lengths(prompt, 0.0, 8192), output=Lengths(output, 0.0, 1024), long_share=0.0,
                     long_factor=4.0, ttft_s=ttft_s, ttft_per_1k_s=0.0, tpot_s=tpot_s, cv=cv,
                     trace=TraceShape("stationary", 100, 1.0))


def spread(chunk: int, sigma: float = 1.0, median: float = 200.0) -> Condition:
    """A draw whose prompts spread lognormally about ``median``, prefilled whole (0) or ``chunk`` tokens a step."""
    return dataclasses.replace(condition(slots=4, prompt=1, output=10, chunk=chunk),
                               prompt=Lengths(median, sigma, 8192))


def test_the_holds_shape_is_the_prompts_share_of_a_step_not_the_configuration() -> None:
    """The stall limit follows the hold the workload meets (``truth.hold_grows``): a whole prefill's hold grows
    with the prompt (elasticity 1); a chunk above nearly every prompt prefills each whole (the same, within the
    few prompts past it); a chunk far below the prompts holds every decode a chunk's worth whatever the prompt
    (0), where a hold is judged against the pause objective, not the 0.1 s of an unbounded one; so are holds of
    prompts too alike to show a shape (the policy's definition sees none)."""
    rules = Rules()
    whole, wide, narrow = spread(0), spread(8192), spread(16, median=2000.0)
    assert hold_elasticity(whole) == pytest.approx(1.0)
    assert hold_elasticity(wide) == pytest.approx(1.0)
    assert hold_elasticity(narrow) == pytest.approx(0.0, abs=1e-9)
    assert stall_limit(whole, rules) == stall_limit(wide, rules) == rules.pause_whole_prefill_s
    assert stall_limit(narrow, rules) == rules.pause_s
    # a chunk at the prompts' median: the longer half's steps are mostly whole chunks, their hold bounded
    middle = hold_elasticity(spread(200))
    assert middle is not None and 0.0 < middle < rules.unbounded_elasticity
    # prompts too alike to show a shape, as the policy sees them: the pause objective, whatever the engine
    alike = spread(0, sigma=0.1)
    assert hold_elasticity(alike) is None and stall_limit(alike, rules) == rules.pause_s


def test_which_stall_limit_applies_is_a_threshold_the_margin_counts() -> None:
    """The prompts' twofold ratio and the 0.8 elasticity choose the stall limit, so a draw near either is near a
    threshold (``truth.shape_margin``), counted where a rung's p99 hold lies between the two limits."""
    rules = Rules()
    assert shape_margin(spread(0)) == pytest.approx(0.25)  # grows (elasticity 1, 0.25 past 0.8), ~4x apart
    near = spread(0, sigma=0.48)  # whole prompts whose halves' medians are a little less than twofold apart
    shape = hold_shape(near)
    assert shape is not None and 1.8 < shape[0] < 2.0 and hold_elasticity(near) is None
    assert shape_margin(near) == pytest.approx(1 - shape[0] / 2)
    assert shape_margin(spread(16, median=2000.0)) == pytest.approx(1.0)  # bounded: 0 against 0.8
    assert shape_margin(spread(0, sigma=0.1)) > 0.4  # alike prompts, far from twofold
    calm = RungTruth(2, 100.0, 1.0, 1.0, 0.01, 0.05, 1.0)  # held 50 ms: within both limits
    between = dataclasses.replace(calm, pause_p99_s=0.15)  # past 0.1 s, within 0.25 s: the limit decides
    first = RungTruth(1, 60.0, 0.6, 1.0, 0.01, 0.0, 1.0)
    assert concurrency_margin([first, calm], near, rules) > 0.5
    assert concurrency_margin([first, between], near, rules) == pytest.approx(shape_margin(near))


def test_one_user_on_one_slot_runs_at_the_step_costs_rate() -> None:
    """c=1: a prefill step (a + p x prompt) then output - 1 decode steps (a + b), the user's re-send jitter
    (under 0.3 ms) aside: requests/s, tokens/s, TTFT and the decode gap are arithmetic."""
    cond = condition(slots=1, prompt=400, output=50, ttft_s=A + P * 400 + 1e-6, tpot_s=A + B + 1e-6)
    rung = true_rungs(cond, Rules(), top=1)[0]
    cycle = A + P * 400 + 49 * (A + B)
    assert rung.requests_per_s == pytest.approx(1 / cycle, rel=0.01)
    assert rung.throughput_tok_s == pytest.approx(50 / cycle, rel=0.01)
    assert rung.itl_p95_s == pytest.approx(A + B, rel=1e-9)
    assert rung.ttft_share == 1.0
    tighter = condition(slots=1, prompt=400, output=50, ttft_s=A + P * 400 - 1e-6)
    assert true_rungs(tighter, Rules(), top=1)[0].ttft_share == 0.0


def test_a_closed_loop_with_every_slot_busy_completes_slots_per_cycle() -> None:
    """Capacity: with more users than slots, a one-slot server is never idle, so it completes one request per
    prefill + decode cycle; chunked prefill of a prompt in 100-token chunks costs 4 steps instead of 1."""
    whole = condition(slots=1, prompt=400, output=20)
    assert true_capacity(whole) == pytest.approx(1 / (A + P * 400 + 19 * (A + B)), rel=0.01)
    chunked = condition(slots=1, prompt=400, output=20, chunk=100)
    assert true_capacity(chunked) == pytest.approx(1 / (4 * A + P * 400 + 19 * (A + B)), rel=0.01)


@pytest.mark.slow
def test_the_open_loop_engine_is_an_md1_queue_with_the_pollaczek_khinchine_wait() -> None:
    """One slot, one output token (the request ends at its first token), Poisson arrivals: M/D/1 with service
    s = a + p x prompt; the mean wait in queue is rho s / (2 (1 - rho))."""
    cond = condition(slots=1, prompt=300, output=1)
    s = A + P * 300
    for rho in (0.5, 0.8):
        waits = []
        for seed in range(2):
            arrivals = open_arrivals(cond, rho / s, unit_gaps(1.0, 20_000, f"md1:{seed}"), f"md1:{seed}")
            served = serve_open(cond.engine, arrivals)
            waits += [r.admitted - r.sent for r in served[1000:] if r.admitted is not None]
        assert statistics.mean(waits) == pytest.approx(rho * s / (2 * (1 - rho)), rel=0.08), rho


@pytest.mark.parametrize("cv", [0.5, 1.0, 4.0])
def test_the_truths_arrivals_have_the_drawn_burstiness(cv: float) -> None:
    gaps = unit_gaps(cv, 100_000, f"cv:{cv}")
    assert statistics.fmean(gaps) == pytest.approx(1.0, rel=0.04)
    assert statistics.pstdev(gaps) / statistics.fmean(gaps) == pytest.approx(cv, rel=0.06)


def test_the_rate_truth_below_capacity_is_the_capacity_where_no_latency_binds() -> None:
    """Objectives no wait can break: every rate below capacity attains them, so the truth is the capacity (to
    the bisection's precision and the finite run's reach)."""
    cond = condition(slots=1, prompt=300, output=1)
    capacity = true_capacity(cond)
    assert capacity == pytest.approx(1 / (A + P * 300), rel=0.01)
    assert 0.9 * capacity <= true_rate(cond, capacity) < capacity


def test_the_factor_truth_of_evenly_spaced_requests_sits_where_they_outrun_the_server() -> None:
    """100 requests g = 0.5 s apart on a one-slot server of service s = 0.05 s, sent ``cycles`` times in a row:
    past factor g / s = 10 the j-th request waits j (s - g / f) s. The last of the 90 % of the requests after the
    first pass that must attain (j = 99 + ceil(0.9 x 100 (cycles - 1))) meets a TTFT objective of 2 s while
    j (s - g / f) <= 2 - s: the truth is g / (s - 1.95 / j), to the bisection's precision."""
    rules = Rules()
    cond = condition(slots=1, prompt=300, output=1, ttft_s=2.0)
    s = A + P * 300
    rows = TraceRows(tuple((0.5 * i, 300, 1) for i in range(100)), 50.0)
    j = 99 + math.ceil(rules.target * 100 * (rules.cycles - 1))
    expected = 0.5 / (s - (2.0 - s) / j)
    assert true_factor(cond, rows, rules) == pytest.approx(expected, rel=rules.precision / 2 + 0.001)


def test_a_closed_loop_follows_the_requests_sent_before_its_window_ends() -> None:
    cond = condition(slots=2, prompt=100, output=30)
    served = serve_closed(cond.engine, 4, 100.0, lambda u, rng: (100, 30), follow_after=5.0)
    assert all(r.end is not None for r in served if r.sent <= 5.0)
    assert max(r.sent for r in served) < 5.0 + 3 * (A + P * 200 + 29 * (A + 2 * B)) + 0.01


def test_the_sampler_is_seeded_and_stays_inside_the_declared_space() -> None:
    space = Space()
    draws = [sample(space, 7, i) for i in range(200)]
    assert draws[13] == sample(space, 7, 13)
    assert {d.engine.slots for d in draws} <= set(range(1, 65))
    assert {d.engine.slots for d in draws} >= {1, 64}
    assert {d.trace.kind for d in draws} == {"stationary", "burst", "ramp_up", "ramp_down", "diurnal"}
    assert {d.engine.chunk for d in draws} == set(space.chunks)
    assert all(space.cv[0] <= d.cv <= space.cv[1] for d in draws)
    assert any(d.ttft_per_1k_s > 0 for d in draws) and any(d.long_share > 0 for d in draws)
    lengths = [d.prompt.draw(random.Random(0)) for d in draws]
    assert max(lengths) > 5 * statistics.median(lengths)  # a heavy tail


@pytest.mark.slow
def test_a_draw_runs_satbenchs_whole_answer_path_and_is_scored() -> None:
    """A small server (4 slots, short requests, Poisson arrivals, a stationary trace): each answer comes back
    with its truth, and the table scores it. The concurrency truth is arithmetic: a fixed-length request on
    a fast step gains at least the policy's 10 % per doubling up to the slots, and nothing past them."""
    cond = condition(slots=4, prompt=100, output=20, ttft_s=1.0, tpot_s=0.05)
    draw = measure_draw(cond)
    for name in ("concurrency", "rate", "trace"):
        entry = draw[name]
        assert entry["truth"] >= 0 and math.isfinite(entry["truth"]), name
        assert entry["status"], name
        assert entry["rungs_measured"] >= 1, name
    assert draw["concurrency"]["truth"] == 4
    rows = table([draw])
    assert [r.answer for r in rows] == ["concurrency", "rate", "trace"]
    assert "| rate | 1 |" in render(rows)
    # each trace rung carries the long run's share at its factor, so its stated interval is scored
    points = draw["trace"]["points"]
    assert points and all(0.0 <= p["true_attainment"] <= 1.0 for p in points)
    assert rows[2].coverage["rung attainment interval"][1] == sum(p["attainment_interval"] is not None
                                                                   for p in points)


def test_a_rung_held_for_its_throughput_ends_usable_by_its_own_figures() -> None:
    """The harness asks the load generator's held look at the batches the step's own figures are computed on
    (``loadgen.stop_rule.as_final_batches``), as ``loadgen.step`` does: draw 1:34's lowest rung (one user, output
    lengths of sigma 1.06) read usable from 0.25 s bins at 24 s and its figures then gave 30 % against 25 %
    allowed, and the lane had no answer. A window that ended before its cap is usable by its figures."""
    from testkit.accuracy.answers import closed_rung, session_config

    cond = sample(Space(), 1, 34)
    cfg = session_config(cond, Rules()).loadgen
    assert cfg.usable_ci_rel is not None and cfg.hold_max_window_s is not None
    rung = closed_rung(cond, cfg, 1, None, f"{cond.name}:rung:1")
    low, high = rung.throughput_ci_tok_s or (0.0, math.inf)
    assert rung.window_s > cfg.max_window_s  # held on: at 12 s it was not usable
    assert rung.window_s < cfg.hold_max_window_s and (high - low) / 2 <= cfg.usable_ci_rel * rung.throughput_tok_s


def _entry(truth: float, answer: float | None, status: str, interval: list[float] | None = None
           ) -> dict[str, object]:
    return {"truth": truth, "answer": answer, "status": status, "interval": interval, "points": [],
            "seconds": {"truth": 1.0, "answer": 2.0}}


def test_the_table_scores_settled_unsettled_and_absent_answers_and_interval_coverage() -> None:
    draws = [{"rate": _entry(1.0, 1.05, "settled", [0.95, 1.1])},  # on target, covered
             {"rate": _entry(1.0, 1.15, "settled", [1.1, 1.2])},  # neither on target nor far; not covered
             {"rate": _entry(1.0, 1.5, "settled", [1.4, 1.6])},  # far
             {"rate": _entry(1.0, 1.9, "unsaturated")},  # within one doubling
             {"rate": _entry(1.0, 4.5, "unsaturated")},  # two doublings off
             {"rate": _entry(0.0, None, "none")},  # right: nothing is served
             {"rate": _entry(2.0, None, "none")}]  # wrong
    (row,) = table(draws)
    assert (row.settled, row.unsettled, row.none, row.none_wrong) == (3, 2, 2, 1)
    assert (row.settled_on_target, row.settled_far) == (1, 1)
    assert row.unsettled_within_doubling == 1 and row.unsettled_doublings_max == pytest.approx(math.log2(4.5))
    assert row.coverage == {"rate interval (bracket)": (1, 3)}  # the unsettled state no interval
    assert row.error_max == pytest.approx(3.5) and row.seconds_median == 3.0


def test_a_concurrency_answer_is_on_target_only_on_the_truths_rung() -> None:
    draws = [{"concurrency": {**_entry(8, 8.0, "settled"), "gain_intervals": {"4-8": [0.2, 0.5]},
                              "true_gains": {"4-8": 0.3}}},
             {"concurrency": {**_entry(8, 4.0, "settled"), "gain_intervals": {"4-8": [0.2, 0.5]},
                              "true_gains": {"4-8": 0.05}}}]
    (row,) = table(draws)
    assert (row.settled_on_target, row.settled_far, row.rungs_off_max) == (1, 1, 1.0)
    assert row.coverage == {"gain per doubling interval": (1, 2)}
    # undecided: none is the ladder's rung below c=1, so c=1 where the truth is none is one rung off, c=2 two
    (row,) = table([{"concurrency": _entry(0, 1.0, "undecided")}, {"concurrency": _entry(0, 2.0, "undecided")}])
    assert row.unsettled_within_doubling == 1 and row.unsettled_doublings_max == pytest.approx(2.0)


def test_the_concurrency_margin_is_the_nearest_threshold_of_the_rungs_that_decide_it() -> None:
    from testkit.accuracy.truth import RungTruth, concurrency_margin

    cond = condition(8, 64, 64, ttft_s=1.0, tpot_s=0.1, chunk=256)

    def rung(c: int, tok_s: float, *, miss: float = 0.0, itl_over: float = 0.0, held: float = 0.0) -> RungTruth:
        return RungTruth(c, tok_s, 1.0, 1.0 - miss, 0.05, 0.0, 1.0, itl_over, held)

    # c=1 passes with 2.5 % of its gaps past the ITL objective (half the 5 % a p95 allows: 50 % away), c=2 doubles
    # the throughput (ratio 2 against 1.1: 82 % away) with 0.8 % held past the stall limit (20 % under the 1 % a
    # p99 allows), c=4 stops on a plateau (ratio 1.0: 9 % below 1.1)
    rungs = [rung(1, 100.0, itl_over=0.025), rung(2, 200.0, held=0.008), rung(4, 200.0)]
    assert concurrency_margin(rungs, cond) == pytest.approx(1 - 1 / 1.1)
    # a rung that fails far on one figure is as far as that figure, whatever its others
    rungs = [rung(1, 100.0, itl_over=0.025), rung(2, 200.0, itl_over=0.10, held=0.0095)]
    assert concurrency_margin(rungs, cond) == pytest.approx(0.5)  # c=1's ITL; c=2 fails by 100 %
    # TTFT: a 6 % miss share against the 5 % allowed is 20 % past it
    assert concurrency_margin([rung(1, 100.0, miss=0.06)], cond) == pytest.approx(0.2)


def test_the_far_row_holds_only_the_draws_far_from_every_threshold() -> None:
    near = {**_entry(8, 4.0, "settled"), "margin": 0.05}
    far = {**_entry(8, 8.0, "settled"), "margin": 0.5}
    rows = table([{"concurrency": near}, {"concurrency": far}])
    assert [r.answer for r in rows] == ["concurrency", "concurrency, truth >= 20% from every threshold"]
    assert (rows[0].settled_on_target, rows[0].settled) == (1, 2)
    assert (rows[1].settled_on_target, rows[1].settled) == (1, 1)
