"""The rate answer's truth from the simulator's engine, in virtual time, and the load generator's measurement
of it replayed on the same engine.

Truth (``true_max_rate``) is a property of the engine alone, never of the load generator's windows, statistics
or search: the highest rate (to 1 %) below the engine's capacity at which long runs (``truth_window_s`` of
virtual time per seed, seeds pooled, the first ``truth_skip_s`` of each left out: they start from an empty
server) serve at least ``target`` of their requests within every objective (``core.objectives``; TTFT and e2e
from the intended send time, the request's own TPOT). The capacity (``true_capacity``) is the requests/s of
a long closed loop with twice as many users as slots: every slot always busy, the most the engine completes.
A rate at or above it has no steady state, whatever its attainment over a finite run.

Measurement (``measured_rung``, ``measured_answer``): each rung feeds the engine the very arrival schedule the
load generator sends (``core.arrivals.schedule``: same process, rate and seed) and replays the load
generator's looks on it (``core.attainment.rate_look`` at the lengths ``loadgen.open_step`` looks at, with
what was known at each: requests ended, and those in flight whose TTFT deadline had already passed), then
its finished window's figures (``core.step_figures``) and verdict, and the search (``loadgen.rates``) over
rungs: the load generator's measurement, minus its wire.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from satbench.core.arrivals import schedule
from satbench.core.attainment import capacity_bound, rate_look
from satbench.core.figures import StepFigures
from satbench.core.manifest import StepWindow
from satbench.core.objectives import Objectives
from satbench.core.records import RequestRecord
from satbench.core.step_figures import compute_step_figures
from satbench.simulator.engine import RequestSpec
from satbench.simulator.profile import Profile
from satbench.simulator.virtual import run_closed_loop, run_requests

__all__ = ["ClosedLadder", "Served", "closed_ladder", "measured_answer", "measured_rung", "serve", "true_capacity",
           "true_max_rate"]


@dataclass(frozen=True, slots=True)
class Served:
    """One request of an open-loop run: meant to be sent at ``sent``, its token times, when it was admitted."""

    sent: float
    tokens: tuple[float, ...]
    admitted: float | None

    def misses(self, objectives: Objectives, prompt_tokens: int) -> list[str]:
        if not self.tokens:
            return ["error"]
        tpot = (self.tokens[-1] - self.tokens[0]) / (len(self.tokens) - 1) if len(self.tokens) > 1 else None
        return objectives.misses(ok=True, ttft_s=self.tokens[0] - self.sent, tpot_s=tpot, pause_excess_s=None,
                                 e2e_s=self.tokens[-1] - self.sent, prompt_tokens=prompt_tokens)


def serve(profile: Profile, process: str, rate: float, seed: int | str, duration_s: float, *,
          prompt_tokens: int = 64, output_tokens: int = 64, shape: float = 1.0) -> list[Served]:
    """The engine's answer to ``duration_s`` of open-loop arrivals (every request followed to its end)."""
    offsets = schedule(process, rate, duration_s, seed, shape)
    arrivals = [(t, RequestSpec(f"r{i}", prompt_tokens, output_tokens, ignore_eos=True, user="user-0"))
                for i, t in enumerate(offsets)]
    engine, emissions = run_requests(profile, arrivals)
    tokens: dict[str, list[float]] = defaultdict(list)
    for at, rid, _ in emissions:
        tokens[rid].append(at)
    truth = {r.request_id: r for r in engine.truth}
    return [Served(t, tuple(tokens.get(f"r{i}", ())), truth[f"r{i}"].admitted) for i, t in enumerate(offsets)]


def true_capacity(profile: Profile, prompt_tokens: int = 64, output_tokens: int = 64) -> float:
    """The most requests/s the engine completes: a long closed loop with twice as many users as slots."""
    users = 2 * profile.server.slots
    return run_closed_loop(profile, users, prompt_tokens, output_tokens, requests_per_user=60).requests_per_s


def true_attainment(profile: Profile, process: str, rate: float, *, objectives: Objectives,
                    seeds: tuple[int, ...] = (1, 2, 3), truth_window_s: float = 600.0, truth_skip_s: float = 30.0,
                    prompt_tokens: int = 64, output_tokens: int = 64, shape: float = 1.0) -> float:
    """The long-run share of requests attaining every objective at ``rate`` (module docstring)."""
    attained = judged = 0
    for seed in seeds:
        for req in serve(profile, process, rate, f"truth:{seed}", truth_window_s, prompt_tokens=prompt_tokens,
                         output_tokens=output_tokens, shape=shape):
            if req.sent < truth_skip_s:
                continue
            judged += 1
            attained += not req.misses(objectives, prompt_tokens)
    return attained / judged if judged else 0.0


def true_max_rate(profile: Profile, process: str = "poisson", *, objectives: Objectives, target: float = 0.9,
                  seeds: tuple[int, ...] = (1, 2, 3), truth_window_s: float = 600.0, prompt_tokens: int = 64,
                  output_tokens: int = 64, shape: float = 1.0) -> float:
    """The highest rate, to 1 %, below the engine's capacity that it serves within ``objectives`` for ``target``
    of its requests in the long run (module docstring)."""
    capacity = true_capacity(profile, prompt_tokens, output_tokens)

    def ok(rate: float) -> bool:
        return true_attainment(profile, process, rate, objectives=objectives, seeds=seeds,
                               truth_window_s=truth_window_s, prompt_tokens=prompt_tokens,
                               output_tokens=output_tokens, shape=shape) >= target

    high = capacity
    low = capacity / 2
    while not ok(low) and low > capacity / 1000:
        high, low = low, low / 2
    while high / low > 1.01:
        mid = math.sqrt(low * high)
        low, high = (mid, high) if ok(mid) else (low, mid)
    return low


