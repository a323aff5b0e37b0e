"""The search over a tune's grid: which candidates to walk, which a measured one dominates, in a pure loop.

``search(candidates, measure)`` takes the candidates in grid order (``satbench.tune.grid``) and, for each,
either skips it because a measured candidate dominates it (``dominator``) or calls ``measure`` (a ladder
walk, a resumed folder, or in tests a table of answers). Each candidate's ``Outcome`` says what happened:
``measured`` (its answer, binding constraint, throughput and interval at the recommended rung), ``refused``
(the runtime would not start it: the server's own message), ``skipped`` (it cannot fit, said before a start)
or ``pruned`` (which measured candidate dominated it, and why).

Dominance rests on two monotonicity assumptions, stated where they are used:

1. **Slots past the knee buy nothing.** At a given batch and ubatch, throughput cannot grow past the knee by
   adding slots. So once a candidate's answer is below its slot count for a reason other than the slot cap
   (binding constraint not ``ladder_top``, recommended < parallel), every candidate with more slots at the
   same batch, ubatch and context is dominated: its rungs up to that answer run the same users on the same
   busy slots, and the rung that stopped the walk stops it too.
2. **A decode pause grows with the batch.** Every decoding slot waits for the whole batch of prompt chunks
   (``-b`` tokens), so (a) if a candidate at batch b holds every constraint (feasible, bound only by the
   throughput plateau or the ladder's top, no rung flagged for decode starvation or ITL), smaller batches at
   the same slots are dominated: their pauses were not binding, and they can only lose prefill efficiency
   (more steps per prompt, more micro-batches); (b) if a candidate is flagged for decode starvation or the
   ITL objective at concurrency c <= its slots, candidates with the same or a larger batch and the same or
   more slots are dominated: their pause at c is at least as long, and below c every user has a slot in both.

"Dominated" means it cannot beat the measured one by the margin the answer asks of it
(``satbench.tune.answer``): a significant gain of at least the policy's ``min_gain_per_doubling``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from satbench.tune.grid import Candidate

__all__ = ["FEASIBLE_STATUSES", "Outcome", "dominator", "outcome_from_lane", "search"]

FEASIBLE_STATUSES = ("ok", "unsaturated")
PAUSE_CONSTRAINTS = ("decode_starvation", "slo_itl")
_THROUGHPUT_BOUND = ("throughput_plateau", "ladder_top")


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the search did with one candidate, and what was measured (``state`` = ``measured``)."""

    candidate: Candidate
    state: str  # measured | refused | skipped | pruned
    status: str | None = None
    recommended: int | None = None
    binding: str | None = None
    throughput_tok_s: float | None = None
    throughput_ci_tok_s: tuple[float, float] | None = None
    starved_at: tuple[int, ...] = ()  # rungs flagged for decode starvation or the ITL objective
    reason: str | None = None
    dominated_by: str | None = None
    folder: str | None = None
    resumed: bool = False
    rungs: tuple[int, ...] = field(default_factory=tuple)

    @property
    def feasible(self) -> bool:
        """Measured, with an answer, every hard constraint held at it (status ok or unsaturated)."""
        return (self.state == "measured" and self.recommended is not None and self.throughput_tok_s is not None
                and self.status in FEASIBLE_STATUSES)

    @property
    def half_width_tok_s(self) -> float:
        """Half the 95% interval of the throughput at the recommended rung (0 where none was measured)."""
        ci = self.throughput_ci_tok_s
        return 0.0 if ci is None else (ci[1] - ci[0]) / 2.0


def outcome_from_lane(candidate: Candidate, lane: dict[str, Any], folder: str | None = None) -> Outcome:
    """A measured candidate's outcome from its recommendations document's lane entry."""
    rec = lane.get("recommended_concurrency")
    steps = [s for s in lane.get("steps") or [] if isinstance(s, dict)]
    at = next((s for s in steps if s.get("concurrency") == rec), None)
    ci = (at or {}).get("throughput_ci_tok_s")
    starved = sorted({int(s["concurrency"]) for s in steps if _pause_flagged(s)})
    return Outcome(
        candidate=candidate, state="measured", status=lane.get("status"), recommended=rec,
        binding=lane.get("binding_constraint"), throughput_tok_s=lane.get("throughput_at_recommended_tok_s"),
        throughput_ci_tok_s=None if ci is None else (float(ci[0]), float(ci[1])), starved_at=tuple(starved),
        reason=lane.get("reason"), folder=folder, rungs=tuple(int(s["concurrency"]) for s in steps),
    )


def _pause_flagged(step: dict[str, Any]) -> bool:
    check = (step.get("checks") or {}).get("decode_starvation") or {}
    return check.get("status") == "flagged" or any(
        v.get("constraint") in PAUSE_CONSTRAINTS for v in step.get("violations") or [])


def _same_batch(a: Candidate, b: Candidate) -> bool:
    return (a.batch, a.ubatch, a.ctx_per_slot) == (b.batch, b.ubatch, b.ctx_per_slot)


def dominator(candidate: Candidate, measured: Iterable[Outcome]) -> tuple[Outcome, str] | None:
    """The first measured outcome that dominates ``candidate`` and why (module docstring), or None."""
    for m in measured:
        if m.state != "measured":
            continue
        mc = m.candidate
        rec = m.recommended
        if (rec is not None and m.binding not in (None, "ladder_top") and rec < mc.parallel
                and _same_batch(candidate, mc) and candidate.parallel > mc.parallel):
            return m, (f"{mc.id} answered c={rec} below its {mc.parallel} slots ({m.binding}): more slots at "
                       f"the same batch cannot raise throughput past that knee")
        if (m.feasible and m.binding in _THROUGHPUT_BOUND and not m.starved_at
                and candidate.parallel == mc.parallel and candidate.ctx_per_slot == mc.ctx_per_slot
                and candidate.batch < mc.batch and candidate.ubatch <= mc.ubatch):
            return m, (f"{mc.id} held every constraint at batch {mc.batch} ({m.binding} at c={rec}): a smaller "
                       f"batch only loses prefill efficiency")
        flagged = [c for c in m.starved_at if c <= mc.parallel]
        if (flagged and candidate.ctx_per_slot == mc.ctx_per_slot and candidate.batch >= mc.batch
                and candidate.parallel >= mc.parallel and candidate != mc):
            return m, (f"{mc.id} paused decodes past the objective at c={flagged[0]} with batch {mc.batch}: "
                       f"a batch as large, with as many slots, pauses them as long")
    return None


def search(candidates: Sequence[Candidate], measure: Callable[[Candidate], Outcome], *,
           prune: bool = True) -> list[Outcome]:
    """Every candidate's outcome, in grid order: pruned where a measured one dominates it, else measured."""
    outcomes: list[Outcome] = []
    for candidate in candidates:
        hit = dominator(candidate, outcomes) if prune else None
        if hit is not None:
            by, why = hit
            outcomes.append(Outcome(candidate, "pruned", reason=why, dominated_by=by.candidate.id))
            continue
        outcomes.append(replace(measure(candidate), candidate=candidate))
    return outcomes
