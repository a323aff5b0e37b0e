"""One TTFT objective everywhere: a request's deadline is ``slo.ttft_p95_s`` plus ``slo.ttft_per_1k_prompt_s``
per thousand of its prompt tokens (``core.objectives.Objectives.ttft_deadline_s``), and goodput, the open
rung's looks and the concurrency verdict all judge a first token by it.

The ladders are built from requests whose first tokens are set by the case (4,000-token prompts answered in
1.4-1.8 s up to c=4 and in 9 s at c=8), so the truth is read off the case: with a 4.5 s deadline per request
every request up to c=4 is within it, and the answer is 4.
"""

from __future__ import annotations

import os
import random
import re
from dataclasses import replace
from pathlib import Path

import pytest

from satbench.answer.analysis import analyze_lane
from satbench.answer.policy import SLO, Policy, objectives_of
from satbench.answer.verdicts import check_step
from satbench.core.figures import StepFigures
from satbench.core.manifest import StepWindow
from satbench.core.objectives import Objectives
from satbench.core.records import RequestRecord
from satbench.core.step_figures import compute_step_figures
from satbench.loadgen import open_step
from tests.recommender.figures_factory import step

ROOT = Path(__file__).resolve().parents[2]
PER_TOKEN = Policy(slo=SLO(ttft_p95_s=0.5, ttft_per_1k_prompt_s=1.0, itl_p95_s=0.05))
CURVE = {1: 100.0, 2: 200.0, 4: 400.0, 8: 800.0}
TTFT_RANGE = {1: (1.40, 1.56), 2: (1.50, 1.74), 4: (1.55, 1.78), 8: (8.0, 9.2)}  # seconds, 4,000-token prompts


def _records(c: int, ttfts: list[float], prompts: list[int]) -> list[RequestRecord]:
    return [RequestRecord(run_id="t", lane="dense", concurrency=c, user=i % c, request_id=f"r{c}-{i}",
                          phase="window", sent_at=1.0 + 0.2 * i, ttft_s=t, e2e_s=t + 1.0, queue_s=0.0,
                          itl_s=(0.01,) * 3, prompt_tokens=p, output_tokens=4, outcome="ok")
            for i, (t, p) in enumerate(zip(ttfts, prompts, strict=True))]


def _rung(c: int, ttfts: list[float], prompts: list[int], policy: Policy) -> StepFigures:
    """A healthy rung (``figures_factory.step``) whose TTFT figures and goodput counts are the load
    generator's own (``core.step_figures``) from requests with these first tokens and prompts."""
    window = StepWindow(lane="dense", concurrency=c, start=0.0, end=1.0 + 0.2 * len(ttfts))
    got = compute_step_figures(_records(c, ttfts, prompts), window, objectives=objectives_of(policy))
    return replace(step(c, CURVE[c]), ttft_s=got.ttft_s, ttft_tail=got.ttft_tail,
                   judged_requests=got.judged_requests, attained_requests=got.attained_requests,
                   objective_misses=got.objective_misses)


def _ladder(policy: Policy, n: int = 60) -> list[StepFigures]:
    rng = random.Random(4)
    return [_rung(c, [rng.uniform(*TTFT_RANGE[c]) for _ in range(n)], [4000] * n, policy) for c in CURVE]


def test_the_deadline_is_one_function_that_goodput_and_the_look_share() -> None:
    obj = Objectives(ttft_s=0.5, ttft_s_per_1k_prompt=1.0)
    assert obj.ttft_deadline_s(4000) == pytest.approx(4.5)
    assert obj.ttft_deadline_s(None) == obj.ttft_deadline_s(0) == 0.5
    assert Objectives().ttft_deadline_s(4000) is None
    for prompt in (0, 100, 4000, 32_000):
        for ttft in (0.4, 0.6, 4.4, 4.6, 33.0):
            late = ttft > 0.5 + prompt / 1000
            assert obj.ttft_overdue(ttft, prompt) is late
            missed = obj.misses(ok=True, ttft_s=ttft, tpot_s=None, pause_excess_s=None, e2e_s=None,
                                prompt_tokens=prompt)
            assert ("ttft" in missed) is late


