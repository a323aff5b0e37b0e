"""Decisions that wait for evidence: an undecided comparison is measured longer, then falls back, said.

The scenario is the real tune's: 4 slots measured 12 % faster than 2 at +-13 % intervals (not significant).
A longer walk narrows an interval with the square root of its window (the scenario's own measurement model
here): at twice the window the difference (104 tok/s) is still inside its interval (+-120), at four times
it is not (+-85), and the tune answers 4 slots, having said why.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from satbench.tune.answer import Choice, choose
from satbench.tune.evidence import settle
from satbench.tune.grid import Candidate
from satbench.tune.search import Outcome

CTX = 1024
TRUTH = {2: 870.0, 4: 974.0}  # tok/s: 4 slots 12 % faster


def walked(c: Candidate, factor: float = 1.0) -> Outcome:
    t = TRUTH[c.parallel]
    hw = 0.13 * t / math.sqrt(factor)
    return Outcome(c, "measured", status="ok", recommended=c.parallel, binding="throughput_plateau",
                   throughput_tok_s=t, throughput_ci_tok_s=(t - hw, t + hw), window_factor=factor)


def decide(outcomes: Sequence[Outcome]) -> Choice:
    return choose(outcomes, 0.10)


CANDIDATES = [Candidate(2, 256, 256, CTX), Candidate(4, 256, 256, CTX)]


def test_an_undecided_comparison_is_walked_again_with_longer_windows_until_it_is_shown() -> None:
    first = [walked(c) for c in CANDIDATES]
    choice = choose(first, 0.10)
    assert choice.winner is not None and choice.winner.candidate.parallel == 2
    assert [o.candidate.parallel for o in choice.open] == [4]  # faster, by the gain, not significantly
    calls: list[tuple[int, float]] = []

    def remeasure(c: Candidate, factor: float) -> Outcome:
        calls.append((c.parallel, factor))
        return walked(c, factor)

    outcomes, final, decision = settle(first, decide, remeasure, walks=4, factor=2.0, min_gain=0.10,
                                       confidence=0.95)
    assert final.winner is not None and final.winner.candidate.parallel == 4
    assert calls == [(2, 2.0), (4, 2.0), (2, 4.0), (4, 4.0)]
    assert decision.settled and decision.rounds == 2 and decision.walks == 4
    assert [o.window_factor for o in outcomes] == [4.0, 4.0]
    assert decision.said().startswith("settled by 4 longer walks in 2 rounds")


def test_when_the_budget_is_spent_the_cheaper_candidate_stands_and_the_tune_says_why() -> None:
    first = [walked(c) for c in CANDIDATES]
    for budget in (0, 1):  # fewer than two walks is no comparison
        _, final, decision = settle(first, decide, lambda c, f: walked(c, f), walks=budget, factor=2.0,
                                    min_gain=0.10, confidence=0.95)
        assert final.winner is not None and final.winner.candidate.parallel == 2 and not decision.settled
        (default,) = decision.defaults
        assert default.kept == "np2-b256-ub256-c2048" and default.over == "np4-b256-ub256-c4096"
        assert default.direction.startswith("fewer slots")
        assert "not significantly" in default.why and f"tune.evidence_walks = {budget}" in decision.said()


def test_a_decided_answer_needs_no_walk() -> None:
    sure = [Outcome(c, "measured", status="ok", recommended=c.parallel, binding="throughput_plateau",
                    throughput_tok_s=TRUTH[c.parallel], throughput_ci_tok_s=(TRUTH[c.parallel] - 5,
                                                                             TRUTH[c.parallel] + 5))
            for c in CANDIDATES]
    _, final, decision = settle(sure, decide, lambda c, f: walked(c, f), walks=4, factor=2.0, min_gain=0.10,
                                confidence=0.95)
    assert final.winner is not None and final.winner.candidate.parallel == 4
    assert decision.settled and decision.walks == 0 and "significant" in decision.said()
