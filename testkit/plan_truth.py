"""A capacity plan's truth from the simulator's engine, in virtual time, and a node's rate answer measured the way a
session measures it.

Truth (``fleet_attainment``) is a property of the engine alone: one seeded open-loop schedule at the fleet's
rate (``core.arrivals.schedule``), each request sent to one of ``n`` identical nodes chosen uniformly at random
(a router that spreads evenly; the planner's thinning argument is not assumed, the split is done), each node the
simulator's engine (``simulator.virtual.run_requests``) serving its share to the end. The attainment is the share
of the fleet's requests meant to be sent after the first ``skip_s`` (the nodes start empty) that met every
objective (``testkit.open_truth.Served.misses``: TTFT and e2e from the intended send, the request's TPOT).

Measurement (``measured_rate``): the closed ladder's capacity (virtual closed loops at the slot count and twice
it), the session's rate search (``loadgen.rates``) over rungs looked at as ``loadgen.open_step`` looks
(``testkit.open_truth.measured_answer``, up to the session's ``arrival.max_window_s``), and the recommender's
answer (``answer.rate_analysis``): satbench's measurement minus its wire, as ``tests/rates/test_truth.py``
and ``bench/rate_accuracy.py`` do (these with 90 s windows).
"""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any

from satbench.answer.policy import Policy, objectives_of
from satbench.answer.rate_analysis import RateAnswer, rate_answer
from satbench.core.arrivals import schedule
from satbench.core.objectives import Objectives
from satbench.loadgen.config import ArrivalConfig
from satbench.loadgen.rates import RateOutcome, judge, next_rate
from satbench.simulator.engine import RequestSpec
from satbench.simulator.profile import Profile
from satbench.simulator.virtual import run_requests
from testkit.open_truth import Served, closed_ladder, measured_answer

__all__ = ["fleet_attainment", "measured_rate", "simulated_fingerprint"]


def fleet_attainment(profile: Profile, rate: float, nodes: int, *, objectives: Objectives, seed: int | str = 1,
                     duration_s: float = 240.0, skip_s: float = 30.0, prompt_tokens: int = 64,
                     output_tokens: int = 64) -> float:
    """The share of ``duration_s`` of Poisson arrivals at ``rate``, split at random over ``nodes`` engines,
    that met ``objectives`` (module docstring)."""
    offsets = schedule("poisson", rate, duration_s, f"fleet:{seed}")
    router = random.Random(f"router:{seed}:{nodes}")
    shares: dict[int, list[tuple[float, RequestSpec]]] = defaultdict(list)
    for i, t in enumerate(offsets):
        shares[router.randrange(nodes)].append(
            (t, RequestSpec(f"r{i}", prompt_tokens, output_tokens, ignore_eos=True, user="user-0")))
    attained = judged = 0
    for arrivals in shares.values():
        _, emissions = run_requests(profile, arrivals)
        tokens: dict[str, list[float]] = defaultdict(list)
        for at, rid, _ in emissions:
            tokens[rid].append(at)
        for t, spec in arrivals:
            if t < skip_s:
                continue
            judged += 1
            served = Served(t, tuple(tokens.get(spec.request_id, ())), None)
            attained += not served.misses(objectives, prompt_tokens)
    return attained / judged if judged else 0.0


def measured_rate(profile: Profile, seed: int, policy: Policy | None = None) -> RateAnswer:
    """One node's rate answer as a session measures it (module docstring), Poisson arrivals."""
    policy = policy or Policy()
    objectives = objectives_of(policy)
    ladder = closed_ladder(profile, objectives)
    capacity, bound, warmup = ladder.capacity_rps, ladder.bound_rps, ladder.warmup_s
    arrival = ArrivalConfig(process="poisson")
    steps = measured_answer(
        profile, "poisson", seed, objectives=objectives, capacity_rps=capacity, capacity_high=bound,
        warmup_s=warmup, max_window_s=arrival.max_window_s, target=policy.attainment_target,
        judge=lambda f, hi: judge(f, arrival, hi).passed,
        next_rate=lambda done, cap: next_rate([RateOutcome(r, p) for r, p in done], arrival, cap))
    answer = rate_answer(steps, policy, capacity_rps=capacity)
    assert answer is not None
    return answer


def simulated_fingerprint(profile: Profile) -> dict[str, Any]:
    """What a simulated node's exporter would say it runs: its model, build, settings and accelerator."""
    server, memory = profile.server, profile.memory
    return {"digest": f"sha256:sim-{profile.name}-np{server.slots}",
            "runtime": {"build": "b0-satbench-simulator", "binary_sha256": None},
            "model": {"path": profile.model.name, "files": None},
            "settings": {"slots": server.slots, "ctx_per_slot": server.slot_ctx_tokens or server.ctx_tokens,
                         "batch": server.batch, "ubatch": server.ubatch},
            "hardware": {"gpu": memory.gpu_name, "gpu_count": memory.gpu_count,
                         "gpu_memory_bytes": memory.gpu_total_bytes}}
