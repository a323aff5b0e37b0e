"""The analytic answer of a tune: each candidate's ladder judged from ``simulator.tuning``'s virtual-time truth
by the recommender's own walk (``analyze_lane``), then chosen by the tune's own rule (``choose``)."""

from __future__ import annotations

from core.figures import Quantiles, StepFigures
from recommender.analysis import analyze_lane
from recommender.policy import Policy
from satbench.tune.answer import Choice, choose
from satbench.tune.grid import Candidate
from satbench.tune.search import Outcome
from simulator.profile import Profile
from simulator.tuning import TruthPoint, TuneWorkload, candidate_profile, truth_point


def figures(point: TruthPoint) -> StepFigures:
    p = point
    return StepFigures(
        lane="truth", concurrency=p.concurrency, window_s=1.0, requests=10**6, errors=0,
        throughput_tok_s=p.throughput_tok_s, requests_per_s=p.requests_per_s,
        ttft_s=Quantiles(p.ttft_p50_s, p.ttft_p95_s, p.ttft_p95_s),
        itl_s=Quantiles(p.itl_p50_s, p.itl_p95_s, p.itl_p95_s),
        latency_s=Quantiles(p.e2e_p95_s, p.e2e_p95_s, p.e2e_p95_s), jain=1.0,
        pause_s=Quantiles(p99=p.pause_p99_s), pause_requests=p.pause_requests, prefill_events=p.prefill_events)


def rungs(candidate: Candidate, ladder: list[int]) -> list[int]:
    """The rungs a walk may measure: the listed ones, then doublings up to twice the slots."""
    out = [c for c in ladder if c <= 2 * candidate.parallel]
    while out[-1] * 2 <= 2 * candidate.parallel:
        out.append(out[-1] * 2)
    return out


def truth_outcome(profile: Profile, workload: TuneWorkload, candidate: Candidate, ladder: list[int],
                  policy: Policy) -> Outcome:
    served = candidate_profile(profile, slots=candidate.parallel, batch=candidate.batch, ubatch=candidate.ubatch,
                               ctx_per_slot=candidate.ctx_per_slot)
    steps = [figures(truth_point(served, workload, c)) for c in rungs(candidate, ladder)]
    answer = analyze_lane("truth", steps, policy)
    return Outcome(candidate, "measured", status=answer.status, recommended=answer.recommended_concurrency,
                   binding=answer.binding_constraint, throughput_tok_s=answer.throughput_at_recommended_tok_s)


def truth_choice(profile: Profile, workload: TuneWorkload, candidates: list[Candidate], ladder: list[int],
                 policy: Policy) -> Choice:
    outcomes = [truth_outcome(profile, workload, c, ladder, policy) for c in candidates]
    return choose(outcomes, policy.min_gain_per_doubling)
