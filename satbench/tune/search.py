"""The search over a tune's grid: which candidates to walk, which a measured one dominates, in a pure loop.

``search(candidates, measure, rules=)`` takes the candidates in walk order (``satbench.tune.grid``) and, for
each, either prunes it because a measured candidate dominates it (``dominator``) or calls ``measure`` (a
ladder walk, a resumed folder, or in tests a table of answers). Each candidate's ``Outcome`` says what
happened: ``measured`` (its answer, binding constraint, throughput and interval at the recommended rung, and
the evidence the pruning reads), ``refused`` (the runtime would not start it, or started something else: the
reason), ``skipped`` (it cannot fit, said before a start) or ``pruned`` (which measured candidate dominated
it, and why).

Dominance rests on two monotonicity assumptions, and acts only on a *significant* measurement: a pruning
removes candidates that are then never measured, so an error there is not corrected by the answer's own
comparisons, and one noisy verdict must not remove a quadrant of the grid. Never on a missing interval
(infinite uncertainty, not none), never on a binding the walk does not show to be more than chance (errors,
``ladder_top``):

1. **Slots past the knee buy nothing.** At a given batch, ubatch, context and KV layout, throughput cannot
   grow past the knee by adding slots: the rungs up to the answer run the same users on the same busy slots.
   So once a candidate answered below its slot count, every candidate with more slots there is dominated,
   where the walk showed why: a *throughput plateau* whose gain interval (the doubling past the answer, from
   the two rungs' throughput intervals) lies entirely below the policy's ``min_gain_per_doubling``; or a
   latency objective (``slo_ttft``, ``slo_itl``, ``slo_e2e``) broken, by the recommender's own test, at a rung
   no larger than the slots (every user had a slot, as in the larger candidate).
2. **A decode pause grows with the batch.** Every decoding slot waits for the whole batch of prompt chunks
   (``-b`` tokens), so (a) if a candidate at batch b holds every constraint (feasible, bound by the throughput
   plateau or the ladder's top) and its pauses were *shown* bounded at every accepted rung from 2 users (the
   decode-starvation check ``ok``: enough requests and prefills judged, not merely unflagged), smaller batches
   at the same slots are dominated: their pauses were not binding and they can only lose prefill efficiency;
   (b) if a candidate's decode pauses were flagged at concurrency c <= its slots, candidates with the same or
   a larger batch and the same or more slots are dominated, their pause at c being at least as long. Here the
   flag must stand on its count: the requests held past the stall limit, ``held`` of ``requests`` (at least
   ``min_pause_requests``), significantly more than the p99's 1 % share at ``(1 - confidence) / family``,
   the family being the grid's size. A verdict's own test runs at ``1 - confidence`` per rung; a tune makes
   one such verdict per rung of every candidate, and a p99 over a hundred requests is their largest or
   second-largest, so one in twenty chance flags is expected in a grid of twelve, and a pruning acts on
   the whole quadrant (Bonferroni keeps the chance that any false flag prunes below ``1 - confidence``).
   A rung flagged for the ITL objective counts as paused for (a) (it is no evidence of bounded pauses) but
   does not prune by (b): ITL p95 is judged by its value, without a count to test.

So a pruned search agrees with the full grid wherever the full grid's choice is significant and the
assumptions hold (``tests/tune/test_pruning_noise.py``, ``bench/tune_noise.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

from satbench.answer import checks
from satbench.answer.models import LaneModel, StepModel
from satbench.core.statistics import exceedance_p_value, gain_interval
from satbench.tune.grid import Candidate
from satbench.tune.models import CandidateState, WalkFacts

__all__ = ["FEASIBLE_STATUSES", "Outcome", "PauseCount", "PruneRules", "dominator", "outcome_from_lane",
           "search", "walk_again_on_drift"]

# undecided: the answer may be one doubling high (the doubling into it straddles the gain), every hard
# constraint held at it; an unknown status is not feasible and is recorded as it came
FEASIBLE_STATUSES = ("ok", "unsaturated", "undecided")
# the registry's (answer.checks): limits a larger batch can only break more, latency objectives, throughput bounds
PAUSE_CONSTRAINTS = checks.PAUSE_CONSTRAINTS
LATENCY_CONSTRAINTS = checks.SLO_CONSTRAINTS
_BOUND_BY_THROUGHPUT = checks.THROUGHPUT_CONSTRAINTS
_PAUSE_OK = ("ok", "not_applicable")


@dataclass(frozen=True, slots=True)
class PauseCount:
    """A rung flagged for decode starvation, with the count behind the flag (None where not published)."""

    concurrency: int
    held: int | None = None
    requests: int | None = None


@dataclass(frozen=True, slots=True)
class PruneRules:
    """What a pruning needs to act: the policy's gain and confidence, the family its test corrects for."""

    min_gain: float = 0.10
    confidence: float = 0.95
    family: int = 1
    min_pause_requests: int = 10

    @property
    def alpha(self) -> float:
        return (1.0 - self.confidence) / max(1, self.family)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the search did with one candidate, and what was measured (``state`` = ``measured``)."""

    candidate: Candidate
    state: CandidateState  # measured | refused | skipped | pruned
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
    throughput_se_tok_s: float | None = None
    throughput_dof: float | None = None
    pause_counts: tuple[PauseCount, ...] = ()
    pauses_bounded: bool = False
    plateau: tuple[float, float] | None = None  # gain interval of the doubling past the answer
    next_rung: int | None = None
    truncated: int = 0  # requests the server cut short at its context
    window_factor: float = 1.0
    facts: WalkFacts = field(default_factory=WalkFacts)  # memory, read-back, resume: what tune.json records
    drift: str | None = None  # the node changed speed during this walk (core.drift): what the check said

    @property
    def feasible(self) -> bool:
        """Measured, with an answer, every hard constraint held at it (status ok, unsaturated or undecided),
        on a walk the node did not drift in (a drifted walk is compared with nothing: ``walk_again_on_drift``)."""
        return (self.state == "measured" and self.recommended is not None and self.throughput_tok_s is not None
                and self.status in FEASIBLE_STATUSES and self.drift is None)

    @property
    def half_width_tok_s(self) -> float:
        """Half the interval of the throughput at the recommended rung (infinite where none was measured)."""
        ci = self.throughput_ci_tok_s
        return float("inf") if ci is None else (ci[1] - ci[0]) / 2.0


def _ci(value: tuple[float, float] | None) -> tuple[float, float] | None:
    return None if value is None else (float(value[0]), float(value[1]))


def _pause_count(step: StepModel) -> PauseCount | None:
    check = step.checks.get("decode_starvation")
    if check is None or check.status != "flagged":
        return None
    if check.limit is None:
        return PauseCount(step.concurrency)
    tail = step.pause_excess_tail
    return PauseCount(step.concurrency, sum(1 for v in tail.top if v > check.limit), tail.n)


def _pause_flagged(step: StepModel) -> bool:
    check = step.checks.get("decode_starvation")
    return (check is not None and check.status == "flagged") or any(
        v.constraint in PAUSE_CONSTRAINTS for v in step.violations)


def _pauses_ok(step: StepModel) -> bool:
    check = step.checks.get("decode_starvation")
    return check is not None and check.status in _PAUSE_OK and not _pause_flagged(step)


def outcome_from_lane(candidate: Candidate, lane: LaneModel | None, folder: str | None = None) -> Outcome:
    """A measured candidate's outcome from its recommendations document's answer for the lane (None: the
    document has none)."""
    rec = None if lane is None else lane.recommended_concurrency
    steps = sorted(lane.steps if lane is not None else [], key=lambda s: s.concurrency)
    at = next((s for s in steps if s.concurrency == rec), None)
    ci = None if at is None else _ci(at.throughput_ci_tok_s)
    above = next((s for s in steps if rec is not None and s.concurrency > rec), None)
    plateau = None
    if above is not None and rec is not None:
        plateau = gain_interval(rec, ci, above.concurrency, _ci(above.throughput_ci_tok_s))
    accepted = [s for s in steps if rec is not None and 2 <= s.concurrency <= rec]
    bounded = bool(accepted) and all(_pauses_ok(s) for s in accepted)
    counts = tuple(c for c in (_pause_count(s) for s in steps) if c is not None)
    return Outcome(
        candidate=candidate, state="measured", status=None if lane is None else lane.status, recommended=rec,
        binding=None if lane is None else lane.binding_constraint,
        throughput_tok_s=None if lane is None else lane.throughput_at_recommended_tok_s,
        throughput_ci_tok_s=ci, starved_at=tuple(sorted({s.concurrency for s in steps if _pause_flagged(s)})),
        reason=None if lane is None else lane.reason, folder=folder, rungs=tuple(s.concurrency for s in steps),
        throughput_se_tok_s=None if at is None else at.throughput_se_tok_s,
        throughput_dof=None if at is None else at.throughput_dof,
        pause_counts=counts, pauses_bounded=bounded, plateau=plateau,
        next_rung=None if above is None else above.concurrency,
        drift=lane.drift.said if lane is not None and lane.drift is not None and lane.drift.drifted else None)


def _same_point(a: Candidate, b: Candidate) -> bool:
    return (a.batch, a.ubatch, a.ctx_per_slot, a.kv_unified) == (b.batch, b.ubatch, b.ctx_per_slot, b.kv_unified)


def significant_pause(count: PauseCount, rules: PruneRules) -> bool:
    """Whether a pause flag stands on its count at the pruning's level (module docstring)."""
    if count.held is None or count.requests is None or count.requests < rules.min_pause_requests:
        return False
    return exceedance_p_value(count.held, count.requests, 0.99) < rules.alpha


