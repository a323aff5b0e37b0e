"""Peak prefill throughput (``core.prefill_peak``): the rule on tables of rungs, and the walk against an
engine whose prefill capacity is known.

The engine of the accuracy test is the scenario, not the code: prompt tokens/s at concurrency c are
``K * c / (c + h)`` (capacity ``K``; ``h`` the concurrency at which half of it is reached, larger where a
request's fixed costs weigh more), a hard cap ``min(c * K / h, K)``, or the first with a shoulder (flat from
c=1 to c=2, as two closed-loop users' prompts land in alternate steps), each rung read with noise and its
interval. The walk (``next_prefill_rung``) and the answer (``peak_prefill``) must land within 10 % of ``K``.
"""

from __future__ import annotations

import random

import pytest

from satbench.core.prefill_peak import PrefillRung, next_prefill_rung, peak_prefill, saturating_concurrency

MIN_GAIN = 0.10


def rung(c: int, tok_s: float, half_width: float = 0.01, requests: int = 40) -> PrefillRung:
    return PrefillRung(c, tok_s, (tok_s * (1 - half_width), tok_s * (1 + half_width)), requests)


@pytest.mark.parametrize(("rungs", "status", "peak", "at", "nxt"), [
    ([], "insufficient_data", None, None, 1),
    ([rung(1, 1000, requests=9)], "insufficient_data", None, None, 2),
    ([rung(1, 1000)], "unsaturated", 1000, 1, 2),
    ([rung(1, 1000), rung(2, 2000), rung(4, 4000), rung(8, 4000)], "unsaturated", 4000, 4, 16),  # flat once
    ([rung(1, 1000), rung(2, 2000), rung(4, 4000), rung(8, 4000), rung(16, 4050)], "settled", 4050, 16, None),
    ([rung(1, 1000), rung(2, 1900), rung(4, 3000), rung(8, 2900), rung(16, 3000)], "settled", 3000, 4, None),
    ([rung(1, 1000, 0.1), rung(2, 1080, 0.1)], "undecided", 1080, 2, 4),  # +8 %, interval across 10 %
    ([rung(1, 1000, 0.1), rung(2, 1300, 0.1), rung(4, 1450, 0.01)], "undecided", 1450, 4, 8),
    ([rung(1, 1000), rung(2, 1030), rung(4, 4000)], "unsaturated", 4000, 4, 8),  # a shoulder, then the climb
    ([rung(1, 1000), rung(2, 1030), rung(4, 4000), rung(8, 4100), rung(16, 4000)], "settled", 4100, 8, None),
    ([rung(1, 1000), rung(2, 2000), rung(4, 3900, requests=3)], "unsaturated", 2000, 2, 8),
], ids=["nothing", "too-few-requests", "one-rung", "flat-once", "hard-cap", "noisy-dip", "undecided",
        "undecided-late", "shoulder", "shoulder-then-plateau", "thin-rung-skipped"])
def test_the_rule_on_rungs(rungs: list[PrefillRung], status: str, peak: float | None, at: int | None,
                           nxt: int | None) -> None:
    answer = peak_prefill(rungs, min_gain_per_doubling=MIN_GAIN)
    assert (answer.status, answer.peak_tok_s, answer.concurrency) == (status, peak, at), answer.reason
    assert next_prefill_rung(rungs, min_gain_per_doubling=MIN_GAIN, max_concurrency=64) == nxt
    if peak is not None:
        assert answer.interval is not None and answer.interval[0] <= peak <= answer.interval[1]
        assert answer.reason


def test_the_walk_ends_at_the_ladders_top_and_says_it_is_a_lower_bound() -> None:
    rungs = [rung(1, 1000), rung(2, 2000), rung(4, 4000)]
    assert next_prefill_rung(rungs, min_gain_per_doubling=MIN_GAIN, max_concurrency=4) is None
    answer = peak_prefill(rungs, min_gain_per_doubling=MIN_GAIN)
    assert answer.status == "unsaturated" and "lower bound" in answer.reason


def walk(engine: dict[str, float], rng: random.Random, max_concurrency: int = 512) -> list[PrefillRung]:
    """The ladder against the engine: each rung's prompt tokens/s with noise ``sd`` and its interval."""
    rungs: list[PrefillRung] = []
    c = next_prefill_rung(rungs, min_gain_per_doubling=MIN_GAIN, max_concurrency=max_concurrency)
    for _ in range(20):  # bounded: 2^9 = 512
        if c is None:
            break
        k, h, sd = engine["K"], engine["h"], engine["sd"]
        if engine["shape"] == 2:  # a shoulder: flat from c=1 to 2 (prompts in alternate steps), then the curve
            truth = k * max(c, 2) / (max(c, 2) + h)
        else:
            truth = k * c / (c + h) if engine["shape"] == 0 else min(c * k / h, k)
        measured = truth * (1 + rng.gauss(0, sd))
        rungs.append(rung(c, measured, half_width=2 * sd + 0.002, requests=10 * c))
        c = next_prefill_rung(rungs, min_gain_per_doubling=MIN_GAIN, max_concurrency=max_concurrency)
    return rungs