def test_the_open_look_counts_a_waiting_request_late_only_past_its_own_deadline(monkeypatch) -> None:
    """A request in flight with no token yet: 'missed' once its own deadline passed (4.5 s for 4,000 prompt
    tokens), not at ``ttft_p95_s`` (0.5 s) alone."""
    seen: list[list[tuple[float, float, bool]]] = []
    monkeypatch.setattr(open_step, "rate_look", lambda done, pending, *a, **k: seen.append(pending))
    run = object.__new__(open_step.OpenStepRun)
    run._warm_ns, run._done, run.open_rate, run.capacity_rps = 0, [], 1.0, None
    run.objectives = Objectives(ttft_s=0.5, ttft_s_per_1k_prompt=1.0)
    run.config = type("C", (), {"arrival": type("A", (), {"target": 0.9})()})()
    parser = type("P", (), {"token_ns": []})()
    now = 10_000_000_000
    waits = {"long-2s": (2.0, 4000), "long-5s": (5.0, 4000), "short-1s": (1.0, 100), "unknown-1s": (1.0, None)}
    run.active = {name: open_step._Active(now - int(w * 1e9), parser, p) for name, (w, p) in waits.items()}
    run._look(0, now)
    assert [missed for _, _, missed in seen[0]] == [False, True, True, True]


def test_a_deadline_per_request_answers_four_where_one_deadline_answered_none() -> None:
    answer = analyze_lane("dense", _ladder(PER_TOKEN), PER_TOKEN)
    assert (answer.recommended_concurrency, answer.binding_constraint) == (4, "slo_ttft")
    broken = check_step(_ladder(PER_TOKEN)[-1], PER_TOKEN).violations[0]
    assert broken.constraint == "slo_ttft" and broken.measured == 1.0 and broken.limit == 0.05
    assert "60 of 60 requests past their own TTFT deadline" in broken.detail
    # the same requests against one 0.5 s deadline: every rung breaks it
    plain = Policy(slo=SLO(ttft_p95_s=0.5, itl_p95_s=0.05))
    none = analyze_lane("dense", _ladder(plain), plain)
    assert none.recommended_concurrency is None and none.binding_constraint == "slo_ttft"


def test_a_per_token_deadline_broken_binds_at_its_rung() -> None:
    """0.5 s + 0.3 s per 1,000 tokens: 1.7 s for 4,000 tokens. c=1 answers in 1.40-1.56 s, every request within
    it; c=2 in 1.50-1.74 s, a sixth past it (about 10 of 60, where a p95 allows 3)."""
    policy = Policy(slo=SLO(ttft_p95_s=0.5, ttft_per_1k_prompt_s=0.3, itl_p95_s=0.05))
    ladder = _ladder(policy)
    assert "ttft" not in ladder[0].objective_misses and ladder[1].objective_misses["ttft"] >= 6
    answer = analyze_lane("dense", ladder, policy)
    assert answer.recommended_concurrency == 1 and answer.binding_constraint == "slo_ttft", answer.reason


def test_the_share_past_its_own_deadline_is_what_binds_not_a_p95_against_a_constant() -> None:
    """A mix of prompts: long ones take long and are within their deadlines; short ones are quick but past
    theirs. The p95 of TTFT is the long ones', and says nothing of the short ones."""
    n_long, n_short = 40, 60
    prompts = [8000] * n_long + [200] * n_short
    within = [6.0] * n_long + [0.3] * n_short  # deadlines 8.5 s and 0.7 s
    late = [6.0] * n_long + [0.3] * (n_short - 12) + [0.9] * 12  # 12 short ones past 0.7 s
    policy = Policy(slo=SLO(ttft_p95_s=0.5, ttft_per_1k_prompt_s=1.0, itl_p95_s=0.05))
    assert not check_step(_rung(4, within, prompts, policy), policy).violations
    broken = check_step(_rung(4, late, prompts, policy), policy).violations
    assert [v.constraint for v in broken] == ["slo_ttft"] and broken[0].measured == pytest.approx(0.12)
    assert broken[0].unit == "share" and broken[0].figure == "share of requests past their own TTFT deadline"


def test_figures_without_goodput_counts_are_judged_against_the_shortest_deadline() -> None:
    rung = replace(_ladder(PER_TOKEN)[0], judged_requests=None, attained_requests=None, objective_misses={})
    broken = check_step(rung, PER_TOKEN).violations
    assert [v.constraint for v in broken] == ["slo_ttft"] and "every deadline at its shortest" in broken[0].detail


def test_no_part_of_the_project_computes_a_ttft_deadline_but_core_objectives() -> None:
    """The per-1k term appears in arithmetic in one module only; every other part calls its function."""
    arithmetic = re.compile(r"per_1k_prompt\w*\s*[*+]|[*+]\s*[\w.]*per_1k_prompt")
    offenders, scanned = [], 0
    for folder in ("satbench", "testkit", "bench"):
        for base, _, files in os.walk(ROOT / folder):
            for name in (f for f in files if f.endswith(".py")):
                path = Path(base) / name
                scanned += 1
                if path.relative_to(ROOT).as_posix() != "satbench/core/objectives.py":
                    offenders += [f"{path.relative_to(ROOT)}:{i}" for i, line
                                  in enumerate(path.read_text().splitlines(), 1) if arithmetic.search(line)]
    assert offenders == [] and scanned > 100