def _knee(m: Outcome, candidate: Candidate, rules: PruneRules) -> str | None:
    mc, rec = m.candidate, m.recommended
    if rec is None or rec >= mc.parallel or candidate.parallel <= mc.parallel or not _same_point(candidate, mc):
        return None
    if m.binding == "throughput_plateau" and m.plateau is not None and m.plateau[1] < rules.min_gain:
        return (f"{mc.id} answered c={rec} below its {mc.parallel} slots: the doubling to c={m.next_rung} gained "
                f"[{m.plateau[0]:+.1%}, {m.plateau[1]:+.1%}] per doubling, entirely below the "
                f"{rules.min_gain:.0%} it must buy; more slots at the same batch cannot raise throughput past it")
    if m.binding in LATENCY_CONSTRAINTS and m.next_rung is not None and m.next_rung <= mc.parallel:
        return (f"{mc.id} answered c={rec} below its {mc.parallel} slots: {m.binding} broke at c={m.next_rung}, "
                f"where every user had a slot, as they would with more slots at the same batch")
    return None


def dominator(candidate: Candidate, measured: Iterable[Outcome],
              rules: PruneRules | None = None) -> tuple[Outcome, str] | None:
    """The first measured outcome that dominates ``candidate`` and why (module docstring), or None."""
    rules = rules or PruneRules()
    for m in measured:
        if m.state != "measured":
            continue
        mc = m.candidate
        why = _knee(m, candidate, rules)
        if why is not None:
            return m, why
        if (m.feasible and m.binding in _BOUND_BY_THROUGHPUT and m.pauses_bounded and not m.starved_at
                and candidate.parallel == mc.parallel and candidate.ctx_per_slot == mc.ctx_per_slot
                and candidate.kv_unified == mc.kv_unified and candidate.batch < mc.batch
                and candidate.ubatch <= mc.ubatch):
            return m, (f"{mc.id} held every constraint at batch {mc.batch} ({m.binding} at c={m.recommended}), its "
                       f"pauses shown bounded at every rung: a smaller batch only loses prefill efficiency")
        flagged = [p for p in m.pause_counts if p.concurrency <= mc.parallel and significant_pause(p, rules)]
        if (flagged and candidate.ctx_per_slot == mc.ctx_per_slot and candidate.batch >= mc.batch
                and candidate.parallel >= mc.parallel and candidate != mc):
            p = flagged[0]
            return m, (f"{mc.id} paused decodes past the stall limit at c={p.concurrency} with batch {mc.batch} "
                       f"({p.held} of {p.requests} requests held, significant at {rules.alpha:.2g}): a batch as "
                       f"large, with as many slots, pauses them as long")
    return None


