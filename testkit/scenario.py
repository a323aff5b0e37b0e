"""A truth instrument for the verdicts: a small continuous-batching server with closed-loop users, in virtual
time, whose every decision is known (who was admitted when, what each step cost, which steps held a prefill).

Why a dedicated engine beside the simulator's: the verdicts must be tested against behaviours the simulator
does not have on purpose (newest-first or random admission, a decode step of any length, drafted delivery)
and against truth that is a property of the scenario, never the output of the code under test. The engine
runs one rung: ``users`` closed-loop users (each sends its next request a jitter after the previous one ended)
against ``slots`` slots. One step mirrors llama-server's ``update_slots``: admission into free slots by the
chosen policy, then a batch of one token per decoding slot (or a drafted burst) and up to ``batch`` prompt
tokens (a longer prompt continues in the next step: chunked prefill); the step lasts ``step_s + per_slot_s *
slots decoding + prefill_per_token_s * prompt tokens``. With ``draft``, a decoding slot emits a burst of
accepted draft tokens per step at the step's cost (verifying a few drafted tokens costs a memory-bound decode
about what one token costs: the point of speculative decoding), so a drafted lane has the same steps as the
same lane undrafted and more tokens per step.

``run`` records every request as satbench's load generator does (``core.records.RequestRecord``: sent, TTFT,
gaps, the server's queue time, the phase) with the load generator's drain: after the window the users keep
going until every request sent inside it has ended or ``drain_cap_s`` passed, then stop; what is still running
is cut off (``dropped``; ``extra.censored`` for one sent inside the window). ``Truth`` is what the engine knows:
each request's admission, first token and end as they happened, followed to its natural end (the same seed run
without a drain cap), every step's cost and how many prompt tokens it carried, and the decode-only step at the
rung's batch. Tests take their expected values from it, and from the scenario's parameters.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from satbench.core.manifest import StepWindow
from satbench.core.records import RequestRecord

__all__ = ["Engine", "Scenario", "ScenarioResult", "Truth", "TruthRequest", "lognormal", "run", "uniform"]

Draw = Callable[[random.Random], int]


def uniform(low: int, high: int) -> Draw:
    return lambda rng: rng.randint(low, high)


def lognormal(median: float, sigma: float, low: int = 1, high: int = 4096) -> Draw:
    """EOS-like lengths: most answers short, a long tail."""
    return lambda rng: min(max(round(math.exp(rng.gauss(math.log(median), sigma))), low), high)


@dataclass(frozen=True)
class Engine:
    slots: int = 4
    admission: str = "fifo"  # fifo | lifo (newest first) | lowest_user | random
    step_s: float = 0.010
    per_slot_s: float = 0.0008
    prefill_per_token_s: float = 0.00005
    batch: int = 2048  # prompt tokens one step may carry: below the prompt length, prefill is chunked
    draft: int = 0  # speculative decoding: up to this many drafted tokens per verify step (0: none)
    draft_accept: float = 0.75
    burst_spacing_s: float = 0.00005  # tokens of one verify step arrive this far apart


@dataclass(frozen=True)
class Scenario:
    engine: Engine
    users: int
    prompt: Draw = field(default=lambda rng: 64)
    output: Draw = field(default=uniform(48, 80))
    probe_share: float = 0.0  # a share of requests with a long prompt
    probe_tokens: int = 1500
    warmup_s: float = 2.0
    window_s: float = 16.0
    drain_cap_s: float | None = None  # None: follow the window's requests to their end (or the request timeout)
    request_timeout_s: float = 120.0
    settle_s: float = 5.0
    jitter_s: float = 0.0003
    lane: str = "x"


@dataclass
class TruthRequest:
    user: int
    index: int
    sent: float
    prompt: int
    output: int
    admitted: float | None = None
    tokens: list[float] = field(default_factory=list)
    end: float | None = None
    prefill_left: int = 0
    cut: bool = False

    @property
    def request_id(self) -> str:
        return f"{self.user}-{self.index}"


@dataclass(frozen=True)
class StepTrace:
    start: float
    end: float
    decoding: int
    prompt_tokens: int


@dataclass(frozen=True)
class Truth:
    requests: dict[str, TruthRequest]  # every request, followed to its natural end (no drain cap)
    steps: tuple[StepTrace, ...]
    window: StepWindow

    def sent_in_window(self) -> list[TruthRequest]:
        return [r for r in self.requests.values() if self.window.start <= r.sent <= self.window.end]

    def decode_only_step_s(self) -> float:
        """The median cost of the steps inside the window that carried no prompt token."""
        costs = sorted(s.end - s.start for s in self.steps if s.prompt_tokens == 0
                       and self.window.start <= s.start <= self.window.end)
        return costs[len(costs) // 2] if costs else math.nan

    def longest_prefill_hold_s(self) -> float:
        """The longest step that carried prompt tokens beside a decode, less the decode-only step."""
        held = [s.end - s.start for s in self.steps if s.prompt_tokens and s.decoding
                and self.window.start <= s.start <= self.window.end]
        return max(held, default=0.0) - self.decode_only_step_s()

    def served_users(self) -> set[int]:
        """Users with a token inside the window."""
        return {r.user for r in self.requests.values()
                if any(self.window.start <= t <= self.window.end for t in r.tokens)}


@dataclass(frozen=True)
class ScenarioResult:
    records: list[RequestRecord]
    window: StepWindow
    truth: Truth


class _Server:
    def __init__(self, sc: Scenario, rng: random.Random) -> None:
        self.sc, self.e, self.rng = sc, sc.engine, rng
        self.waiting: list[TruthRequest] = []
        self.active: list[TruthRequest] = []
        self.steps: list[StepTrace] = []

    def admit(self, now: float) -> None:
        order: dict[str, Callable[[TruthRequest], Any]] = {
            "fifo": lambda r: r.sent, "lifo": lambda r: -r.sent, "lowest_user": lambda r: (r.user, r.sent),
            "random": lambda r: self.rng.random()}
        ready = sorted((r for r in self.waiting if r.sent <= now), key=order[self.e.admission])
        while ready and len(self.active) < self.e.slots:
            req = ready.pop(0)
            self.waiting.remove(req)
            req.admitted = now
            self.active.append(req)

    def step(self, now: float) -> tuple[float, list[TruthRequest]]:
        """Runs one step from ``now``; returns its end and the requests that finished in it."""
        e = self.e
        decoding = [r for r in self.active if r.prefill_left == 0]
        budget = max(0, e.batch - len(decoding))
        prompt = 0
        first: list[TruthRequest] = []
        for r in self.active:
            if r.prefill_left > 0 and budget > 0:
                take = min(r.prefill_left, budget)
                r.prefill_left -= take
                budget -= take
                prompt += take
                if r.prefill_left == 0:
                    first.append(r)
        bursts = [self._burst() for _ in decoding]
        end = now + e.step_s + e.per_slot_s * len(decoding) + e.prefill_per_token_s * prompt
        self.steps.append(StepTrace(now, end, len(decoding), prompt))
        for r, k in zip(decoding, bursts, strict=True):
            for j in range(min(k, r.output - len(r.tokens))):
                r.tokens.append(end + j * e.burst_spacing_s)
        for r in first:
            r.tokens.append(end)
        done = [r for r in self.active if r.prefill_left == 0 and len(r.tokens) >= r.output]
        for r in done:
            r.end = r.tokens[-1]
            self.active.remove(r)
        return end, done

    def _burst(self) -> int:
        if not self.e.draft:
            return 1
        k = 1
        while k <= self.e.draft and self.rng.random() < self.e.draft_accept:
            k += 1
        return k


def _simulate(sc: Scenario, seed: int, cap: float | None
              ) -> tuple[dict[str, TruthRequest], list[StepTrace], float]:
    """Every request and step of one run, and when the load generator stopped following (cut off) the rest."""
    rng = random.Random(f"scenario:{seed}")
    draws = random.Random(f"workload:{seed}")
    server = _Server(sc, rng)
    start, end = sc.warmup_s, sc.warmup_s + sc.window_s
    requests: dict[str, TruthRequest] = {}
    pending: list[tuple[float, int]] = sorted((rng.random() * 0.005, u) for u in range(sc.users))
    sent_count = [0] * sc.users
    stop_at = math.inf  # when the users stop sending
    settle_until = math.inf  # when what is still running is cut off
    now = 0.0

    def send(user: int, at: float) -> None:
        probe = sc.probe_share > 0 and draws.random() < sc.probe_share
        prompt = sc.probe_tokens if probe else sc.prompt(draws)
        req = TruthRequest(user, sent_count[user], at, prompt, max(1, sc.output(draws)), prefill_left=prompt)
        sent_count[user] += 1
        requests[req.request_id] = req
        server.waiting.append(req)

    follow = sc.request_timeout_s if cap is None else min(cap, sc.request_timeout_s)
    open_in_window: list[TruthRequest] = []
    while True:
        if now >= end and stop_at == math.inf:
            if not open_in_window:
                open_in_window = [r for r in requests.values() if start <= r.sent <= end and r.end is None]
            open_in_window = [r for r in open_in_window if r.end is None]
            if not open_in_window or now >= end + follow:
                stop_at = now
                settle_until = now + sc.settle_s if not open_in_window else now
        if now >= settle_until:
            break
        while pending and pending[0][0] <= now:
            at, user = pending.pop(0)
            if at < stop_at:
                send(user, at)
        server.admit(now)
        if not server.active:
            if not pending and not server.waiting:
                break
            nxt = min([p[0] for p in pending] + [r.sent for r in server.waiting if r.sent > now] + [now + 0.001])
            now = max(now, nxt)
            continue
        now, done = server.step(now)
        for r in done:
            pending.append((r.end + rng.random() * sc.jitter_s, r.user))  # type: ignore[operator]
        pending.sort()
    for r in server.active + server.waiting:
        r.cut = True
    return requests, server.steps, now


def _record(sc: Scenario, req: TruthRequest, window: StepWindow, cut_at: float) -> RequestRecord:
    tokens = req.tokens if not req.cut else [t for t in req.tokens if t <= cut_at]
    end = req.end if not req.cut else cut_at
    ttft = tokens[0] - req.sent if tokens else None
    gaps = tuple(b - a for a, b in itertools.pairwise(tokens))
    assert end is not None
    sent_in = window.start <= req.sent <= window.end
    phase = "drain" if end > window.end else ("window" if req.sent >= window.start else "warmup")
    extra = {"censored": True} if req.cut and sent_in else {}
    return RequestRecord(
        run_id="scenario", lane=sc.lane, concurrency=sc.users, user=req.user, request_id=req.request_id,
        phase=phase, sent_at=req.sent, ttft_s=ttft, e2e_s=end - req.sent,  # type: ignore[arg-type]
        queue_s=None if req.admitted is None or not tokens else req.admitted - req.sent, itl_s=gaps,
        prompt_tokens=req.prompt, output_tokens=len(tokens),
        outcome="dropped" if req.cut else "ok", error="cancelled at drain" if req.cut else None,
        extra=extra)


def run(sc: Scenario, seed: int = 0) -> ScenarioResult:
    """One rung of ``sc``: the records satbench's load generator would write, its window, and the truth."""
    window = StepWindow(lane=sc.lane, concurrency=sc.users, start=sc.warmup_s, end=sc.warmup_s + sc.window_s,
                        slots=sc.engine.slots)
    measured, _, cut_at = _simulate(sc, seed, sc.drain_cap_s)
    full, steps, _ = _simulate(sc, seed, None)
    records = [_record(sc, r, window, cut_at) for r in measured.values()]
    return ScenarioResult(records, window, Truth(full, tuple(steps), window))
