"""The TPOT objective (``slo.tpot_p95_s``, check ``slo_tpot``): each request's mean pace after its first token,
held by 95 % of a rung's requests, as DistServe and vLLM's goodput state it.

The rungs are built from requests whose paces are set by the case, so the truth is read off the case, never
off the code under test: at c=8 a share of the answers are short (8 tokens) and crawl, 0.3 s a token, while
the long answers (200 tokens) keep 20 ms. The gaps' p95 (ITL) is the long answers' (they give 25x the gaps),
so the ITL objective holds at every rung; the requests' p95 (TPOT) is the short ones' where more than 5 % of
the requests are short and slow. Up to c=4 every request keeps 20-30 ms a token.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from satbench.answer.analysis import analyze_lane
from satbench.answer.checks import PAUSE_CONSTRAINTS, SLO_CONSTRAINTS, entry
from satbench.answer.policy import SLO, Policy, objectives_of
from satbench.answer.verdicts import check_step
from satbench.core.figures import StepFigures
from satbench.core.manifest import StepWindow
from satbench.core.records import RequestRecord
from satbench.core.step_figures import compute_step_figures
from tests.recommender.figures_factory import step

CURVE = {1: 100.0, 2: 200.0, 4: 400.0, 8: 800.0}
LIMIT = 0.1  # seconds per token after the first
TPOT = Policy(slo=SLO(ttft_p95_s=2.0, itl_p95_s=0.2, tpot_p95_s=LIMIT))
PLAIN = Policy(slo=SLO(ttft_p95_s=2.0, itl_p95_s=0.2))


def _record(c: int, i: int, pace_s: float, tokens: int) -> RequestRecord:
    gaps = (pace_s,) * (tokens - 1)
    return RequestRecord(run_id="t", lane="dense", concurrency=c, user=i % c, request_id=f"r{c}-{i}",
                         phase="window", sent_at=1.0 + 0.1 * i, ttft_s=0.2, e2e_s=0.2 + sum(gaps), queue_s=0.0,
                         itl_s=gaps, prompt_tokens=100, output_tokens=tokens, outcome="ok")


def _rung(c: int, slow_share: float, policy: Policy, rng: random.Random, n: int = 80) -> StepFigures:
    """A healthy rung (``figures_factory.step``) whose latency figures and goodput counts are the load
    generator's own (``core.step_figures``) from ``n`` requests, ``slow_share`` of them short and crawling."""
    records = []
    for i in range(n):
        if rng.random() < slow_share:
            records.append(_record(c, i, rng.uniform(0.25, 0.35), 8))
        else:
            records.append(_record(c, i, rng.uniform(0.02, 0.03), 200))
    window = StepWindow(lane="dense", concurrency=c, start=0.0, end=1.0 + 0.1 * n)
    got = compute_step_figures(records, window, objectives=objectives_of(policy))
    return replace(step(c, CURVE[c]), tpot_s=got.tpot_s, itl_s=got.itl_s, judged_requests=got.judged_requests,
                   attained_requests=got.attained_requests, objective_misses=got.objective_misses)


def _ladder(policy: Policy, seed: int, slow_at_8: float = 0.3) -> list[StepFigures]:
    rng = random.Random(seed)
    return [_rung(c, slow_at_8 if c == 8 else 0.0, policy, rng) for c in CURVE]


@pytest.mark.parametrize("seed", range(5))
def test_short_answers_that_crawl_bind_the_tpot_objective_where_itl_sees_nothing(seed: int) -> None:
    ladder = _ladder(TPOT, seed)
    top = ladder[-1]
    assert top.itl_s.p95 is not None and top.itl_s.p95 < 0.2  # the gaps' objective holds at every rung
    broken = check_step(top, TPOT).violations
    assert [v.constraint for v in broken] == ["slo_tpot"]
    assert broken[0].limit == LIMIT and broken[0].measured > 0.25
    assert "requests slower" in broken[0].detail
    answer = analyze_lane("dense", ladder, TPOT)
    assert (answer.recommended_concurrency, answer.binding_constraint) == (4, "slo_tpot"), answer.reason
    # unset, the objective is unchecked: the same requests answer 8, bound by the ladder's top
    plain = analyze_lane("dense", _ladder(PLAIN, seed), PLAIN)
    assert plain.recommended_concurrency == 8 and plain.binding_constraint != "slo_tpot"


@pytest.mark.parametrize("seed", range(5))
def test_a_p95_lets_one_request_in_twenty_be_slow(seed: int) -> None:
    """Two slow requests in 80 (2.5 %, under the 5 % a p95 allows): not broken, though the slowest are far
    past the objective. The count test, not the largest value."""
    rng = random.Random(seed)
    records = [_record(8, i, 0.3, 8) if i < 2 else _record(8, i, rng.uniform(0.02, 0.03), 200)
               for i in range(80)]
    window = StepWindow(lane="dense", concurrency=8, start=0.0, end=9.0)
    got = compute_step_figures(records, window, objectives=objectives_of(TPOT))
    assert got.objective_misses.get("tpot") == 2
    rung = replace(step(8, 800.0), tpot_s=got.tpot_s, judged_requests=got.judged_requests,
                   objective_misses=got.objective_misses)
    assert not check_step(rung, TPOT).violations


def test_without_per_request_counts_the_p95_value_is_judged() -> None:
    """A source that judged no objectives (the Prometheus histograms): the p95's value against the limit."""
    top = _ladder(TPOT, 0)[-1]
    bare = replace(top, judged_requests=None, objective_misses={})
    broken = check_step(bare, TPOT).violations
    assert [v.constraint for v in broken] == ["slo_tpot"] and broken[0].detail.startswith("TPOT p95 (s)")
    assert not check_step(replace(bare, tpot_s=replace(bare.tpot_s, p95=0.09)), TPOT).violations


def test_goodput_holds_a_request_to_the_tpot_objective_where_one_is_set() -> None:
    assert objectives_of(TPOT).tpot_s == LIMIT
    assert objectives_of(PLAIN).tpot_s == PLAIN.slo.itl_p95_s  # unset: the gaps' objective, as before


def test_the_registry_declares_it_a_latency_objective_the_tune_prunes_on() -> None:
    found = entry("slo_tpot")
    assert found is not None and found.reading.setting == "policy.slo.tpot_p95_s" and found.reading.unit == "s"
    assert "slo_tpot" in SLO_CONSTRAINTS and "slo_tpot" in PAUSE_CONSTRAINTS
