"""A synthetic closed-loop lane, written as the load generator would: records, step windows, manifest.

The lane is a model of a slot-batched server: ``slots`` requests decode together; a batch of ``b`` makes each
inter-token gap ``itl_s * (1 + itl_growth * (b - 1))``; a request that finds every slot busy waits for the
first one to free, first in first out (the requests of a rung are admitted in the order they were sent, each
into the slot that frees first, so who was admitted when is a real schedule, ``(c / slots - 1)`` service
times on average at concurrency ``c`` above ``slots``). Throughput therefore grows with ``c`` up to ``slots``
and stays flat after: the analytic answer is known in advance (``expected_throughput``, without the two
faults below). Seeded lognormal jitter makes quantiles
non-trivial. ``starve_decode`` makes one gap per request as long as a prefill (a batcher that pauses
decodes during prefills); ``unfair_user0`` serves user 0 first, every other user's tokens three times
slower (an unfair admission order). ``cached_prompt_tokens`` (and ``draft_tokens``/``draft_accepted_tokens``)
are what every request reports its runtime reused, ``None`` (unreported) by default.

A lane's ``name`` is its lane key (``core.lanes``): a bare name, or ``node-001/dense`` for a lane on a node
(the manifest's entry then names its ``node`` and ``lane``, as a session's does). ``simulate_run`` walks
the lanes one after the other by default; ``parallel=True`` starts every lane at ``t0`` and walks their
ladders side by side, as a fleet's load generator does (each node is its own host), which keeps a run of
many lanes short.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from satbench.core.lanes import split_key
from satbench.core.manifest import RunManifest, StepWindow
from satbench.core.records import Phase, RequestRecord

__all__ = ["SyntheticLane", "simulate_run"]


@dataclass(frozen=True, slots=True)
class SyntheticLane:
    name: str
    slots: int
    prefill_s: float = 0.05
    itl_s: float = 0.01
    itl_growth: float = 0.05
    output_tokens: int = 24
    prompt_tokens: int = 64
    jitter: float = 0.08
    starve_decode: bool = False
    unfair_user0: bool = False
    cached_prompt_tokens: int | None = None
    draft_tokens: int | None = None
    draft_accepted_tokens: int | None = None

    def gap(self, c: int) -> float:
        b = min(c, self.slots)
        return self.itl_s * (1 + self.itl_growth * (b - 1))

    def service_s(self, c: int) -> float:
        return self.prefill_s + (self.output_tokens - 1) * self.gap(c)

    def queue_s(self, c: int) -> float:
        return max(0.0, c / self.slots - 1.0) * self.service_s(c)

    def expected_throughput(self, c: int) -> float:
        return c * self.output_tokens / (self.queue_s(c) + self.service_s(c))


def _request(lane: SyntheticLane, c: int, user: int, sent_at: float, queue: float, rng: random.Random,
             run_id: str, rid: int, window: tuple[float, float]) -> RequestRecord:
    def j() -> float:
        return math.exp(rng.gauss(0.0, lane.jitter))

    ttft = queue + lane.prefill_s * j()
    slowdown = 3.0 if lane.unfair_user0 and c > 1 and user != 0 else 1.0
    gaps = [lane.gap(c) * slowdown * j() for _ in range(lane.output_tokens - 1)]
    if lane.starve_decode and c > 1 and gaps:
        gaps[len(gaps) // 2] = lane.prefill_s * j()
    e2e = ttft + sum(gaps)
    phase: Phase = "warmup" if sent_at < window[0] else ("window" if sent_at <= window[1] else "drain")
    return RequestRecord(run_id=run_id, lane=lane.name, concurrency=c, user=user, request_id=f"r{rid}",
                         phase=phase, sent_at=sent_at, ttft_s=ttft, e2e_s=e2e, queue_s=queue,
                         itl_s=tuple(gaps), prompt_tokens=lane.prompt_tokens,
                         output_tokens=lane.output_tokens, outcome="ok", status=200,
                         cached_prompt_tokens=lane.cached_prompt_tokens, draft_tokens=lane.draft_tokens,
                         draft_accepted_tokens=lane.draft_accepted_tokens)


def simulate_run(lanes: Sequence[SyntheticLane], ladder: Sequence[int], *, t0: float, window_s: float,
                 warmup_s: float = 2.0, gap_s: float = 2.0, seed: int = 7,
                 run_id: str = "20261129T000000Z-beef", parallel: bool = False
                 ) -> tuple[RunManifest, list[RequestRecord]]:
    """Each lane walks ``ladder``: the lanes one after the other, or all from ``t0`` with ``parallel``;
    returns the manifest and every record."""
    rng = random.Random(seed)
    records: list[RequestRecord] = []
    steps: list[StepWindow] = []
    t = finished = t0
    rid = 0
    for lane in lanes:
        if parallel:
            t = t0
        for c in ladder:
            start = t + warmup_s
            end = start + window_s
            drain_end = t
            sends = [(t + user * lane.service_s(c) / c, user) for user in range(c)]
            heapq.heapify(sends)
            free = [t] * lane.slots  # when each slot frees: first in, first out into the first free
            while sends:
                sent, user = heapq.heappop(sends)
                admitted = max(sent, heapq.heappop(free))
                rec = _request(lane, c, user, sent, admitted - sent, rng, run_id, rid, (start, end))
                rid += 1
                records.append(rec)
                ended = rec.ended_at or sent
                heapq.heappush(free, ended)
                drain_end = max(drain_end, ended)
                if ended <= end:
                    heapq.heappush(sends, (ended, user))
            steps.append(StepWindow(lane=lane.name, concurrency=c, start=start, end=end, warmup_start=t,
                                    drain_end=drain_end, slots=lane.slots))
            t = drain_end + gap_s
        finished = max(finished, t)
    manifest = RunManifest(run_id=run_id, created_at=t0, steps=tuple(steps), finished_at=finished,
                           lanes={lane.name: _lane_entry(lane) for lane in lanes})
    return manifest, records


def _lane_entry(lane: SyntheticLane) -> dict[str, object]:
    node, name = split_key(lane.name)
    return {"slots": lane.slots} if node is None else {"node": node, "lane": name, "slots": lane.slots}