def test_the_peak_is_within_a_tenth_of_the_engines_capacity_over_random_engines() -> None:
    rng = random.Random(41)
    draws, within, settled = 300, 0, 0
    for _ in range(draws):
        engine = {"K": rng.uniform(500, 50_000), "h": rng.uniform(0.5, 4.0), "sd": rng.uniform(0.0, 0.02),
                  "shape": rng.randrange(3)}
        answer = peak_prefill(walk(engine, rng), min_gain_per_doubling=MIN_GAIN)
        assert answer.peak_tok_s is not None
        settled += answer.status == "settled"
        within += abs(answer.peak_tok_s - engine["K"]) <= 0.10 * engine["K"]
    assert settled == draws  # the ladder's top (512) is above every engine's plateau here
    assert within >= 0.97 * draws, f"{within}/{draws} within 10 %"


def test_one_request_at_a_time_is_the_hand_run_figure_and_falls_short() -> None:
    """llm-d's hand-run recipe (prompt tokens / median TTFT of single requests) is the c=1 rung: on an engine
    with h = 2 it reads a third of the capacity; the walk reads the peak."""
    rng = random.Random(7)
    engine = {"K": 16_000.0, "h": 2.0, "sd": 0.0, "shape": 0}
    rungs = walk(engine, rng)
    assert rungs[0].concurrency == 1 and rungs[0].prompt_tok_s == pytest.approx(16_000 / 3)
    answer = peak_prefill(rungs, min_gain_per_doubling=MIN_GAIN)
    assert answer.status == "settled" and answer.peak_tok_s == pytest.approx(16_000 * 64 / 66)


# an engine of bench/prefill_accuracy.py (seed 2, draw 68): 3 slots, -b 2048, 732-token prompts, flat over two
# doublings while the queue cannot refill every slot a step frees, then 28.9k prompt tok/s from 6 users
SHOULDER = [rung(1, 22900), rung(2, 24060), rung(4, 24097)]
CLIMB = [*SHOULDER, rung(8, 28900), rung(16, 28950), rung(32, 28900)]


@pytest.mark.parametrize(("slots", "batch", "prompt", "saturating"), [
    (3, 2048, 732, 6), (8, 8192, 1024, 16), (1, 512, 256, 2),
    (8, 2048, 6144, 1), (8, 2048, 2048, 1),  # a prompt fills a step: no queue needed
    (None, 2048, 732, 1), (3, None, 732, 1), (3, 2048, None, 1), (0, 2048, 732, 1),  # unknown: the rule alone
])
def test_the_saturating_concurrency_is_twice_the_slots_where_prompts_share_a_step(
        slots: int | None, batch: int | None, prompt: int | None, saturating: int) -> None:
    assert saturating_concurrency(slots, batch, prompt) == saturating


@pytest.mark.parametrize(("rungs", "saturating", "status", "peak", "nxt"), [
    (SHOULDER, 1, "settled", 24097, None),  # the rule alone: two flat doublings settle it, at 83 % of the peak
    (SHOULDER, 6, "unsaturated", 24097, 8),  # below twice the slots: a lower bound, and the walk goes on
    (CLIMB[:4], 6, "unsaturated", 28900, 16),
    (CLIMB, 6, "settled", 28950, None),
    (SHOULDER, 4, "settled", 24097, None),  # two slots: 4 users already refill both
    ([rung(1, 1000), rung(2, 1010), rung(4, 1005), rung(8, 1000)], 8, "settled", 1010, None),
], ids=["rule-alone", "below-saturating", "climbing", "settled-above", "two-slots", "flat-from-one"])
def test_the_plateau_counts_from_the_saturating_concurrency(rungs: list[PrefillRung], saturating: int, status: str,
                                                            peak: float, nxt: int | None) -> None:
    answer = peak_prefill(rungs, min_gain_per_doubling=MIN_GAIN, saturating=saturating)
    assert (answer.status, answer.peak_tok_s) == (status, peak), answer.reason
    assert next_prefill_rung(rungs, min_gain_per_doubling=MIN_GAIN, max_concurrency=64, saturating=saturating) == nxt
    if status == "unsaturated" and len(rungs) == 3:
        assert "below c=6, twice the slots" in answer.reason


def test_a_walk_that_cannot_reach_twice_the_slots_says_it_is_a_lower_bound() -> None:
    rungs = [rung(1, 1000), rung(2, 1010), rung(4, 1005), rung(8, 1000)]
    assert next_prefill_rung(rungs, min_gain_per_doubling=MIN_GAIN, max_concurrency=8, saturating=32) is None
    answer = peak_prefill(rungs, min_gain_per_doubling=MIN_GAIN, saturating=32)
    assert answer.status == "unsaturated" and "lower bound" in answer.reason and answer.peak_tok_s == 1010
