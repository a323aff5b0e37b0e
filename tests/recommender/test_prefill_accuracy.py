"""The peak prefill answer against the engine's own prefill capacity, over seeded draws of a declared space.

A small seeded subset of ``bench/prefill_accuracy.py`` (``testkit.accuracy.prefill``): the truth is the engine's
construction (its own step counts, never satbench's analysis), the answer satbench's walk (``core.prefill``,
``core.prefill_peak``) on the same engine in virtual time. The ruler is checked first against arithmetic: one
slot, two users, no noise, where the steps a P-token prompt takes are known.
"""

from __future__ import annotations

import dataclasses

import pytest

from satbench.simulator.profile import CostModel
from satbench.simulator.stepcost import step_seconds
from testkit.accuracy.prefill import PrefillSpace, attainable_truth, measure_draw, prefill_truth, sample

SPACE = PrefillSpace()
COST = CostModel(step_overhead_ms=2.0, weights_ms=10.0, decode_ms_per_token=0.1, prefill_ms_per_token=0.05)


@pytest.mark.parametrize(("batch", "prompt"), [(2048, 1000), (256, 265), (512, 2048)])
def test_the_attainable_truth_is_the_steps_of_one_slots_prompt(batch: int, prompt: int) -> None:
    """One slot: a queue of prompts runs back to back, each its chunks of ``-b`` (265 tokens at ``-b`` 256: a
    full step and a 9-token one, below the construction's bound of full steps)."""
    draw = dataclasses.replace(sample(SPACE, 1, 0), cost=COST, slots=1, batch=batch, ubatch=min(batch, 512),
                               prompt_tokens=prompt)
    chunks = [batch] * (prompt // batch) + ([prompt % batch] if prompt % batch else [])
    expected = prompt / sum(step_seconds(COST, 0, n, draw.ubatch) for n in chunks)
    truth, users = attainable_truth(draw, SPACE)
    assert truth == pytest.approx(expected, rel=2e-3) and users >= 2  # one user idles while it turns round
    bound = prefill_truth(draw)
    assert truth <= bound * (1 + 1e-9)
    assert (truth < 0.9 * bound) == (prompt == 265)


@pytest.mark.slow
def test_the_peak_is_within_ten_percent_of_the_engines_prefill_over_seeded_draws() -> None:
    draws = [measure_draw(sample(SPACE, 7, i), SPACE) for i in range(24)]
    regimes = {d.draw.regime.split(" ")[0] for d in draws}
    assert {"chunked", "unchunked", "slot-bound"} <= regimes and any(d.draw.moe for d in draws)
    assert all(d.truth <= d.capacity * (1 + 1e-9) for d in draws)
    settled = [d for d in draws if d.status == "settled"]
    assert len(settled) >= 0.8 * len(draws), [(d.draw.draw, d.status) for d in draws]
    off = [(d.draw.draw, d.error) for d in settled if d.error is None or abs(d.error) > 0.20]
    assert not off
    within = [d for d in draws if d.error is not None and abs(d.error) <= 0.10]
    assert len(within) >= 0.9 * len(draws), [(d.draw.draw, d.status, d.error) for d in draws]


def test_the_engine_whose_shoulder_spans_two_doublings_is_walked_past_it() -> None:
    """Seed 2, draw 68 (3 slots, -b 2048, 732-token prompts): flat from 1 to 4 users, 20 % more from 6; the
    walk settled at 4 users on 83 % of it before the rule waited for twice the slots (``core.prefill_peak``)."""
    result = measure_draw(sample(SPACE, 2, 68), SPACE)
    assert result.draw.slots == 3 and result.truth_c >= 6
    assert result.status == "settled" and result.concurrency is not None and result.concurrency >= 6
    assert result.error is not None and abs(result.error) <= 0.05
