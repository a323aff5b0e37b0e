"""Decisions that wait for evidence: where the comparison that decides the winner is not significant, measure
the contenders longer before falling back to a stated default.

``settle(outcomes, decide, remeasure, walks, factor)``: ``decide`` is the answer's rule
(``satbench.tune.answer.choose`` with the policy), whose ``Choice.open`` lists the challengers that would
have replaced the winner on the point estimates but whose difference interval holds zero. While there are
such and budget is left, round ``k`` walks the winner and the open challengers again (the most promising
first, as many as the budget allows: at least two, or the round is not a comparison) with windows
``factor ** k`` times the session's: a throughput interval narrows with the square root of its window, so a
doubling narrows the difference's interval by about 30 % (``1 - 1 / sqrt(2)``). The new measurement replaces
the old one (it covers a longer stretch of the same server, and pooling two walks whose recommended rungs
may differ would mix two questions), and the answer is chosen again. ``walks`` (``tune.evidence_walks``)
bounds the walks added per lane.

When the budget is spent and the comparison is still open, the winner stands: it is the candidate the rank
prefers (``satbench.tune.grid``: fewer slots, the larger batch, split KV), so the fallback is the cheaper
setting, and ``Decision`` says which way it went, over which challenger, by how much and why, for
``tune.json`` and the report.

Before those rounds, a candidate whose walk judged nothing (``unjudged``: measured, but no constraint bound it
and no answer stands: a lowest rung whose throughput was too unstable to compare, too few requests, a rung
lost) is walked once more at ``factor`` times the windows, in grid order, within the same budget. Its first
walk says nothing about the candidate, only about the measurement, so leaving it out would decide the lane
among the candidates that happened to measure well: on a loaded machine the real tune's 4-slot candidate
came back unjudged (a c=2 throughput interval 31 % of its mean, where the policy allows 25 %) and the lane
was answered among the others without a word. A candidate still unjudged after its second walk is named
with its reason in ``Decision.unjudged``, left out of the comparison, and the decision is not settled.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from satbench.tune.answer import Choice, compare
from satbench.tune.grid import Candidate
from satbench.tune.models import DefaultKept
from satbench.tune.search import Outcome

__all__ = ["Decision", "settle", "unjudged"]


@dataclass(frozen=True, slots=True)
class Decision:
    """How the winner was settled: at once, by longer walks, or by the default after the budget."""

    settled: bool
    rounds: int = 0
    walks: int = 0
    budget: int = 0
    rewalked: tuple[str, ...] = ()
    defaults: tuple[DefaultKept, ...] = field(default_factory=tuple)
    unjudged: tuple[str, ...] = ()  # "<candidate id>: <why>" for each candidate no walk could judge

    def said(self) -> str:
        if self.settled and not self.rounds:
            return ("no comparison waited for evidence: each challenger was significantly faster, not faster, or "
                    "short of the gain a doubling of slots must buy")
        longer = f"{self.walks} longer walks in {self.rounds} rounds ({', '.join(self.rewalked)})"
        if self.settled:
            return f"settled by {longer}"
        why = "; ".join([d.why for d in self.defaults]
                        + [f"{u} (left out of the comparison)" for u in self.unjudged])
        spent = longer if self.rounds else f"no longer walk (tune.evidence_walks = {self.budget})"
        return f"not settled after {spent}: {why}"


def unjudged(o: Outcome) -> bool:
    """A walk that judged nothing (module docstring): measured, no constraint bound it, no answer stands."""
    return o.state == "measured" and not o.feasible and o.binding is None


def _why_unjudged(o: Outcome) -> str:
    return f"{o.candidate.id}: not judged: {o.reason or o.status or 'its walk gave no answer'}"


def _direction(winner: Candidate, other: Candidate) -> str:
    if other.parallel > winner.parallel:
        return "fewer slots (less KV memory, a shorter tail)"
    if other.batch < winner.batch or other.ubatch < winner.ubatch:
        return "the larger batch (fewer steps per prompt)"
    if other.kv_unified and not winner.kv_unified:
        return "split KV (each slot its own context)"
    return "the candidate ranked first"


def _defaults(choice: Choice, min_gain: float, confidence: float) -> tuple[DefaultKept, ...]:
    out = []
    winner = choice.winner
    assert winner is not None
    for other in choice.open:
        c = compare(other, winner, min_gain, confidence)
        out.append(DefaultKept(kept=winner.candidate.id, over=other.candidate.id,
                               direction=_direction(winner.candidate, other.candidate),
                               difference_tok_s=c.difference_tok_s,
                               half_width_tok_s=None if c.half_width_tok_s == float("inf") else c.half_width_tok_s,
                               why=(f"kept {winner.candidate.id} over {other.candidate.id}, the default ("
                                    f"{_direction(winner.candidate, other.candidate)}): {c.said(min_gain)}")))
    return tuple(out)


def settle(outcomes: Sequence[Outcome], decide: Callable[[Sequence[Outcome]], Choice],
           remeasure: Callable[[Candidate, float], Outcome], *, walks: int, factor: float,
           min_gain: float, confidence: float) -> tuple[list[Outcome], Choice, Decision]:
    """The outcomes (re-walked ones replaced), the final choice and how it was settled (module docstring)."""
    current = list(outcomes)
    used = rounds = 0
    rewalked: list[str] = []

    def walk(old: Outcome, times: float) -> None:
        nonlocal current, used
        new = replace(remeasure(old.candidate, times), candidate=old.candidate)
        current = [new if o.candidate == old.candidate else o for o in current]
        used += 1
        rewalked.append(f"{old.candidate.id} x{times:g}")

    lost = [o for o in current if unjudged(o)][:walks]
    if lost:
        rounds += 1
        for old in lost:
            walk(old, factor)
    choice = decide(current)
    longer = 0  # rounds of the open comparisons: windows factor ** longer
    while choice.winner is not None and choice.open and walks - used >= 2:
        rounds += 1
        longer += 1
        contenders = [choice.winner, *sorted(choice.open, key=lambda o: -(o.throughput_tok_s or 0.0))]
        for old in contenders[: walks - used]:
            walk(old, factor ** longer)
        choice = decide(current)
    still = tuple(_why_unjudged(o) for o in current if unjudged(o))
    settled = choice.winner is None or not choice.open
    defaults = () if settled else _defaults(choice, min_gain, confidence)
    return current, choice, Decision(settled and not still, rounds, used, walks, tuple(rewalked), defaults, still)
