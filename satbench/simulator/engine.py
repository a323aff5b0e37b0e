"""The continuous-batching engine: slots, a wait queue, chunked prompt processing and decode steps.

Pure and clock-free: every call takes the current model time ``now`` (seconds on any monotonic scale), so
the same object runs in virtual time (tests, the capacity check) and under the real-time driver.

One step mirrors one iteration of llama-server's ``update_slots``:

1. admission: while a slot is free, pick a waiting request (``fifo``: oldest first; ``unfair``: lowest user
   number first, newest first within a user, so high-numbered users can starve) and give it the lowest free
   slot, provided the KV cache can hold its prompt plus its ``n_predict`` (otherwise it keeps waiting);
2. the batch: one token per slot that is generating, then prompt tokens of slots in prefill (slot order)
   until ``batch`` tokens; a prompt longer than what is left continues in the next step, so a long prompt
   with a large ``batch`` stalls every generating slot for its whole prefill, and a small ``batch`` splits it
   (chunked prefill);
3. the step lasts ``stepcost.step_seconds``; when it ends every generating slot has one more token, a slot
   whose prompt finished has its first token, and slots that reached their length are released.

``begin_step(now)`` plans a step and returns its end time; ``finish_step()`` applies it. Requests that arrive
or are cancelled in between take effect at the next step, as on the real server.

Prompt cache (as llama-server's ``cache_prompt``, on by default): a request that carries its prompt's token
ids (``RequestSpec.prompt_ids``) reuses the longest common prefix of what its slot already holds (the
previous prompt and its generated tokens), up to all but the last prompt token, which is always evaluated.
The cached tokens cost no prefill, and they are reported apart (``Request.cache_n``, the counters'
``prompt_tokens_cached_total``); ``prompt_tokens_total`` counts only the evaluated ones. Among free slots,
the one whose cache covers the largest share of the prompt (above 10 %, llama-server's
``--slot-prompt-similarity``) is chosen, otherwise the lowest free one. Requests without token ids (the
virtual-time workloads, the capacity model) neither use nor leave a cache, so their timing is unchanged.
With ``[server] cache_ram_tokens`` (llama-server's ``--cache-ram``, host-memory prompt caching; 0, off, by
default here) a prompt a slot gives up is kept in host memory up to that many tokens, and an admitted request
starts from the longest prefix its slot or any kept prompt shares (the restore's copy costs nothing here).
"""

from __future__ import annotations

import random
import re
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from satbench.simulator.engine_types import (
    ContextLimitError,
    Emission,
    EngineCounters,
    Request,
    RequestSpec,
    StepPlan,
    StepResult,
    TruthRecord,
)
from satbench.simulator.power import PowerMeter
from satbench.simulator.profile import Profile
from satbench.simulator.stepcost import step_seconds
from satbench.simulator.tokens import token_at

__all__ = [
    "ContextLimitError",
    "Emission",
    "Engine",
    "EngineCounters",
    "Request",
    "RequestSpec",
    "StepPlan",
    "StepResult",
    "TruthRecord",
]

_USER_NUMBER = re.compile(r"(\d+)\s*$")


def _unscaled(now: float) -> float:
    return 1.0


SLOT_PROMPT_SIMILARITY = 0.1  # llama-server's --slot-prompt-similarity default


