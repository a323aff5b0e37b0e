"""A continuous-batching engine in virtual time whose truth is its construction: the accuracy datasheet's server.

Why its own engine, beside ``testkit.scenario`` (closed loop only, fixed admission variants) and the simulator
(``simulator.virtual``: the product's own engine, profiles fixed in files): the datasheet draws servers from a
declared space (1-64 slots, any step cost, chunked or whole prefill, step-time noise) and feeds them open-loop
arrivals, closed-loop users and recorded traces, for hundreds of draws, so the engine must be a few small
parameters and fast. It imports nothing of the product: what a request met is what the steps below did.

One step, as llama-server's ``update_slots``: waiting requests are admitted first come first served into free
slots; every slot whose prompt is done decodes one token; prompt tokens fill the step up to ``chunk`` (0: whole
prompts, however long: no chunking), a prompt that does not fit going on in the next step; a request whose
prompt ends in a step gets its first token at the step's end. The step lasts
``(step_s + per_decode_s * decoding + per_prefill_token_s * prompt tokens) * noise``, noise lognormal with
``noise`` as its sigma. A decoding request is held by others' prompt tokens for ``per_prefill_token_s * prompt
tokens * noise`` beyond its own step: the longest such hold is its pause excess, by construction.

``Served`` keeps per request what an objective needs (first token, end, tokens, the longest hold) and, where
asked (``keep_tokens``: the short measured runs), every token's time for the load generator's records.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

__all__ = ["EngineSpec", "Served", "serve_closed", "serve_open"]


@dataclass(frozen=True, slots=True)
class EngineSpec:
    slots: int
    step_s: float  # a: the fixed cost of a step
    per_decode_s: float  # b: per decoding slot
    per_prefill_token_s: float  # p: per prompt token the step carries
    chunk: int = 512  # prompt tokens one step may carry; 0: whole prompts (no chunking)
    noise: float = 0.0  # lognormal sigma of each step's duration

    def decode_step_s(self, decoding: int) -> float:
        """A step with ``decoding`` slots and no prompt token, noise aside."""
        return self.step_s + self.per_decode_s * decoding


@dataclass(slots=True)
class Served:
    """One request: meant to be sent at ``sent``; what the engine did with it."""

    sent: float
    prompt: int
    output: int
    user: int = 0
    admitted: float | None = None
    first: float | None = None
    end: float | None = None
    produced: int = 0
    hold_s: float = 0.0  # the longest prefill hold while it decoded (its pause excess)
    tokens: list[float] | None = None
    left: int = field(default=0, repr=False)

    @property
    def tpot_s(self) -> float | None:
        if self.first is None or self.end is None or self.produced < 2:
            return None
        return (self.end - self.first) / (self.produced - 1)


class _Server:
    def __init__(self, spec: EngineSpec, seed: str, keep_tokens: bool,
                 steps: list[tuple[float, float, int]] | None = None) -> None:
        self.spec = spec
        self.steps = steps
        self.rng = random.Random(f"engine:{seed}")
        self.keep = keep_tokens
        self.waiting: deque[Served] = deque()
        self.active: list[Served] = []

    def offer(self, req: Served) -> None:
        req.left = req.prompt
        if self.keep:
            req.tokens = []
        self.waiting.append(req)

    def step(self, now: float) -> tuple[float, list[Served]]:
        """Admits, runs one step from ``now``; its end and the requests that ended in it."""
        s = self.spec
        while self.waiting and len(self.active) < s.slots:
            req = self.waiting.popleft()
            req.admitted = now
            self.active.append(req)
        budget = s.chunk if s.chunk > 0 else math.inf
        decoding = [r for r in self.active if r.left == 0]
        prompt = 0
        first: list[Served] = []
        for r in self.active:
            if r.left > 0 and budget > 0:
                take = int(min(r.left, budget))
                r.left -= take
                budget -= take
                prompt += take
                if r.left == 0:
                    first.append(r)
        k = self.rng.lognormvariate(0.0, s.noise) if s.noise else 1.0
        hold = s.per_prefill_token_s * prompt * k
        end = now + (s.step_s + s.per_decode_s * len(decoding)) * k + hold
        if self.steps is not None and decoding:
            self.steps.append((end, end - now, len(decoding)))
        done = []
        for r in decoding:
            r.produced += 1
            if hold > r.hold_s:
                r.hold_s = hold
            if r.tokens is not None:
                r.tokens.append(end)
        for r in first:
            r.first = end
            r.produced = 1
            if r.tokens is not None:
                r.tokens.append(end)
        for r in decoding + first:
            if r.produced >= r.output:
                r.end = end
                done.append(r)
        if done:
            self.active = [r for r in self.active if r.end is None]
        return end, done


def serve_open(spec: EngineSpec, arrivals: Sequence[tuple[float, int, int]], *, seed: str = "0",
               keep_tokens: bool = False, users: Sequence[int] | None = None, until: float = math.inf
               ) -> list[Served]:
    """Open loop: each ``(at, prompt, output)`` is sent at ``at`` whatever the engine does; every request is
    followed to its end (or ``until`` of virtual time)."""
    order = sorted(range(len(arrivals)), key=lambda i: arrivals[i][0])
    reqs = [Served(at, p, o, 0 if users is None else users[i]) for i, (at, p, o) in enumerate(arrivals)]
    server = _Server(spec, seed, keep_tokens)
    now, i = 0.0, 0
    while now < until:
        while i < len(order) and reqs[order[i]].sent <= now:
            server.offer(reqs[order[i]])
            i += 1
        if not server.active and not server.waiting:
            if i >= len(order):
                break
            now = reqs[order[i]].sent
            continue
        now, _ = server.step(now)
    return reqs


def serve_closed(spec: EngineSpec, users: int, until: float, draw: Callable[[int, random.Random], tuple[int, int]],
                 *, seed: str = "0", keep_tokens: bool = False, think_s: float = 0.0,
                 follow_after: float | None = None, steps: list[tuple[float, float, int]] | None = None
                 ) -> list[Served]:
    """Closed loop: ``users`` users, each sending its next request (lengths ``draw(user, rng)``) ``think_s`` after
    its previous one ended, until ``until``; with ``follow_after``, the run stops once every request sent before
    it has ended (the users sending on meanwhile: a load generator's drain), ``until`` still its bound. ``steps``
    collects each step with a decode as (end, duration, decoding slots): every decoding request's gap."""
    rng = random.Random(f"users:{seed}")
    server = _Server(spec, seed, keep_tokens, steps)
    sends = [(rng.random() * 0.005, u) for u in range(users)]
    heapq.heapify(sends)
    out: list[Served] = []
    follow = math.inf if follow_after is None else follow_after
    open_before = 0  # requests sent before ``follow_after`` not ended yet
    now = 0.0
    while now < until and not (now >= follow and open_before == 0):
        while sends and sends[0][0] <= now:
            at, u = heapq.heappop(sends)
            prompt, output = draw(u, rng)
            req = Served(at, prompt, output, u)
            out.append(req)
            server.offer(req)
            open_before += at <= follow
        if not server.active and not server.waiting:
            now = sends[0][0]
            continue
        now, done = server.step(now)
        for r in done:
            open_before -= r.sent <= follow
            heapq.heappush(sends, (now + think_s + rng.random() * 0.0003, r.user))
    return out
