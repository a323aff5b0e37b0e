"""A lane that replayed a recorded trace, built by hand: the scenario the trace answer's reader tests share.

A trace window recorded at 2 requests/s is replayed at 1x, 2x, 4x and 8x after a closed ladder. Up to 4x the lane
serves the traffic whole or nearly (100 %, 99 %, 95 % of 400 requests within every objective, no backlog); at 8x
half its requests miss their TTFT, the backlog still steady (``grows``: it grows at 8x instead). With attainment
falling in a straight line between 4x and 8x, the policy's 90 % target is crossed at 4 + 4 x (0.95 - 0.90) /
(0.95 - 0.50) = 4.444x (``TRUE_FACTOR``), i.e. 8.889 requests/s, bracketed by 4x and 8x.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from satbench.core.figures import StepFigures
from satbench.core.manifest import RunManifest, StepWindow
from tests.recommender.figures_factory import ladder

__all__ = ["CURVE", "EVIDENCE", "RECORDED_RPS", "SHARE", "TRUE_FACTOR", "scenario", "trace_rung"]

CURVE = {1: 100.0, 2: 190.0, 4: 340.0, 8: 350.0}
RECORDED_RPS = 2.0
SHARE = {1.0: 1.0, 2.0: 0.99, 4.0: 0.95, 8.0: 0.50}  # the scenario's attainment at each factor
TRUE_FACTOR = 4 + 4 * (0.95 - 0.90) / (0.95 - 0.50)
EVIDENCE: dict[str, Any] = {
    "path": "examples/traces/mooncake_sample.jsonl", "format": "mooncake", "sha256": "ab" * 32,
    "size_bytes": 12345, "window": {"offset_s": 0.0, "length_s": 20.0, "requests": 40},
    "recorded_rate_rps": RECORDED_RPS, "skipped_rows": 0, "synthesised": "prompt text: one fixed text a block",
    "block_tokens": 512, "implied_cache_share": 0.58, "speed_factors": [1.0, 8.0, 4.0, 2.0]}


def trace_rung(factor: float, grows: bool = False) -> StepFigures:
    """The trace rung at ``factor``: 400 requests judged, the scenario's share of them attained."""
    rate, judged = factor * RECORDED_RPS, 400
    attained = round(SHARE[factor] * judged)
    grows = grows and factor == 8.0
    return replace(ladder({1: 100.0})[0], concurrency=0, rate_rps=rate, offered_rps=rate, judged_requests=judged,
                   attained_requests=attained, attainment=attained / judged, goodput_rps=rate * SHARE[factor],
                   backlog_growth_rps=0.4 * rate if grows else 0.0, backlog_growth_se=0.01, backlog_growth_dof=30,
                   waits_settled=0 if grows else 1,
                   objective_misses={"ttft": judged - attained} if attained < judged else {})


def scenario(*, traced: bool = True, grows: bool = False, evidence: bool = True
             ) -> tuple[RunManifest, dict[str, list[StepFigures]]]:
    """The run's manifest (closed windows, then one window a factor with its ``speed_factor``, and the
    ``traces`` entry unless ``evidence`` is false) and the lane's figures; ``traced`` false: the closed ladder
    alone."""
    closed = [StepWindow("dense", c, 10.0 * c, 10.0 * c + 30.0) for c in CURVE]
    factors = list(SHARE) if traced else []
    rungs = [StepWindow("dense", 0, 100.0 + 30 * i, 125.0 + 30 * i, rate_rps=f * RECORDED_RPS, speed_factor=f)
             for i, f in enumerate(factors)]
    manifest = RunManifest(run_id="20261204T120000Z-7ace", created_at=1.0, steps=(*closed, *rungs),
                           traces={"dense": EVIDENCE} if traced and evidence else {})
    return manifest, {"dense": [*ladder(CURVE), *(trace_rung(f, grows) for f in factors)]}