def measured_rung(profile: Profile, process: str, rate: float, seed: int | str, *, objectives: Objectives,
                  target: float = 0.9, confidence: float = 0.95, capacity_rps: float | None = None,
                  warmup_s: float = 2.0, min_window_s: float = 8.0, max_window_s: float = 90.0,
                  prompt_tokens: int = 64, output_tokens: int = 64, shape: float = 1.0,
                  lane: str = "x") -> tuple[list[RequestRecord], StepWindow]:
    """One open-loop rung as the load generator measures it, in virtual time (module docstring): its records
    and its window, whose end is the first look that decided the rate (or ``max_window_s``)."""
    served = serve(profile, process, rate, seed, warmup_s + max_window_s + 60.0, prompt_tokens=prompt_tokens,
                   output_tokens=output_tokens, shape=shape)
    start = warmup_s
    end = start + min_window_s
    while True:
        done, pending = [], []
        for req in served:
            if req.sent > end:
                continue
            last = req.tokens[-1] if req.tokens else math.inf
            first = req.tokens[0] if req.tokens else math.inf
            if last <= end:
                done.append((req.sent, first - req.sent, last, not req.misses(objectives, prompt_tokens)))
            else:
                wait = min(first, end) - req.sent
                pending.append((req.sent, wait, objectives.ttft_overdue(wait, prompt_tokens)))
        look = rate_look(done, pending, start, end, rate, target=target, confidence=confidence,
                         capacity_rps=capacity_rps)
        if look.verdict != "undecided" or end >= start + max_window_s:
            break
        end = min(start + max_window_s, start + 1.5 * (end - start))
    start = look.start if look.start is not None else start
    steady = look.steady
    records = []
    for i, req in enumerate(served):
        last = req.tokens[-1] if req.tokens else req.sent
        records.append(RequestRecord(
            run_id="virtual", lane=lane, concurrency=0, user=0, request_id=f"r{i}",
            phase="window" if start <= req.sent <= end else "warmup", sent_at=req.sent,
            ttft_s=None if not req.tokens else req.tokens[0] - req.sent, e2e_s=last - req.sent,
            queue_s=None if req.admitted is None else req.admitted - req.sent,
            itl_s=tuple(b - a for a, b in itertools.pairwise(req.tokens)), prompt_tokens=prompt_tokens,
            output_tokens=len(req.tokens), outcome="ok", rate_rps=rate, intended_at=req.sent))
    window = StepWindow(lane=lane, concurrency=0, start=start, end=end, slots=profile.server.slots, rate_rps=rate,
                        steady=steady)
    return records, window


def measured_answer(profile: Profile, process: str, seed: int | str, *, objectives: Objectives,
                    judge: Callable[[StepFigures, float | None], bool | None],
                    next_rate: Callable[[list[tuple[float, bool | None]], float], float | None],
                    capacity_rps: float, capacity_high: float | None, target: float = 0.9,
                    shape: float = 1.0, warmup_s: float = 2.0, min_window_s: float = 8.0,
                    max_window_s: float = 90.0) -> list[StepFigures]:
    """The rungs of one rate search replayed in virtual time: ``next_rate(outcomes, capacity)`` picks each
    rate, ``judge(figures, capacity_high)`` its verdict (the load generator's own, handed in by the test)."""
    outcomes: list[tuple[float, bool | None]] = []
    figures: list[StepFigures] = []
    while (rate := next_rate(outcomes, capacity_rps)) is not None:
        records, window = measured_rung(profile, process, rate, f"{seed}:{rate!r}", objectives=objectives,
                                        target=target, capacity_rps=capacity_high, shape=shape, warmup_s=warmup_s,
                                        min_window_s=min_window_s, max_window_s=max_window_s)
        step = compute_step_figures(records, window, objectives=objectives)
        figures.append(step)
        outcomes.append((rate, judge(step, capacity_high)))
    return figures


@dataclass(frozen=True)
class ClosedLadder:
    """What a session's closed ladder gives its rate search: the most requests/s a rung served, the FIFO
    bound on it (``core.attainment.capacity_bound``) and the open rungs' warm-up."""

    capacity_rps: float
    bound_rps: float | None
    warmup_s: float


def closed_ladder(profile: Profile, objectives: Objectives) -> ClosedLadder:
    """The closed ladder as a session measures it, on the engine: rungs at the slots and twice them (64-token
    prompts and outputs), the warm-up the longest of 2 s, twice the top rung's mean latency and the TTFT
    objective (``loadgen.runner``'s open-rung warm-up)."""
    closed, latency = [], 0.0
    for c in (profile.server.slots, 2 * profile.server.slots):
        run = run_closed_loop(profile, c, 64, 64, requests_per_user=12)
        closed.append((c, run.requests_per_s))
        latency = c / run.requests_per_s
    return ClosedLadder(max(r for _, r in closed), capacity_bound(closed, profile.server.slots),
                        max(2.0, 2 * latency, objectives.ttft_s or 0.0))
