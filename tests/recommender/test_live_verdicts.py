"""Verdicts on live simulator lanes (load generator -> records -> recommender), no Prometheus needed.

``starving`` (simulator profile, with ``--batch 8192`` so a whole prompt is one step) admits the
lowest-numbered user first; its fair counterpart is ``dense`` with chunked prefill (``--batch 256
--ubatch 256``) and FIFO admission. A share of the requests carries a 6000-token prompt (prefill probes):
unchunked, each stalls every running decode for ~600 ms, about 130 ITLs; chunked, a decode waits at most
one 256-token chunk, ~4-7 ITLs. The policy's stall limit (50 ITLs) sits between the two with room for a
loaded machine's scheduling hiccups (up to ~25 ITLs seen). At 8 users on 4 slots the unfair admission
leaves users 4-7 nearly nothing once the rung's opening requests are served: the windows are 8 s so that
those (every user's first request is admitted in turn) do not dominate them. With 4 s windows Jain's index
at c=8 on the unfair lane was 0.83, and in about one run in ten 0.90, at the limit; with 8 s it is
0.73-0.79, and the fair lane 0.99-1.0. Short windows full of 600 ms prefills make throughput noisy, so this
policy does not ask for stable throughput (``max_throughput_ci_ratio``): the verdicts are the point.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from loadgen.config import LoadgenConfig
from loadgen.runner import run_ladder
from recommender.policy import Policy
from recommender.run_analysis import analyze_run
from testkit.sim import SimulatorProcess

POLICY = Policy(decode_stall_max_ratio=50.0, jain_min=0.9, prefill_wait_max_s=None,
                max_throughput_ci_ratio=10.0)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def run_lane(profile: str, out: Path, **overrides: Any) -> dict[str, Any]:
    with SimulatorProcess(profile, **overrides) as sim:
        config = LoadgenConfig.model_validate({
            "lanes": [{"name": "lane", "url": sim.url, "api": "llamacpp", "model": "sim"}],
            "ladder": {"concurrency": [2, 8]}, "warmup_s": 0.5, "min_window_s": 8.0, "max_window_s": 9.0,
            "min_requests": 4, "drain_timeout_s": 3.0, "progress": False, "metrics_port": None,
            "max_loop_lag_s": 1.0,
            "workload": {"prompt_tokens": {"value": 64}, "output_tokens": {"value": 32}, "seed": 3,
                         "prefill_probe_share": 0.2, "prefill_probe_tokens": 6000},
        })
        manifest = asyncio.run(run_ladder(config, out))
    doc = analyze_run(manifest, prometheus_url=None, run_dir=out, policy=POLICY)
    lane: dict[str, Any] = doc["lanes"]["lane"]
    return lane


def flagged(lane: dict[str, Any], constraint: str) -> list[int]:
    return [s["concurrency"] for s in lane["steps"]
            if constraint in {v["constraint"] for v in s["violations"]}]


def test_starving_batcher_and_unfair_admission_are_flagged_and_the_fair_lane_is_not(tmp_path: Path) -> None:
    starving = run_lane("starving", tmp_path / "starving", batch=8192)
    fair = run_lane("dense", tmp_path / "fair", batch=256, ubatch=256)

    stalls = {lane: [s["decode_stall_max_ratio"] for s in doc["steps"]] for lane, doc in
              (("starving", starving), ("fair", fair))}
    assert starving["starvation"]["decode_flagged_at"], stalls
    assert starving["starvation"]["decode_flagged_at"] == flagged(starving, "decode_starvation")
    assert 8 in starving["fairness"]["flagged_at"]
    assert fair["starvation"]["decode_flagged_at"] == [], stalls
    assert fair["fairness"]["flagged_at"] == []