def walk_again_on_drift(measure: Callable[..., Outcome], set_aside: Callable[[Candidate, Outcome], None],
                        say: Callable[[str], None] = lambda line: None) -> Callable[..., Outcome]:
    """``measure`` that never hands the search a drifted walk to compare: a candidate whose walk drifted (the
    node changed speed during it, ``core.drift``) is set aside (``set_aside``: its folder moved, so no resume
    reads it) and walked once more; drifted again, it is left out with its reason (``Outcome.drift`` set: not
    feasible). A drift during one candidate's walk then changes nothing the tune compares, as long as the node
    is steady again by the re-walk; a node that keeps changing leaves no candidate to compare, and says so."""
    def measured(candidate: Candidate, *args: float) -> Outcome:
        first = measure(candidate, *args)
        if first.drift is None:
            return first
        say(f"  {candidate.id}: the node drifted during its walk ({first.drift}): walked again")
        set_aside(candidate, first)
        again = measure(candidate, *args)
        if again.drift is None:
            return again
        why = f"left out: the node drifted during both walks ({again.drift}); no candidate is compared across a drift"
        say(f"  {candidate.id}: {why}")
        return replace(again, reason=why)
    return measured


def search(candidates: Sequence[Candidate], measure: Callable[[Candidate], Outcome], *,
           prune: bool = True, rules: PruneRules | None = None) -> list[Outcome]:
    """Every candidate's outcome, in grid order: pruned where a measured one dominates it, else measured."""
    rules = rules or PruneRules(family=len(candidates))
    outcomes: list[Outcome] = []
    for candidate in candidates:
        hit = dominator(candidate, outcomes, rules) if prune else None
        if hit is not None:
            by, why = hit
            outcomes.append(Outcome(candidate, "pruned", reason=why, dominated_by=by.candidate.id))
            continue
        outcomes.append(replace(measure(candidate), candidate=candidate))
    return outcomes
