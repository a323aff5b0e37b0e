"""The datasheet's declared space of conditions and its seeded sampler.

Every axis the answers are measured over is listed once, with its range, in ``Space`` (a frozen pydantic
model: the bench prints it, the document states it, a narrower space is one constructor call). ``sample(space,
seed, index)`` draws one ``Condition`` from its own ``random.Random`` (the draw's seed and index), so a draw is
reproduced alone, in any order, in any process.

The axes, and why each:

- the server: 1-64 slots (log-uniform); a step of ``a + b * decoding + p * prompt tokens``, ``a`` fast (4-15 ms)
  or slow (20-60 ms), ``b`` a share of ``a`` per decoding slot that is larger for a dense model (2-8 %) than for
  a MoE-like one (0.5-2 %: its step is bound by the experts' weights, not the batch); prefill 5,000-50,000
  tokens/s; chunked (256-2048 tokens a step) or whole prefill; step noise 0-30 % (lognormal sigma);
- the requests: lognormal prompt (median 64-1024 tokens) and output lengths (median 16-128), sigma 0.3-1.2,
  capped (a heavy tail: a few prompts ten times the median); heterogeneous users or requests, where drawn: a
  share (20-50 %) of them with prompts four times as long;
- the objectives: the TTFT objective 0.5-4 s, on a third of the draws a per-1k-prompt allowance (0.2-1.5 s),
  the TPOT objective 1.2-3 times a decode step at a drawn share of the slots;
- open-loop arrivals: Poisson or gamma with cv 0.5-4 (log-uniform);
- the trace: stationary, a burst anywhere in the window, ramping up or down, diurnal; 150-400 requests at a
  recorded rate of 0.15-1.5 times a guess of the server's capacity, so the truth lies on both sides of 1x.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict

from testkit.accuracy.engine import EngineSpec

__all__ = ["TRACE_SHAPES", "Condition", "Lengths", "Space", "TraceShape", "sample"]

TRACE_SHAPES = ("stationary", "burst", "ramp_up", "ramp_down", "diurnal")


class Space(BaseModel):
    """Each axis of the datasheet and its range (module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    slots: tuple[int, int] = (1, 64)
    fast_step_s: tuple[float, float] = (0.004, 0.015)
    slow_step_s: tuple[float, float] = (0.020, 0.060)
    slow_share: float = 0.4
    dense_per_slot: tuple[float, float] = (0.02, 0.08)  # b / a
    moe_per_slot: tuple[float, float] = (0.005, 0.02)
    moe_share: float = 0.4
    prefill_tok_s: tuple[float, float] = (5_000.0, 50_000.0)
    chunks: tuple[int, ...] = (0, 256, 512, 2048)  # 0: whole prefill
    noise: tuple[float, float] = (0.0, 0.3)
    prompt_median: tuple[float, float] = (64.0, 1024.0)
    output_median: tuple[float, float] = (16.0, 128.0)
    sigma: tuple[float, float] = (0.3, 1.2)
    prompt_cap: int = 8192
    output_cap: int = 1024
    hetero_share: float = 0.3  # share of draws with heterogeneous users
    long_users: tuple[float, float] = (0.2, 0.5)
    long_factor: float = 4.0
    ttft_s: tuple[float, float] = (0.5, 4.0)
    per_1k_share: float = 0.33
    per_1k_s: tuple[float, float] = (0.2, 1.5)
    tpot_over_step: tuple[float, float] = (1.2, 3.0)
    poisson_share: float = 0.3
    cv: tuple[float, float] = (0.5, 4.0)
    trace_requests: tuple[int, int] = (150, 400)
    trace_load: tuple[float, float] = (0.15, 1.5)  # recorded rate over a guess of the capacity


@dataclass(frozen=True, slots=True)
class Lengths:
    """A lognormal length, capped: ``median * exp(sigma * z)``."""

    median: float
    sigma: float
    cap: int

    def draw(self, rng: random.Random, scale: float = 1.0) -> int:
        return max(1, min(self.cap, round(self.median * scale * math.exp(self.sigma * rng.gauss(0.0, 1.0)))))

    def mean(self, scale: float = 1.0) -> float:
        """The uncapped mean, enough for a capacity guess."""
        return self.median * scale * math.exp(self.sigma ** 2 / 2)


@dataclass(frozen=True, slots=True)
class TraceShape:
    kind: str  # one of TRACE_SHAPES
    requests: int
    load: float  # recorded rate over the capacity guess
    burst_at: float = 0.0  # share of the window where the burst starts
    burst_len: float = 0.05  # share of the window the burst lasts
    burst_share: float = 0.2  # share of the requests in the burst
    phase: float = 0.0  # diurnal phase, radians


@dataclass(frozen=True, slots=True)
class Condition:
    """One draw: the server, the requests, the objectives, the arrivals and the trace."""

    seed: int
    index: int
    engine: EngineSpec
    model: str  # dense | moe
    speed: str  # fast | slow
    prompt: Lengths
    output: Lengths
    long_share: float  # share of users (closed) or requests (open) with long prompts; 0: homogeneous
    long_factor: float
    ttft_s: float
    ttft_per_1k_s: float
    tpot_s: float
    cv: float  # 1: Poisson
    trace: TraceShape

    @property
    def name(self) -> str:
        return f"{self.seed}:{self.index}"

    def lengths(self, rng: random.Random, long: bool) -> tuple[int, int]:
        return self.prompt.draw(rng, self.long_factor if long else 1.0), self.output.draw(rng)

    def capacity_guess_rps(self) -> float:
        """Requests/s with every slot decoding and prompts paid for: where the trace's load is placed."""
        e = self.engine
        prompt = self.prompt.mean(1 + self.long_share * (self.long_factor - 1))
        out = self.output.mean()
        per_request = out * e.decode_step_s(e.slots) / e.slots + prompt * e.per_prefill_token_s
        return 1.0 / per_request

    def summary(self) -> dict[str, object]:
        e = self.engine
        return {"slots": e.slots, "model": self.model, "speed": self.speed, "step_ms": round(e.step_s * 1e3, 2),
                "per_decode_ms": round(e.per_decode_s * 1e3, 3), "prefill_tok_s": round(1 / e.per_prefill_token_s),
                "chunk": e.chunk, "noise": round(e.noise, 3), "prompt_median": round(self.prompt.median),
                "output_median": round(self.output.median), "sigma": round(self.prompt.sigma, 2),
                "long_share": round(self.long_share, 2), "ttft_s": round(self.ttft_s, 3),
                "ttft_per_1k_s": round(self.ttft_per_1k_s, 3), "tpot_s": round(self.tpot_s, 4),
                "cv": round(self.cv, 3), "trace": self.trace.kind, "trace_requests": self.trace.requests,
                "trace_load": round(self.trace.load, 3), "burst_at": round(self.trace.burst_at, 3)}


def _log_uniform(rng: random.Random, low: float, high: float) -> float:
    return math.exp(rng.uniform(math.log(low), math.log(high)))


def sample(space: Space, seed: int, index: int) -> Condition:
    """The ``index``-th draw of the datasheet seeded ``seed`` (module docstring)."""
    rng = random.Random(f"accuracy:{seed}:{index}")
    slots = max(space.slots[0], min(space.slots[1], round(_log_uniform(rng, space.slots[0], space.slots[1] + 0.5))))
    slow = rng.random() < space.slow_share
    a = rng.uniform(*(space.slow_step_s if slow else space.fast_step_s))
    moe = rng.random() < space.moe_share
    b = a * rng.uniform(*(space.moe_per_slot if moe else space.dense_per_slot))
    p = 1.0 / _log_uniform(rng, *space.prefill_tok_s)
    engine = EngineSpec(slots, a, b, p, rng.choice(space.chunks), rng.uniform(*space.noise))
    sigma = rng.uniform(*space.sigma)
    prompt = Lengths(_log_uniform(rng, *space.prompt_median), sigma, space.prompt_cap)
    output = Lengths(_log_uniform(rng, *space.output_median), min(sigma, 1.0), space.output_cap)
    long_share = rng.uniform(*space.long_users) if rng.random() < space.hetero_share else 0.0
    ttft = _log_uniform(rng, *space.ttft_s)
    per_1k = rng.uniform(*space.per_1k_s) if rng.random() < space.per_1k_share else 0.0
    busy = max(1, round(slots * rng.uniform(0.3, 1.5)))
    tpot = engine.decode_step_s(busy) * rng.uniform(*space.tpot_over_step)
    cv = 1.0 if rng.random() < space.poisson_share else _log_uniform(rng, *space.cv)
    kind = rng.choice(TRACE_SHAPES)
    trace = TraceShape(kind, rng.randint(*space.trace_requests), _log_uniform(rng, *space.trace_load),
                       burst_at=rng.uniform(0.0, 0.92), burst_len=rng.uniform(0.02, 0.08),
                       burst_share=rng.uniform(0.1, 0.3), phase=rng.uniform(0.0, 2 * math.pi))
    return Condition(seed, index, engine, "moe" if moe else "dense", "slow" if slow else "fast", prompt, output,
                     long_share, space.long_factor, ttft, per_1k, tpot, cv, trace)
