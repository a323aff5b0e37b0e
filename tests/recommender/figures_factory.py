"""Synthetic per-step figures for the recommender's unit tests: a healthy step, then what a case changes."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from satbench.core.figures import MemoryFigures, Quantiles, StepFigures, Tail

__all__ = ["held", "ladder", "step"]


def held(k: int, n: int = 100, excess: float = 0.5, rest: float = 0.005) -> dict[str, Any]:
    """Figures of a rung where ``k`` of ``n`` requests were held ``excess`` seconds beyond their decode step by
    another request's prefill, the rest ``rest`` seconds."""
    values = [excess] * k + [rest] * (n - k)
    ordered = sorted(values)
    p99 = ordered[min(n - 1, round(0.99 * (n - 1)))]
    return {"pause_excess_tail": Tail.of(values), "pause_excess_s": Quantiles(rest, ordered[round(0.95 * (n - 1))],
                                                                             p99)}


def step(c: int, throughput: float, **changes: Any) -> StepFigures:
    """A healthy, valid step at concurrency ``c`` with ``throughput`` tok/s on a 4-slot lane; ``changes``
    override fields."""
    base = StepFigures(
        lane="dense", concurrency=c, window_s=30.0, requests=100, errors=0,
        throughput_tok_s=throughput, requests_per_s=throughput / 64,
        latency_s=Quantiles(0.8, 1.0, 1.1), ttft_s=Quantiles(0.05, 0.08, 0.09),
        itl_s=Quantiles(0.010, 0.012, 0.013), queue_s=Quantiles(0.0, 0.0, 0.0),
        memory_bytes=MemoryFigures(gpu_max=4e9, gpu_total=8e9, host_rss_max=1e9),
        jain=0.99, max_min_share=1.1, decode_stall_max_ratio=1.5, prefill_wait_max_s=0.1,
        pause_s=Quantiles(0.015, 0.02, 0.03), pause_requests=100, prefill_events=50, interference_share=0.05,
        stall_per_prompt_s=0.005, user_wait_p_value=0.5, user_wait_ratio=1.1,
        decode_step_s=0.010, decode_step_gaps=500, **held(0),
        queued_requests=None if c <= 4 else 60, admission_wait_max_s=None if c <= 4 else 1.0,
        admission_wait_bound_s=None if c <= 4 else 1.2, admission_overruns=None if c <= 4 else 0,
        admission_overrun_max_ratio=None if c <= 4 else 0.8, users_unserved=0, users_starved=None if c <= 4 else 0,
        ttft_tail=Tail.of([0.05] * 95 + [0.09] * 5), latency_tail=Tail.of([0.8] * 95 + [1.1] * 5),
    )
    # a case that sets a quantile without its tail is judged by the quantile (as a source without tails is)
    tails = {"ttft_s": "ttft_tail", "latency_s": "latency_tail"}
    cleared = {tail: Tail() for name, tail in tails.items() if name in changes and tail not in changes}
    return replace(base, **{**cleared, **changes})


def ladder(curve: dict[int, float], **per_rung: dict[str, Any]) -> list[StepFigures]:
    """Steps of a curve {c: tok/s}; ``per_rung={"c8": {...}}`` changes one rung."""
    return [step(c, t, **per_rung.get(f"c{c}", {})) for c, t in curve.items()]
