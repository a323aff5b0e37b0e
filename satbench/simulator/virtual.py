"""Closed-loop workloads run against the pure engine in virtual time (no sleeping, no sockets).

``run_closed_loop`` plays ``concurrency`` users that each send their next request the moment the previous
one ends (zero think time), all starting at t = 0 unless ``offsets_s`` spreads them. It is what the capacity
check and the engine tests use; it also serves as the exact fallback of ``simulator.capacity`` where the
closed form does not apply.

Measurement: the window opens when ``warmup_requests`` requests have finished and closes when the first user
has sent all its requests (before the drain, where fewer users remain); throughput is the tokens emitted
inside ``(open, close]`` over its length. When users run in lock-step the window spans whole cycles, so the
figure is exact.
"""

from __future__ import annotations

from dataclasses import dataclass

from satbench.simulator.engine import Emission, Engine, RequestSpec, TruthRecord
from satbench.simulator.profile import Profile

__all__ = ["ClosedLoopResult", "run_closed_loop", "run_requests"]


@dataclass(frozen=True)
class ClosedLoopResult:
    concurrency: int
    window_s: float
    window_tokens: int
    throughput_tok_s: float
    requests_per_s: float
    truth: tuple[TruthRecord, ...]
    emissions: tuple[tuple[float, str, int], ...]  # (time, request_id, n_out)


def run_closed_loop(
    profile: Profile,
    concurrency: int,
    prompt_tokens: int,
    output_tokens: int,
    requests_per_user: int = 6,
    warmup_requests: int | None = None,
    offsets_s: tuple[float, ...] = (),
) -> ClosedLoopResult:
    if concurrency <= 0 or requests_per_user <= 1:
        raise ValueError("need concurrency >= 1 and requests_per_user >= 2")
    engine = Engine(profile)
    warm = concurrency if warmup_requests is None else warmup_requests
    sent = dict.fromkeys(range(concurrency), 0)
    owner: dict[str, int] = {}
    pending: list[tuple[float, int]] = sorted(
        ((offsets_s[u] if u < len(offsets_s) else 0.0), u) for u in range(concurrency)
    )

    def send(user: int, at: float) -> None:
        rid = f"u{user}-r{sent[user]}"
        sent[user] += 1
        owner[rid] = user
        spec = RequestSpec(rid, prompt_tokens, output_tokens, ignore_eos=True, user=f"user-{user}")
        engine.submit(spec, at)

    now = 0.0
    finished = 0
    window_open: float | None = None
    window_close: float | None = None
    emissions: list[tuple[float, str, int]] = []
    while True:
        while pending and pending[0][0] <= now:
            at, user = pending.pop(0)
            send(user, at)
        plan = engine.begin_step(now)
        if plan is None:
            if not pending:
                break
            now = pending[0][0]
            continue
        result = engine.finish_step()
        now = result.end
        for e in result.emissions:
            emissions.append((now, e.request.spec.request_id, e.n_out))
            if e.finished:
                finished += 1
                if finished == warm and window_open is None:
                    window_open = now
                if not _resubmit(e, owner, sent, requests_per_user, pending, now) and window_close is None:
                    window_close = now
    close = window_close if window_close is not None else emissions[-1][0]
    start = window_open if window_open is not None else 0.0
    tokens = sum(1 for t, _, n in emissions if start < t <= close and n > 0)
    done = sum(1 for r in engine.truth if r.last_token is not None and start < r.last_token <= close)
    span = close - start
    return ClosedLoopResult(
        concurrency=concurrency,
        window_s=span,
        window_tokens=tokens,
        throughput_tok_s=tokens / span if span > 0 else 0.0,
        requests_per_s=done / span if span > 0 else 0.0,
        truth=tuple(engine.truth),
        emissions=tuple(emissions),
    )


def _resubmit(
    e: Emission,
    owner: dict[str, int],
    sent: dict[int, int],
    requests_per_user: int,
    pending: list[tuple[float, int]],
    now: float,
) -> bool:
    user = owner[e.request.spec.request_id]
    if sent[user] >= requests_per_user:
        return False
    pending.append((now, user))
    pending.sort()
    return True


def run_requests(
    profile: Profile, arrivals: list[tuple[float, RequestSpec]]
) -> tuple[Engine, list[tuple[float, str, int]]]:
    """Open loop: submits each spec at its time and steps until all are done; returns engine, emissions."""
    engine = Engine(profile)
    emissions: list[tuple[float, str, int]] = []
    queue = sorted(arrivals, key=lambda a: a[0])
    now = 0.0
    i = 0
    while True:
        while i < len(queue) and queue[i][0] <= now:
            engine.submit(queue[i][1], queue[i][0])
            i += 1
        if engine.begin_step(now) is None:
            if i >= len(queue):
                return engine, emissions
            now = queue[i][0]
            continue
        result = engine.finish_step()
        now = result.end
        emissions.extend((now, e.request.spec.request_id, e.n_out) for e in result.emissions)
