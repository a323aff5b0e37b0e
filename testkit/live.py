"""One simulator lane walked by the load generator and judged by the recommender from its records, over real
HTTP: what the verdict matrix (``tests/recommender/test_live_verdicts.py``, ``bench/verdict_matrix.py``)
runs for each case."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from satbench.answer.policy import Policy
from satbench.loadgen.config import LoadgenConfig
from satbench.loadgen.runner import run_ladder
from satbench.recommender.run_analysis import analyze_run
from testkit.sim import SimulatorProcess

__all__ = ["PROBES", "VARIED", "flagged", "prefill_config", "run_lane"]

# a share of ~6000-token prompts (prefill probes) beside short ones
PROBES: dict[str, Any] = {"prefill_probe_share": 0.2, "prefill_probe_tokens": 6000}
# lognormal output lengths: users fall out of lock-step, as real traffic does
VARIED: dict[str, Any] = {"output_tokens": {"kind": "lognormal", "median": 32, "sigma": 0.6, "low": 4, "high": 160}}


def run_lane(profile: str, out: Path, *, ladder: list[int], seed: int, policy: Policy, extend: bool = False,
             workload: dict[str, Any] | None = None, window_s: float = 5.0, drift_reference: bool = False,
             **overrides: Any) -> dict[str, Any]:
    """The recommendations document's entry for one lane (``overrides``: simulator flags, as ``batch``). The
    drift check's re-measures (``ladder.drift_reference``) are asked for only by a case about drift: on a
    two-rung ladder they are two rungs more."""
    with SimulatorProcess(profile, **overrides) as sim:
        config = LoadgenConfig.model_validate({
            "lanes": [{"name": "lane", "url": sim.url, "api": "llamacpp", "model": "sim"}],
            "ladder": {"concurrency": ladder, "extend": extend, "max_concurrency": 16,
                       "drift_reference": drift_reference},
            "warmup_s": 0.5, "min_window_s": window_s, "max_window_s": window_s + 1.0,
            "min_requests": 4, "drain_timeout_s": 3.0, "progress": False, "metrics_port": None,
            "max_loop_lag_s": 1.0,
            "workload": {"prompt_tokens": {"value": 64}, "output_tokens": {"value": 32}, "seed": seed,
                         **(workload or {})},
        })
        manifest = asyncio.run(run_ladder(config, out))
    doc = analyze_run(manifest, prometheus_url=None, run_dir=out, policy=policy)
    lane: dict[str, Any] = doc["lanes"]["lane"]
    return lane


def flagged(lane: dict[str, Any], *constraints: str) -> list[int]:
    """The rungs that broke any of ``constraints``."""
    return [s["concurrency"] for s in lane["steps"]
            if set(constraints) & {v["constraint"] for v in s["violations"]}]


def prefill_config(url: str, prompt_tokens: int, max_concurrency: int, *, model: str | None = None,
                   warmup_s: float = 0.5, window_s: tuple[float, float, float] = (3.0, 5.0, 8.0)) -> LoadgenConfig:
    """One lane at ``url``: a one-rung ladder of short requests, then the peak-prefill walk of
    ``prompt_tokens``-token prompts up to ``max_concurrency``; ``window_s``: the rungs' least and most window and
    the longest a straddling gain is measured on."""
    least, most, deciding = window_s
    return LoadgenConfig.model_validate({
        "lanes": [{"name": "lane", "url": url, "api": "llamacpp", **({"model": model} if model else {})}],
        "ladder": {"concurrency": [1], "drift_reference": False},
        "warmup_s": warmup_s, "min_window_s": least, "max_window_s": most, "decide_gain": 0.10,
        "decide_max_window_s": deciding, "progress": False, "metrics_port": None, "max_loop_lag_s": 1.0,
        "prefill": {"prompt_tokens": prompt_tokens, "max_concurrency": max_concurrency},
        "workload": {"prompt_tokens": {"value": 32}, "output_tokens": {"value": 8}},
    })
