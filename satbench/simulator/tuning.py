"""The analytic truth of lane tuning: what the engine does, in virtual time, for one candidate's settings.

``satbench tune`` measures each candidate (slots, batch, ubatch, context) over real HTTP; this module says
what the measurement should find, by running the pure engine (:mod:`simulator.engine`) with no clock and no
socket. For a profile and a candidate (``candidate_profile``) and a tune workload (``TuneWorkload``) it plays
``c`` closed-loop users (each sends its next request the moment the previous one ends) and reports, per
concurrency (``truth_point``): throughput, TTFT and ITL quantiles, and the decode-starvation figure the
recommender judges, the p99 over requests of each request's longest gap between two consecutive token
emissions, with the counts the verdict needs (``pause_requests``, ``prefill_events``).

Why not ``simulator.virtual.run_closed_loop``: it sends one fixed prompt, so every user prefills in
lock-step and a long prompt is all or nothing. The starvation workload is mixed: one request in
``probe_every`` is a long prompt of ``probe_tokens`` instead of ``prompt_tokens`` (the load generator's
prefill probe at share ``1 / probe_every``). The truth does not draw: request ``k`` of user ``u`` is a probe
when ``(k + u) % probe_every == 0``, so the share is exact in every window and the probes of different users
are spread over time (a seeded draw would move the throughput by the binomial noise of the probe count, ten
percent over a hundred requests). Output lengths vary the same way, over ``output_tokens +- output_spread``
(request ``k`` of user ``u`` gets offset ``(5k + 3u) mod (2 * spread + 1) - spread``): with one fixed length
every user would finish and re-enter prefill at the same step, so no prefill would ever run beside a decode,
an artefact no real traffic has (the load generator draws its lengths for the same reason). The loop here is
the same closed loop with those choices.

Measurement window: it opens when ``2 * c`` requests have finished (the start-up transient, when every user
prefills at once, is over) and closes when the first user has sent all its requests (before the drain, when
fewer users remain). Throughput counts tokens emitted inside it; the latency figures are over the requests
that finished inside it. Everything is exact for the model: the same inputs give the same numbers.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass
from typing import Any

from satbench.core.statistics import quantile
from satbench.simulator.engine import Engine, RequestSpec, TruthRecord
from satbench.simulator.profile import Profile

__all__ = ["TruthPoint", "TuneWorkload", "candidate_profile", "truth_point"]


@dataclass(frozen=True, slots=True)
class TuneWorkload:
    """What every user sends: ``prompt_tokens`` and ``output_tokens``, a share of long prompts."""

    prompt_tokens: int
    output_tokens: int
    probe_tokens: int = 0
    probe_every: int = 0  # 0: no probe
    output_spread: int = 0
    requests_per_user: int = 0  # 0: enough for a steady window (about 120 requests over all users)

    def prompt_of(self, user: int, index: int) -> int:
        if self.probe_every > 0 and self.probe_tokens > 0 and (index + user) % self.probe_every == 0:
            return self.probe_tokens
        return self.prompt_tokens

    def output_of(self, user: int, index: int) -> int:
        spread = self.output_spread
        if spread <= 0:
            return self.output_tokens
        return max(1, self.output_tokens + (5 * index + 3 * user) % (2 * spread + 1) - spread)

    def per_user(self, concurrency: int) -> int:
        if self.requests_per_user:
            return self.requests_per_user
        every = max(self.probe_every, 1)
        return every * -(-max(12, 120 // concurrency) // every)  # whole probe cycles


@dataclass(frozen=True, slots=True)
class TruthPoint:
    concurrency: int
    throughput_tok_s: float
    requests_per_s: float
    requests: int
    ttft_p50_s: float
    ttft_p95_s: float
    itl_p50_s: float
    itl_p95_s: float
    e2e_p95_s: float
    pause_p99_s: float | None
    pause_requests: int
    prefill_events: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def candidate_profile(profile: Profile, *, slots: int, batch: int, ubatch: int,
                      ctx_per_slot: int | None = None) -> Profile:
    """``profile`` served as the candidate: ``--slots``, ``-b``, ``-ub`` and ``-c slots * ctx_per_slot`` (each
    slot's context ``ctx_per_slot``, as ``satbench sim -c`` gives it), or the profile's context when None."""
    server: dict[str, Any] = {"slots": slots, "batch": batch, "ubatch": min(ubatch, batch)}
    if ctx_per_slot is not None:
        server.update(ctx_tokens=ctx_per_slot * slots, slot_ctx_tokens=ctx_per_slot if slots > 1 else 0)
    return profile.with_overrides(**server)


def _closed_loop(profile: Profile, workload: TuneWorkload, c: int
                 ) -> tuple[list[TruthRecord], list[tuple[float, str, int]], float, float]:
    engine = Engine(profile)
    per_user = workload.per_user(c)
    sent = [0] * c
    owner: dict[str, int] = {}
    pending: list[tuple[float, int]] = [(0.0, u) for u in range(c)]
    emissions: list[tuple[float, str, int]] = []
    finished, now = 0, 0.0
    opened: float | None = None
    closed: float | None = None
    while True:
        for at, user in pending:
            rid = f"u{user}-r{sent[user]}"
            sent[user] += 1
            owner[rid] = user
            k = sent[user] - 1
            engine.submit(RequestSpec(rid, workload.prompt_of(user, k), workload.output_of(user, k),
                                      ignore_eos=True, user=f"user-{user}"), at)
        pending = []
        if engine.begin_step(now) is None:
            break
        result = engine.finish_step()
        now = result.end
        for e in result.emissions:
            emissions.append((now, e.request.spec.request_id, e.n_out))
            if not e.finished:
                continue
            finished += 1
            if finished == 2 * c and opened is None:
                opened = now
            user = owner[e.request.spec.request_id]
            if sent[user] < per_user:
                pending.append((now, user))
            elif closed is None:
                closed = now
    start = opened if opened is not None else 0.0
    end = closed if closed is not None else now
    return list(engine.truth), emissions, start, end


def _prefills_beside_decodes(truth: list[TruthRecord], done: list[TruthRecord]) -> int:
    """Requests of ``done`` whose prefill (admission to first token) overlapped another request's decoding."""
    decoding = [(r.request_id, r.first_token, r.last_token) for r in truth
                if r.first_token is not None and r.last_token is not None]
    count = 0
    for r in done:
        start, end = r.admitted if r.admitted is not None else r.arrival, r.first_token
        if end is not None and any(rid != r.request_id and a < end and b > start for rid, a, b in decoding):
            count += 1
    return count


def _q(values: list[float], q: float) -> float:
    return quantile(sorted(values), q) or 0.0


def truth_point(profile: Profile, workload: TuneWorkload, concurrency: int) -> TruthPoint:
    """The engine's figures for ``concurrency`` closed-loop users of ``workload`` (module docstring)."""
    if concurrency < 1:
        raise ValueError("concurrency must be >= 1")
    truth, emissions, start, end = _closed_loop(profile, workload, concurrency)
    span = end - start
    tokens = sum(1 for t, _, n in emissions if start < t <= end and n > 0)
    done = [r for r in truth if r.first_token is not None and r.last_token is not None
            and start < r.last_token <= end]
    ids = {r.request_id for r in done}
    times: dict[str, list[float]] = {}
    for t, rid, n in emissions:
        if rid in ids and n > 0:
            times.setdefault(rid, []).append(t)
    gaps: list[float] = []
    pauses: list[float] = []
    for stamps in times.values():
        own = [b - a for a, b in itertools.pairwise(stamps)]
        gaps += own
        if own:
            pauses.append(max(own))
    events = _prefills_beside_decodes(truth, done)
    ttft = [r.first_token - r.arrival for r in done if r.first_token is not None]
    e2e = [r.last_token - r.arrival for r in done if r.last_token is not None]
    return TruthPoint(
        concurrency=concurrency,
        throughput_tok_s=tokens / span if span > 0 else 0.0,
        requests_per_s=len(done) / span if span > 0 else 0.0,
        requests=len(done),
        ttft_p50_s=_q(ttft, 0.5),
        ttft_p95_s=_q(ttft, 0.95),
        itl_p50_s=_q(gaps, 0.5),
        itl_p95_s=_q(gaps, 0.95),
        e2e_p95_s=_q(e2e, 0.95),
        pause_p99_s=_q(pauses, 0.99) if pauses else None,
        pause_requests=len(pauses),
        prefill_events=events,
    )
