"""The tune never compares candidates across a drift (``satbench.tune.search.walk_again_on_drift``).

The lanes are ``testkit.tune_grids``'s noisy lanes (a known curve, throughput +-3 %). During the first walk of
the steady lane's winner the node slows down: that walk reads half the throughput at half the concurrency,
answered as the policy's ``report`` keeps it (the most a drifted walk can mislead), with its drift said. The
truth is the steady lane's own walks: the choice with the drift must be the choice without it.
"""

from __future__ import annotations

import dataclasses

import pytest

from satbench.tune.answer import choose
from satbench.tune.grid import Candidate, grid
from satbench.tune.search import Outcome, search, walk_again_on_drift
from testkit.tune_grids import NoisyLane, lane

CANDIDATES = grid([2, 4, 8, 16], [(2048, 2048), (512, 512), (256, 256), (128, 128)], 1024)
SAID = "c=1 re-measured at the lane's end gave 0.50x its first throughput"


def slowed(outcome: Outcome) -> Outcome:
    t, ci = outcome.throughput_tok_s, outcome.throughput_ci_tok_s
    return dataclasses.replace(
        outcome, recommended=max(1, (outcome.recommended or 2) // 2), drift=SAID,
        throughput_tok_s=None if t is None else t / 2,
        throughput_ci_tok_s=None if ci is None else (ci[0] / 2, ci[1] / 2))


class Drifting:
    """The steady lane's walks, except that ``victim``'s first ``drifted_walks`` walks drift."""

    def __init__(self, steady: NoisyLane, victim: Candidate, drifted_walks: int = 1) -> None:
        self.steady, self.victim, self.left = steady, victim, drifted_walks
        self.walks: dict[str, int] = {}
        self.aside: list[str] = []

    def measure(self, c: Candidate) -> Outcome:
        self.walks[c.id] = self.walks.get(c.id, 0) + 1
        outcome = self.steady.measure(c)
        if c == self.victim and self.left > 0:
            self.left -= 1
            return slowed(outcome)
        return outcome

    def set_aside(self, c: Candidate, outcome: Outcome) -> None:
        self.aside.append(c.id)


def steady_winner(one: NoisyLane) -> Outcome:
    winner = choose(search(CANDIDATES, one.measure, prune=False), 0.1).winner
    assert winner is not None
    return winner


@pytest.mark.parametrize("seed", range(12))
def test_a_drift_during_the_winners_walk_leaves_the_choice_unchanged(seed: int) -> None:
    one = lane(seed)
    best = steady_winner(one)
    drifting = Drifting(one, best.candidate)
    outcomes = search(CANDIDATES, walk_again_on_drift(drifting.measure, drifting.set_aside), prune=False)
    chosen = choose(outcomes, 0.1).winner
    assert chosen is not None and chosen.candidate == best.candidate
    assert drifting.walks[best.candidate.id] == 2 and drifting.aside == [best.candidate.id]
    assert all(o.drift is None for o in outcomes)


@pytest.mark.parametrize("seed", range(6))
def test_a_candidate_that_drifts_twice_is_left_out_with_its_reason(seed: int) -> None:
    one = lane(seed)
    best = steady_winner(one)
    drifting = Drifting(one, best.candidate, drifted_walks=2)
    outcomes = search(CANDIDATES, walk_again_on_drift(drifting.measure, drifting.set_aside), prune=False)
    victim = next(o for o in outcomes if o.candidate == best.candidate)
    assert not victim.feasible and victim.drift == SAID and "drifted during both walks" in (victim.reason or "")
    chosen = choose(outcomes, 0.1).winner
    assert chosen is None or chosen.candidate != best.candidate


def test_a_drifted_walk_is_never_feasible_even_where_its_answer_was_kept() -> None:
    one = lane(0)
    kept = slowed(one.measure(CANDIDATES[0]))
    assert kept.status in ("ok", "unsaturated", "undecided") and kept.recommended is not None
    assert not kept.feasible
