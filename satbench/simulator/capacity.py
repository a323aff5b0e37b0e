"""The analytic capacity of a profile: closed-loop steady-state throughput at each concurrency.

Workload: ``c`` users, each sending a request of ``P`` prompt tokens and ``O`` output tokens (``ignore_eos``)
as soon as its previous one ends, all starting together. Let ``b = min(c, slots, floor(ctx_tokens / (P+O)))``
be how many run at once (slots, and the KV reservation of prompt plus ``n_predict``).

Closed form (when ``b * P <= batch``, i.e. all admitted prompts fit in one step): the engine then runs in
lock-step cycles. Each cycle is one prefill step with ``b*P`` prompt tokens (its end yields every first
token) followed by ``O - 1`` decode steps with ``b`` slots; all ``b`` requests end together and the next ``b``
waiting requests are admitted at once (with ``c > b`` the queue always holds at least ``b``). Hence

    cycle = step(0, b*P) + (O - 1) * step(b, 0)
    throughput = b * O / cycle        requests/s = b / cycle
    ttft = queue + step(0, b*P)       itl = step(b, 0)      queue = (c / b - 1) * cycle (Little's law)

Otherwise (chunked prefill splits prompts across steps and users fall out of lock-step) the figure comes
from running the pure engine in virtual time (``method = "virtual_time"``), which is exact for the model
by construction. Real clients add network and client time between requests and do not start exactly
together, so measured throughput lies a little below these figures (a few percent for short prompts).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from satbench.simulator.profile import Profile
from satbench.simulator.stepcost import step_seconds

__all__ = ["CapacityError", "CapacityPoint", "capacity_curve", "closed_loop_capacity"]


class CapacityError(ValueError):
    """A workload the profile cannot serve (prompt plus output larger than a slot's context)."""


@dataclass(frozen=True)
class CapacityPoint:
    concurrency: int
    running: int
    throughput_tok_s: float
    requests_per_s: float
    ttft_s: float
    itl_s: float
    e2e_s: float
    queue_s: float
    cycle_s: float
    method: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def closed_loop_capacity(
    profile: Profile, prompt_tokens: int, output_tokens: int, concurrency: int
) -> CapacityPoint:
    s, P, n_out, c = profile.server, prompt_tokens, output_tokens, concurrency
    if P <= 0 or n_out <= 0 or c <= 0:
        raise CapacityError("prompt_tokens, output_tokens and concurrency must be positive")
    if s.n_ctx_slot < P + n_out:
        raise CapacityError(f"prompt + output ({P + n_out}) exceeds a slot's context ({s.n_ctx_slot})")
    b = min(c, s.slots, s.ctx_tokens // (P + n_out))
    if b * P > s.batch:
        return _virtual_point(profile, P, n_out, c, b)
    t_prefill = step_seconds(profile.cost, 0, b * P, s.ubatch, s.time_scale)
    t_decode = step_seconds(profile.cost, b, 0, s.ubatch, s.time_scale)
    cycle = t_prefill + (n_out - 1) * t_decode
    queue = (c / b - 1.0) * cycle
    return CapacityPoint(
        concurrency=c,
        running=b,
        throughput_tok_s=b * n_out / cycle,
        requests_per_s=b / cycle,
        ttft_s=queue + t_prefill,
        itl_s=t_decode if n_out > 1 else 0.0,
        e2e_s=queue + cycle,
        queue_s=queue,
        cycle_s=cycle,
        method="closed_form",
    )


def _virtual_point(profile: Profile, P: int, n_out: int, c: int, b: int) -> CapacityPoint:
    from satbench.simulator.virtual import run_closed_loop

    res = run_closed_loop(profile, c, P, n_out, requests_per_user=max(4, 2 + 24 // c), warmup_requests=2 * c)
    done = [r for r in res.truth if r.first_token is not None and r.last_token is not None]
    tail = done[len(done) // 2 :] or done

    def mean(xs: list[float]) -> float:
        return sum(xs) / len(xs) if xs else 0.0

    queue = mean([(r.admitted or r.arrival) - r.arrival for r in tail])
    ttft = mean([r.first_token - r.arrival for r in tail if r.first_token is not None])
    e2e = mean([r.last_token - r.arrival for r in tail if r.last_token is not None])
    gaps = [(r.last_token or 0.0) - (r.first_token or 0.0) for r in tail if r.first_token is not None]
    itl = mean([g / (n_out - 1) for g in gaps]) if n_out > 1 else 0.0
    return CapacityPoint(
        concurrency=c,
        running=b,
        throughput_tok_s=res.throughput_tok_s,
        requests_per_s=res.requests_per_s,
        ttft_s=ttft,
        itl_s=itl,
        e2e_s=e2e,
        queue_s=queue,
        cycle_s=(b / res.requests_per_s) if res.requests_per_s else 0.0,
        method="virtual_time",
    )


def capacity_curve(
    profile: Profile, prompt_tokens: int, output_tokens: int, concurrencies: list[int]
) -> list[CapacityPoint]:
    return [closed_loop_capacity(profile, prompt_tokens, output_tokens, c) for c in concurrencies]
