"""The analytic truth of a tune's scenario: what the engine does for a candidate at a concurrency, in virtual time
(``simulator.tuning``), so a test states its expected winner from the engine's own figures (this candidate's
pause is over the objective, that one's ITL under it, this gain above the policy's) and never from the
recommender's walk or the tune's ``choose`` run on the truth: the rule under test must not judge its own
answer."""

from __future__ import annotations

from satbench.simulator.profile import Profile
from satbench.simulator.tuning import TruthPoint, TuneWorkload, candidate_profile, truth_point
from satbench.tune.grid import Candidate


def truth_at(profile: Profile, workload: TuneWorkload, candidate: Candidate, concurrency: int) -> TruthPoint:
    """The engine's figures for ``concurrency`` closed-loop users of ``candidate``'s server."""
    served = candidate_profile(profile, slots=candidate.parallel, batch=candidate.batch, ubatch=candidate.ubatch,
                               ctx_per_slot=candidate.ctx_per_slot)
    return truth_point(served, workload, concurrency)


def gain_per_doubling(low: TruthPoint, high: TruthPoint, slots_low: int, slots_high: int) -> float:
    """The true throughput gain per doubling of slots from one candidate's answer to another's."""
    import math

    return float((high.throughput_tok_s / low.throughput_tok_s) ** (1 / math.log2(slots_high / slots_low)) - 1)
