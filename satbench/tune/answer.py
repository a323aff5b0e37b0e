"""The answer of a tune, per lane: which candidate wins, by which comparisons, and the Pareto front.

``choose(outcomes, min_gain, confidence)``: only feasible candidates count (measured, an answer, status
``ok``, ``unsaturated`` or ``undecided``). They are walked pairwise, cheapest first, holding a current
winner; a challenger replaces the holder only where it *beats* it (``compare``):

- significantly: the interval of the difference of the two throughputs (each at its recommended rung)
  excludes zero at the policy's ``confidence``. From the two estimates' standard errors and degrees of
  freedom where the walk published them (Welch: ``se = sqrt(se_a**2 + se_b**2)``, Welch-Satterthwaite
  degrees of freedom, the Student quantile at ``confidence``), else the two intervals' half-widths in
  quadrature (``core.statistics``: the usual two-sample comparison). A missing interval is infinite
  uncertainty: nothing beats on it;
- and, where the challenger has more slots, by the policy's own measure, measured from the holder: a gain
  of at least ``min_gain_per_doubling`` per doubling of slots, ``(t_c / t_h) ** (1 / log2(p_c / p_h)) - 1``
  (``core.statistics.gain_per_doubling``, the rule by which a ladder rung pays). At one slot count (a
  smaller batch, a unified KV pool) a significant gain is enough: there are no extra slots to pay for.

The walk has two levels, both in the rank of ``satbench.tune.grid``: at each slot count its candidates
(the larger batch first, split KV before unified) give that slot count's holder; then the slot counts'
holders, from the fewest slots up, give the winner. Why two: whether a smaller batch pays at its slots is
the question the pruning answers (it prunes the smaller batches where the larger held every constraint,
``satbench.tune.search``); in one long walk a smaller batch would instead meet a holder with *fewer* slots,
and win there on a noisy gain its larger batch had just missed: a second draw the full grid has and a
pruned search does not. Measured on 400 noisy lanes at the audit's levels (``bench/tune_noise.py``): one
long walk gave pruned and full-grid winners that differed in 2 lanes, each 11 % slower by the curve; two
levels, in none.

Why pairwise from the holder: the old rule compared every candidate with the single best and spread the
best's gain over all the doublings between them, so an irrelevant 16-slot candidate barely faster than 4
slots turned the answer from 4 slots (+24 % over 2, far beyond both intervals) back to 2. Here 16 slots
challenge 4 slots, gain 3 % per doubling, and 4 slots hold.

The property, stated as it holds: **adding or removing a candidate that never holds the lead never changes
the winner**, where holding the lead means being the winner or the holder some other candidate was
compared against (``Choice.held``). Such a candidate is itself only a challenger that lost, and leaves every
holder of the walk as it was: the audit's 16 slots are one. A candidate that held the lead and was later
replaced is not irrelevant: with it gone, the candidates after it meet an earlier holder, and significance
is not transitive (a beats b and b beats c by a little each, a against c at a wider interval undecided), so
they may fare otherwise. No rule that decides by significance can have the property for
every non-winner; every comparison is recorded (``comparisons``), so the path can be read.
``tests/tune/test_choice.py`` checks the property on random grids (hypothesis).

Decisions that wait for evidence: ``Choice.open`` lists the challengers to the winner that lost *only* for
want of significance (faster on the point estimates, by at least the gain, the difference interval holding
zero). The tune measures those and the winner again with longer windows (``satbench.tune.evidence``) before
it falls back to the default the rank gives (fewer slots, the larger batch, split KV), and says so.

The runner-up is the best feasible candidate other than the winner; the margin is winner minus runner-up
(negative where the winner won on cost), with its uncertainty at ``confidence`` and whether it is
significant.

``pareto(outcomes)``: each feasible candidate's throughput per node (its throughput) and per user
(throughput / recommended concurrency); Pareto-optimal when no other is at least as good on both and better
on one. ``fingerprint(question)``: sha256 of the canonical JSON of what decides an answer.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from satbench.core.statistics import gain_per_doubling, t_quantile, welch_difference
from satbench.tune.models import ParetoPoint, Verdict
from satbench.tune.search import Outcome

__all__ = ["Choice", "Comparison", "beats", "choose", "compare", "difference", "fingerprint", "pareto"]


@dataclass(frozen=True, slots=True)
class Comparison:
    """One challenge of the walk: ``challenger`` against the ``holder`` of its turn, and how it came out."""

    challenger: str
    holder: str
    difference_tok_s: float
    half_width_tok_s: float  # of the difference's interval at the confidence (inf: an interval is missing)
    gain_per_doubling: float | None  # None where the challenger has no more slots
    verdict: Verdict  # replaced | not_faster | not_significant | gain_short

    @property
    def significant(self) -> bool:
        return abs(self.difference_tok_s) > self.half_width_tok_s

    def said(self, min_gain: float) -> str:
        ratio = "" if math.isinf(self.half_width_tok_s) else f" +- {self.half_width_tok_s:.1f}"
        gain = "" if self.gain_per_doubling is None else f", {self.gain_per_doubling:+.1%} per doubling of slots"
        what = {"replaced": "replaces it", "not_faster": "is not faster",
                "not_significant": "is faster, not significantly: the interval of the difference holds zero",
                "gain_short": f"is faster, by less than the {min_gain:.0%} a doubling of slots must buy"}
        return (f"{self.challenger} vs {self.holder}: {self.difference_tok_s:+.1f}{ratio} tok/s{gain}: "
                f"{what[self.verdict]}")


@dataclass(frozen=True, slots=True)
class Choice:
    winner: Outcome | None
    runner_up: Outcome | None
    margin_tok_s: float | None
    margin_uncertainty_tok_s: float | None
    significant: bool | None
    best: Outcome | None
    comparisons: tuple[Comparison, ...] = ()
    open: tuple[Outcome, ...] = ()  # challengers to the winner that lost only for want of significance
    held: frozenset[str] = frozenset()  # the winner and every candidate another was compared against


def _t(o: Outcome) -> float:
    assert o.throughput_tok_s is not None
    return o.throughput_tok_s


def difference(a: Outcome, b: Outcome, confidence: float = 0.95) -> tuple[float, float]:
    """``t_a - t_b`` and the half-width of its interval at ``confidence`` (module docstring); inf half-width
    where an interval is missing."""
    diff = _t(a) - _t(b)
    ses = (a.throughput_se_tok_s, b.throughput_se_tok_s)
    dofs = (a.throughput_dof, b.throughput_dof)
    if None not in ses and None not in dofs:
        se, dof = welch_difference(float(ses[0] or 0.0), max(1.0, float(dofs[0] or 1.0)),
                         float(ses[1] or 0.0), max(1.0, float(dofs[1] or 1.0)))
        return diff, 0.0 if se == 0 else t_quantile(confidence, max(1.0, dof)) * se
    return diff, math.hypot(a.half_width_tok_s, b.half_width_tok_s)


def compare(challenger: Outcome, holder: Outcome, min_gain: float, confidence: float = 0.95) -> Comparison:
    """How ``challenger`` fares against ``holder`` (module docstring)."""
    diff, half = difference(challenger, holder, confidence)
    gain = None
    if challenger.candidate.parallel > holder.candidate.parallel:
        gain = gain_per_doubling(holder.candidate.parallel, _t(holder), challenger.candidate.parallel, _t(challenger))
    verdict: Verdict
    if diff <= 0:
        verdict = "not_faster"
    elif gain is not None and gain < min_gain:
        verdict = "gain_short"
    elif diff <= half:
        verdict = "not_significant"
    else:
        verdict = "replaced"
    return Comparison(challenger.candidate.id, holder.candidate.id, diff, half, gain, verdict)


def beats(a: Outcome, b: Outcome, min_gain: float, confidence: float = 0.95) -> bool:
    """Whether ``a`` pays for being chosen over ``b``: significantly more throughput, by the policy's gain per
    doubling of slots where it has more."""
    return compare(a, b, min_gain, confidence).verdict == "replaced"


def _walk(ranked: Sequence[Outcome], min_gain: float, confidence: float,
          comparisons: list[Comparison], against: dict[str, list[tuple[Outcome, Comparison]]]) -> Outcome:
    holder = ranked[0]
    for challenger in ranked[1:]:
        c = compare(challenger, holder, min_gain, confidence)
        comparisons.append(c)
        against.setdefault(holder.candidate.id, []).append((challenger, c))
        if c.verdict == "replaced":
            holder = challenger
    return holder


def choose(outcomes: Sequence[Outcome], min_gain: float, confidence: float = 0.95) -> Choice:
    feasible = sorted((o for o in outcomes if o.feasible), key=lambda o: o.candidate.rank_key())
    if not feasible:
        return Choice(None, None, None, None, None, None)
    best = max(feasible, key=lambda o: (_t(o), -o.candidate.parallel))
    comparisons: list[Comparison] = []
    against: dict[str, list[tuple[Outcome, Comparison]]] = {}
    groups: dict[int, list[Outcome]] = {}
    for o in feasible:
        groups.setdefault(o.candidate.parallel, []).append(o)
    holders = [_walk(group, min_gain, confidence, comparisons, against) for _, group in sorted(groups.items())]
    winner = _walk(holders, min_gain, confidence, comparisons, against)
    still_open = tuple(o for o, c in against.get(winner.candidate.id, []) if c.verdict == "not_significant")
    held = frozenset({c.holder for c in comparisons} | {winner.candidate.id})
    others = [o for o in feasible if o is not winner]
    if not others:
        return Choice(winner, None, None, None, None, best, tuple(comparisons), still_open, held)
    runner = max(others, key=_t)
    margin, unc = difference(winner, runner, confidence)
    return Choice(winner, runner, margin, unc, abs(margin) > unc, best, tuple(comparisons), still_open, held)


def pareto(outcomes: Sequence[Outcome]) -> list[ParetoPoint]:
    """Throughput per node and per user of each feasible candidate, Pareto-optimal ones marked."""
    rows = [(o, _t(o), _t(o) / o.recommended) for o in outcomes if o.feasible and o.recommended]
    out = []
    for o, node, user in rows:
        beaten = any(n2 >= node and u2 >= user and (n2 > node or u2 > user) for o2, n2, u2 in rows if o2 is not o)
        assert o.recommended is not None
        out.append(ParetoPoint(candidate=o.candidate.id, recommended_concurrency=o.recommended,
                               throughput_per_node_tok_s=node, throughput_per_user_tok_s=user,
                               pareto_optimal=not beaten))
    return sorted(out, key=lambda r: -r.throughput_per_node_tok_s)


def fingerprint(question: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of ``question`` (sorted keys, no whitespace)."""
    text = json.dumps(question, sort_keys=True, separators=(",", ":"), default=str)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()
