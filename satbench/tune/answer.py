"""The answer of a tune, per lane: which candidate wins, by how much, and the Pareto front of the measured ones.

``choose(outcomes, min_gain)``: only feasible candidates count (measured, an answer, status ``ok`` or
``unsaturated``). The best is the one with the most throughput at its recommended concurrency. A candidate
with fewer slots is preferred to it where the best does not pay for its extra slots (KV memory, a longer
tail), and at one slot count the larger batch where a smaller one is not significantly better (the search's
own assumption: a smaller batch only buys shorter pauses, and they were not binding). Candidates are ranked
by slots (fewer first), then batch and ubatch (larger first), and the winner is the first in that rank that
the best does not beat, where "beats" asks

- a significant margin: the throughput difference exceeds the two 95 % half-widths combined in quadrature
  (``sqrt(h1**2 + h2**2)``, each the half-width of ``throughput_ci_tok_s`` at the recommended rung), and,
  where the best has more slots,
- the policy's own measure: a gain of at least ``min_gain_per_doubling`` per doubling of slots, the rule by
  which a ladder rung pays.

So a pruned search and the full grid agree wherever the candidates the pruning skipped are within the noise
of the one that dominated them.

So four slots at the knee win over eight slots that reach the same throughput with the same four users
busy. The runner-up is the best feasible candidate other than the winner; the margin is winner minus
runner-up (negative where the winner won on cost), with its uncertainty and whether it is significant.

``pareto(outcomes)``: each feasible candidate's throughput per node (its throughput) and per user
(throughput / recommended concurrency); a candidate is Pareto-optimal when no other is at least as good on
both and better on one.

``fingerprint(...)``: sha256 of the canonical JSON of what decides the answer (lane model or profile, the
grid, the workload, the policy), so two tunes of the same question share it.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from satbench.tune.search import Outcome

__all__ = ["Choice", "beats", "choose", "fingerprint", "pareto"]


@dataclass(frozen=True, slots=True)
class Choice:
    winner: Outcome | None
    runner_up: Outcome | None
    margin_tok_s: float | None
    margin_uncertainty_tok_s: float | None
    significant: bool | None
    best: Outcome | None


def _rank(o: Outcome) -> tuple[int, int, int, float]:
    c = o.candidate
    return c.parallel, -c.batch, -c.ubatch, -_t(o)


def _t(o: Outcome) -> float:
    assert o.throughput_tok_s is not None
    return o.throughput_tok_s


def beats(a: Outcome, b: Outcome, min_gain: float) -> bool:
    """Whether ``a`` pays for being chosen over ``b``: significantly more throughput, by the policy's gain."""
    ta, tb = _t(a), _t(b)
    if ta - tb <= math.hypot(a.half_width_tok_s, b.half_width_tok_s) or tb <= 0:
        return False
    pa, pb = a.candidate.parallel, b.candidate.parallel
    if pa <= pb:  # no more slots to pay for: a significant gain is enough
        return True
    doublings = max(1.0, math.log2(pa / pb))
    return (ta / tb) ** (1.0 / doublings) - 1.0 >= min_gain


def choose(outcomes: Sequence[Outcome], min_gain: float) -> Choice:
    feasible = [o for o in outcomes if o.feasible]
    if not feasible:
        return Choice(None, None, None, None, None, None)
    best = max(feasible, key=lambda o: (_t(o), -o.candidate.parallel))
    winner = next(o for o in sorted(feasible, key=_rank) if o is best or not beats(best, o, min_gain))
    others = [o for o in feasible if o is not winner]
    if not others:
        return Choice(winner, None, None, None, None, best)
    runner = max(others, key=_t)
    margin = _t(winner) - _t(runner)
    unc = math.hypot(winner.half_width_tok_s, runner.half_width_tok_s)
    return Choice(winner, runner, margin, unc, abs(margin) > unc, best)


def pareto(outcomes: Sequence[Outcome]) -> list[dict[str, Any]]:
    """Throughput per node and per user of each feasible candidate, Pareto-optimal ones marked."""
    rows = [(o, _t(o), _t(o) / o.recommended) for o in outcomes if o.feasible and o.recommended]
    out = []
    for o, node, user in rows:
        beaten = any(n2 >= node and u2 >= user and (n2 > node or u2 > user) for o2, n2, u2 in rows if o2 is not o)
        out.append({"candidate": o.candidate.id, "recommended_concurrency": o.recommended,
                    "throughput_per_node_tok_s": node, "throughput_per_user_tok_s": user,
                    "pareto_optimal": not beaten})
    return sorted(out, key=lambda r: -r["throughput_per_node_tok_s"])


def fingerprint(question: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of ``question`` (sorted keys, no whitespace)."""
    text = json.dumps(question, sort_keys=True, separators=(",", ":"), default=str)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()
