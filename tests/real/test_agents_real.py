"""A small agent walk on a real llama-server (the tiny dense and MoE models, ``--parallel 4``, one thread).

What must hold on any CPU: at a tier no CPU misses (a 60 s TTFT ceiling, 1 token/s), the walk holds 1 and 2
sessions and stops at its top (``unsaturated``, 2); every turn was sent end to start (from the records alone);
and a later turn of a session, which repeats its context, is served by the server's prompt cache by the server's
own counts (``timings.cache_n``): more than half of those turns' prompt tokens.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from satbench.answer.policy import Policy
from satbench.core.records import read_records
from satbench.loadgen.config import LoadgenConfig
from satbench.loadgen.runner import run_ladder
from satbench.recommender.run_analysis import analyze_run
from satbench.runtimes.llamacpp import LlamaServer
from testkit.agents import check_end_to_start

pytestmark = [pytest.mark.real, pytest.mark.timeout(900)]


def test_a_small_agent_walk_on_a_real_server(server: LlamaServer, tmp_path: Path) -> None:
    config = LoadgenConfig.model_validate({
        "lanes": [{"name": "lane", "url": server.url, "api": "llamacpp"}],
        "ladder": {"concurrency": [1], "drift_reference": False}, "warmup_s": 0.5, "min_window_s": 2,
        "max_window_s": 3, "progress": False, "metrics_port": None, "max_loop_lag_s": 1.0,
        "workload": {"prompt_tokens": {"value": 32}, "output_tokens": {"value": 8}},
        "agents": {"ttft_s": 60, "speed_tok_s": 1, "max_sessions": 2, "warmup_s": 2, "window_s": 8, "drain_s": 60,
                   "system_tokens": 300, "task_tokens": 100, "new_tokens_median": 60, "output_tokens_median": 16,
                   "output_tokens_max": 48, "max_context_tokens": 2000, "delay_median_s": 0.05,
                   "delay_cap_s": 0.5, "spawn_share": 0.2},
    })
    manifest = asyncio.run(run_ladder(config, tmp_path))
    walk = manifest.agents["lane"]
    assert [r.sessions for r in walk.rungs] == [1, 2], walk.rungs
    assert all(r.valid and r.holds for r in walk.rungs), walk.rungs
    records = [r for r in read_records(tmp_path / "records.jsonl") if "agent" in r.extra]
    checked, _ = check_end_to_start(records)
    assert checked >= 10, checked
    later = [r for r in records if r.ok and r.extra["agent"]["turn"] > 0 and r.prompt_tokens]
    assert later and all(r.cached_prompt_tokens is not None for r in later)
    served = sum(r.cached_prompt_tokens or 0 for r in later) / sum(r.prompt_tokens or 0 for r in later)
    assert served > 0.5, served
    agents = analyze_run(manifest, prometheus_url=None, run_dir=tmp_path, policy=Policy())["lanes"]["lane"]["agents"]
    assert (agents["status"], agents["max_sessions"], agents["validity"]["valid"]) == ("unsaturated", 2, True)
    print(f"agents: {[(r.sessions, r.turns, r.ttft_p95_s, r.speed_p25_tok_s) for r in walk.rungs]}; later turns' "
          f"prompt tokens served by the cache {served:.0%}")