@dataclass
class Engine:
    profile: Profile
    counters: EngineCounters = field(default_factory=EngineCounters)

    def __post_init__(self) -> None:
        s = self.profile.server
        self.slots: list[Request | None] = [None] * s.slots
        self.waiting: list[Request] = []
        self.truth: deque[TruthRecord] = deque(maxlen=s.truth_history)
        self._rng = random.Random(s.seed)
        self._seq = 0
        self._reserved = 0
        self._plan: StepPlan | None = None
        # per slot: what its KV cache holds (prompt ids, the text key and count of generated tokens)
        self.slot_cache: list[tuple[tuple[int, ...], int, int] | None] = [None] * s.slots
        self.host_prompts: list[tuple[int, ...]] = []  # --cache-ram: prompts kept in host memory, oldest first
        self.step_scale: Callable[[float], float] = _unscaled  # the server's slowdown faults, at engine time
        self.power = PowerMeter(self.profile.power)  # the modelled GPUs' draw, step by step

    # -- requests -----------------------------------------------------------------------------------------

    def submit(self, spec: RequestSpec, now: float) -> Request:
        s = self.profile.server
        n_ctx = s.n_ctx_slot
        if spec.prompt_tokens <= 0:
            raise ContextLimitError("the prompt must have at least one token")
        if spec.prompt_tokens >= n_ctx:
            raise ContextLimitError(
                f"request ({spec.prompt_tokens} tokens) exceeds the available context size ({n_ctx} tokens),"
                " try increasing it",
                spec.prompt_tokens,
                n_ctx,
            )
        if not -1 <= spec.id_slot < s.slots:
            raise ValueError(f"id_slot must be -1 or a slot number below {s.slots}")
        room = n_ctx - spec.prompt_tokens
        if s.context_shift and spec.max_tokens >= 0:
            n_predict, limited = spec.max_tokens, False  # the context shifts instead of filling up
        else:
            n_predict = room if spec.max_tokens < 0 else min(spec.max_tokens, room)
            limited = spec.max_tokens < 0 or spec.max_tokens > room
        target = n_predict
        if not spec.ignore_eos:
            if spec.stop_at is not None:
                target = min(n_predict, spec.stop_at)
            else:
                lo, hi = self.profile.eos_tokens
                target = min(n_predict, self._rng.randint(lo, hi))
        self._seq += 1
        req = Request(self._seq, spec, n_predict, target, now)
        req.ctx_limited = limited
        self.waiting.append(req)
        self.counters.requests_total += 1
        return req

    def _need(self, r: Request) -> int:
        return min(r.spec.prompt_tokens + r.n_predict, self.profile.server.n_ctx_slot)

    def cancel(self, req: Request, now: float) -> None:
        """The client went away: a waiting request leaves the queue, a running one frees its slot."""
        if req.state == "waiting":
            self.waiting.remove(req)
            self._finish(req, "cancelled", now)
        elif req.state in ("prefill", "decode"):
            self._release(req, "cancelled", now)

    # -- stepping -----------------------------------------------------------------------------------------

    def has_work(self) -> bool:
        return bool(self.waiting) or any(r is not None for r in self.slots)

    def begin_step(self, now: float) -> StepPlan | None:
        """Admits waiting requests, forms the batch and returns the planned step (None when idle)."""
        if self._plan is not None:
            raise RuntimeError("begin_step called twice without finish_step")
        self._admit(now)
        s = self.profile.server
        decoding = tuple(r for r in self.slots if r is not None and r.state == "decode")
        budget = max(s.batch - len(decoding), 0)
        prompting: list[tuple[Request, int]] = []
        for r in self.slots:
            if budget <= 0:
                break
            if r is not None and r.state == "prefill":
                take = min(r.spec.prompt_tokens - r.prompt_done, budget)
                prompting.append((r, take))
                budget -= take
        n_prompt = sum(n for _, n in prompting)
        if not decoding and not n_prompt:
            return None
        dt = step_seconds(self.profile.cost, len(decoding), n_prompt, s.ubatch, s.time_scale) * self.step_scale(now)
        self._plan = StepPlan(now, now + dt, len(decoding), n_prompt, decoding, tuple(prompting))
        self.power.begin(now, now + dt, len(decoding) + n_prompt)
        return self._plan

    def finish_step(self) -> StepResult:
        plan = self._plan
        if plan is None:
            raise RuntimeError("finish_step without begin_step")
        self._plan = None
        end, c = plan.end, self.counters
        c.n_decode_total += 1
        c.n_busy_slots_total += len(plan.decoding) + sum(
            1 for r in self.slots if r is not None and r.state == "prefill"
        )
        c.steps_prompt_tokens += plan.n_prompt
        c.steps_decode_tokens += plan.n_decode
        emissions: list[Emission] = []
        for r in plan.decoding:
            if r.state != "decode":
                continue
            r.output += 1
            r.last_token = end
            done = r.output >= r.target
            emissions.append(Emission(r, r.output, done, at=end))
            if done:
                self._release(r, "length" if r.output >= r.n_predict else "stop", end)
        for r, n in plan.prompting:
            if r.state != "prefill":
                continue
            if r.prompt_start is None:
                r.prompt_start = plan.start
                if r.spec.progress:  # the first report: nothing evaluated yet, the cache already counted
                    emissions.append(Emission(r, 0, False, progress=r.prompt_done, at=plan.start))
            r.prompt_done += n
            if r.spec.progress:
                emissions.append(Emission(r, 0, False, progress=r.prompt_done, at=end))
            if r.prompt_done < r.spec.prompt_tokens:
                continue
            r.prompt_end = end
            c.prompt_tokens_total += r.prompt_n
            c.prompt_tokens_cached_total += r.cache_n
            c.prompt_seconds_total += r.prompt_ms / 1000.0
            c.bucket_prompt_tokens += r.prompt_n
            c.bucket_prompt_ms += r.prompt_ms
            if r.target <= 0:
                emissions.append(Emission(r, 0, True, at=end))
                self._release(r, "length", end)
                continue
            r.state, r.output, r.first_token, r.last_token = "decode", 1, end, end
            done = r.target <= 1
            emissions.append(Emission(r, 1, done, at=end))
            if done:
                self._release(r, "length" if r.output >= r.n_predict else "stop", end)
        return StepResult(plan.start, end, plan.n_decode, plan.n_prompt, tuple(emissions))

    # -- views --------------------------------------------------------------------------------------------

    @property
    def busy_slots(self) -> int:
        return sum(1 for r in self.slots if r is not None)

    @property
    def kv_used_tokens(self) -> int:
        return sum(r.kv_tokens for r in self.slots if r is not None)

    @property
    def kv_reserved_tokens(self) -> int:
        return self._reserved

    def truth_since(self, t: float) -> Iterator[TruthRecord]:
        """Finished requests whose last event is at or after model time ``t``, oldest first."""
        for rec in self.truth:
            last = rec.last_token if rec.last_token is not None else rec.admitted or rec.arrival
            if last >= t:
                yield rec

    # -- internals ----------------------------------------------------------------------------------------

    def _pick(self, now: float) -> int | None:
        """Index of the waiting request to admit next, among those that arrived by ``now``."""
        if self.profile.server.admission == "fifo":
            return 0 if self.waiting[0].arrival <= now else None

        def key(i: int) -> tuple[int, int]:
            r = self.waiting[i]
            m = _USER_NUMBER.search(r.spec.user or "")
            return (int(m.group(1)) if m else 1 << 62, -r.seq)

        ready = [i for i, r in enumerate(self.waiting) if r.arrival <= now]
        return min(ready, key=key) if ready else None

    def _admit(self, now: float) -> None:
        capacity = self.profile.server.ctx_tokens
        while self.waiting and None in self.slots:
            i = self._pick(now)
            if i is None:
                return
            r = self.waiting[i]
            need = self._need(r)
            if self._reserved + need > capacity:
                return
            slot = self._choose_slot(r)
            if slot is None:
                return  # pinned to a busy slot: it waits, and so does everything behind it (FIFO)
            del self.waiting[i]
            self.slots[slot] = r
            self._reserved += need
            r.slot, r.admitted, r.state = slot, now, "prefill"
            ids = r.spec.prompt_ids
            if ids is not None and r.spec.cache_prompt:
                r.cache_n = min(self._host_restore(slot, ids), r.spec.prompt_tokens - 1)
                r.prompt_done = r.cache_n

    def _host_restore(self, slot: int, ids: tuple[int, ...]) -> int:
        """The prefix of ``ids`` the slot starts from: its own cache's, or with ``cache_ram_tokens`` the longest
        a prompt kept in host memory shares (restored into the slot). The slot's own prompt is kept there first
        where the new one does not extend it (it is about to be overwritten); the oldest go past the bound."""
        n = self._cached_prefix(slot, ids)
        bound = self.profile.server.cache_ram_tokens
        held = self.slot_cache[slot]
        if not bound:
            return n
        if held is not None and held[0] is not None and n < len(held[0]) and held[0] not in self.host_prompts:
            self.host_prompts.append(held[0])
            while sum(len(p) for p in self.host_prompts) > bound and len(self.host_prompts) > 1:
                self.host_prompts.pop(0)
        best = max((_common_prefix(p, ids) for p in self.host_prompts), default=0)
        return max(n, best)

    def _choose_slot(self, r: Request) -> int | None:
        if r.spec.id_slot >= 0:
            return r.spec.id_slot if self.slots[r.spec.id_slot] is None else None
        free = [i for i, x in enumerate(self.slots) if x is None]
        ids = r.spec.prompt_ids
        if ids is None or not r.spec.cache_prompt or len(free) == 1:
            return free[0]
        best, best_sim = free[0], SLOT_PROMPT_SIMILARITY
        for i in free:
            if self.slot_cache[i] is None:
                continue
            sim = self._cached_prefix(i, ids) / len(ids)
            if sim > best_sim:
                best, best_sim = i, sim
        return best

    def _cached_prefix(self, slot: int, ids: tuple[int, ...]) -> int:
        """How many leading tokens of ``ids`` the slot's KV cache already holds."""
        held = self.slot_cache[slot]
        if held is None:
            return 0
        prompt, key, n_gen = held
        n = _common_prefix(prompt, ids)
        if n == len(prompt) and len(ids) > n and n_gen:
            gen = tuple(token_at(key, j)[0] for j in range(min(n_gen, len(ids) - n)))
            n += _common_prefix(gen, ids[n:])
        return n

    def _release(self, r: Request, reason: str, now: float) -> None:
        if r.slot is not None and self.slots[r.slot] is r:
            self.slots[r.slot] = None
            self._reserved -= self._need(r)
            ids = r.spec.prompt_ids
            held = ids[: r.prompt_done] if ids is not None else None
            full = held is not None and r.prompt_done >= len(held) and len(held) == len(ids or ())
            self.slot_cache[r.slot] = (held, r.text_key, r.output if full else 0) if held is not None else None
        c = self.counters
        c.tokens_predicted_total += r.output
        c.tokens_predicted_seconds_total += r.predicted_ms / 1000.0
        c.bucket_predicted_tokens += r.output
        c.bucket_predicted_ms += r.predicted_ms
        c.n_tokens_max = max(c.n_tokens_max, r.kv_tokens)
        self._finish(r, reason, now)

    def _finish(self, r: Request, reason: str, now: float) -> None:
        r.state, r.finish_reason = ("cancelled" if reason == "cancelled" else "done"), reason
        self.truth.append(
            TruthRecord(
                request_id=r.spec.request_id,
                user=r.spec.user,
                slot=r.slot,
                prompt_tokens=r.spec.prompt_tokens,
                output_tokens=r.output,
                arrival=r.arrival,
                admitted=r.admitted,
                first_token=r.first_token,
                last_token=r.last_token,
                finish_reason=reason,
            )
        )


def _common_prefix(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    """Length of the longest common prefix (binary search over C-speed slice comparisons)."""
    lo, hi = 0, min(len(a), len(b))
    if a[:hi] == b[:hi]:
        return hi
    while lo < hi:  # invariant: a[:lo] == b[:lo] and a[:hi+1] != b[:hi+1] where hi is the bound
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo
