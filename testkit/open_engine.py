"""A small continuous-batching server fed open-loop arrivals in virtual time: the truth instrument for the
attainment interval and the rate answer under bursty arrivals.

Why beside the simulator's engine (``testkit.open_truth``): the coverage of an interval is measured over
hundreds of windows and truths over hours of virtual time, which the simulator's engine (a faithful model of
llama-server's scheduler, a few seconds per thousand requests) makes too slow for a bench and far too slow
for a test. This engine keeps what makes a queue's misses clump: ``slots`` slots, FIFO admission at each
step's start, chunked prefill with a shared token budget per step, one token per decoding slot per step, and
a step that lasts ``step_s + per_slot_s * decoding + prefill_per_token_s * prompt tokens``. Nothing here comes
from satbench's load generator or recommender.

``serve`` runs the seeded arrival schedule (``core.arrivals.schedule``: the very offsets the load generator
sends) and returns each request's intended send, first token and end. ``true_attainment`` is the share of
the requests of long runs (seeds pooled, each run's first ``skip_s`` left out: it starts empty) whose TTFT
and e2e from the intended send met the objectives; ``true_max_rate`` the highest rate, to 1 %, whose
long-run attainment reaches the target.

``measured_rung`` is one rate rung as the load generator measures it, on this engine: the same seeded
schedule, the looks of ``loadgen.open_step`` (``core.attainment.rate_look`` at ``min_window_s`` and 1.5x
growing lengths up to ``max_window_s``, with what was known at each: the requests ended, and those in flight
whose TTFT deadline had passed), then the finished window's figures (``core.step_figures``). A test walks the
search (``loadgen.rates``) over it and answers with ``answer.rate_analysis``: satbench's measurement,
minus its wire, against a truth that is the engine's.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from satbench.core.arrivals import schedule
from satbench.core.attainment import rate_look
from satbench.core.figures import StepFigures
from satbench.core.manifest import StepWindow
from satbench.core.objectives import Objectives
from satbench.core.records import RequestRecord
from satbench.core.step_figures import compute_step_figures

__all__ = ["OpenEngine", "Served", "measured_rung", "serve", "true_attainment", "true_max_rate"]


@dataclass(frozen=True, slots=True)
class OpenEngine:
    slots: int = 4
    step_s: float = 0.02
    per_slot_s: float = 0.002
    prefill_per_token_s: float = 0.0001
    chunk: int = 512
    prompt_tokens: int = 64
    output_tokens: int = 32


@dataclass(frozen=True, slots=True)
class Served:
    """One request: meant to be sent at ``sent``; its first token and end (``inf``: not by the run's end)."""

    sent: float
    first: float
    end: float

    @property
    def wait(self) -> float:
        return self.first - self.sent

    def attained(self, objectives: Objectives, prompt_tokens: int, output_tokens: int) -> bool:
        if not math.isfinite(self.end):
            return False
        tpot = (self.end - self.first) / (output_tokens - 1) if output_tokens > 1 else None
        return not objectives.misses(ok=True, ttft_s=self.first - self.sent, tpot_s=tpot, pause_excess_s=None,
                                     e2e_s=self.end - self.sent, prompt_tokens=prompt_tokens)


def serve(engine: OpenEngine, process: str, rate: float, seed: int | str, duration_s: float,
          shape: float = 1.0) -> list[Served]:
    """The engine's answer to ``duration_s`` of seeded arrivals, every request followed to its end."""
    sends = schedule(process, rate, duration_s, seed, shape)
    first = [math.inf] * len(sends)
    end = [math.inf] * len(sends)
    left = [0] * len(sends)
    made = [0] * len(sends)
    queue: deque[int] = deque()
    active: list[int] = []
    i = 0
    t = sends[0] if sends else 0.0
    while i < len(sends) or queue or active:
        while i < len(sends) and sends[i] <= t:
            left[i] = engine.prompt_tokens
            queue.append(i)
            i += 1
        while queue and len(active) < engine.slots:
            active.append(queue.popleft())
        if not active:
            t = sends[i]
            continue
        budget = engine.chunk
        prefill = decoding = 0
        for r in active:
            if left[r] == 0:
                decoding += 1
            elif budget > 0:
                take = min(left[r], budget)
                left[r] -= take
                budget -= take
                prefill += take
                if left[r] == 0:
                    made[r] = -1  # its prefill ends this step: its first token comes with it
        t += engine.step_s + engine.per_slot_s * decoding + engine.prefill_per_token_s * prefill
        still = []
        for r in active:
            if made[r] == -1:
                made[r] = 1
                first[r] = t
            elif left[r] == 0:
                made[r] += 1
            if made[r] >= engine.output_tokens:
                end[r] = t
            else:
                still.append(r)
        active = still
    return [Served(s, f, e) for s, f, e in zip(sends, first, end, strict=True)]


def true_attainment(engine: OpenEngine, process: str, rate: float, *, objectives: Objectives, shape: float = 1.0,
                    seeds: tuple[int, ...] = (1, 2, 3), duration_s: float = 3000.0, skip_s: float = 100.0) -> float:
    """The long-run share of requests within ``objectives`` at ``rate`` (module docstring)."""
    attained = judged = 0
    for seed in seeds:
        for req in serve(engine, process, rate, f"truth:{seed}", duration_s, shape):
            if req.sent >= skip_s:
                judged += 1
                attained += req.attained(objectives, engine.prompt_tokens, engine.output_tokens)
    return attained / judged if judged else 0.0


def true_max_rate(engine: OpenEngine, process: str, capacity_rps: float, *, objectives: Objectives,
                  target: float = 0.9, shape: float = 1.0, seeds: tuple[int, ...] = (1, 2, 3),
                  duration_s: float = 3000.0) -> float:
    """The highest rate, to 1 %, below ``capacity_rps`` whose long-run attainment reaches ``target``."""
    low, high = capacity_rps * 0.05, capacity_rps

    def ok(rate: float) -> bool:
        return true_attainment(engine, process, rate, objectives=objectives, shape=shape, seeds=seeds,
                               duration_s=duration_s) >= target

    while high / low > 1.01:
        mid = math.sqrt(low * high)
        low, high = (mid, high) if ok(mid) else (low, mid)
    return low


def measured_rung(engine: OpenEngine, process: str, rate: float, seed: int | str, *, objectives: Objectives,
                  target: float = 0.9, capacity_rps: float | None = None, shape: float = 1.0, warmup_s: float = 4.0,
                  min_window_s: float = 8.0, max_window_s: float = 90.0) -> StepFigures:
    """One open rung measured as the load generator measures it (module docstring)."""
    served = serve(engine, process, rate, seed, warmup_s + max_window_s + 120.0, shape)
    deadline = math.inf if objectives.ttft_s is None else objectives.ttft_s
    attained = [r.attained(objectives, engine.prompt_tokens, engine.output_tokens) for r in served]
    start = warmup_s
    now = start + min_window_s
    while True:
        done, pending = [], []
        for r, ok in zip(served, attained, strict=True):
            if r.sent > now:
                continue
            if r.end <= now:
                done.append((r.sent, r.wait, r.end, ok))
            else:
                wait = min(r.first, now) - r.sent
                pending.append((r.sent, wait, r.first > now and wait > deadline))
        look = rate_look(done, pending, start, now, rate, target=target, capacity_rps=capacity_rps,
                         early=now < start + max_window_s)
        if look.verdict != "undecided" or now >= start + max_window_s:
            break
        now = min(start + max_window_s, start + 1.5 * (now - start))
    begin = start if look.start is None else look.start
    records = []
    out = engine.output_tokens
    for i, r in enumerate(served):
        gap = (r.end - r.first) / (out - 1) if out > 1 else 0.0
        records.append(RequestRecord(
            run_id="engine", lane="x", concurrency=0, user=0, request_id=f"r{i}",
            phase="window" if begin <= r.sent <= now else "warmup", sent_at=r.sent, ttft_s=r.first - r.sent,
            e2e_s=r.end - r.sent, queue_s=None, itl_s=(gap,) * (out - 1), prompt_tokens=engine.prompt_tokens,
            output_tokens=out, outcome="ok", rate_rps=rate, intended_at=r.sent))
    window = StepWindow(lane="x", concurrency=0, start=begin, end=now, slots=engine.slots, rate_rps=rate,
                        steady=look.steady)
    return compute_step_figures(records, window, objectives=objectives)
