"""The peak-prefill walk on a real llama-server (the tiny dense and MoE models, ``--parallel 4``): the figure and
its interval, as the session walks it, and llm-d's record cut from it.

What must hold on any CPU: the walk ends; its peak is read from a rung of at least 10 requests whose prompts
the server counted at the length asked (within a slot's context, which ``/props`` says), with an interval
around it; and the peak is at least what the hand-run recipe reads (one request at a time: the prompt tokens
over the median TTFT of the c=1 rung), less a tenth for noise, since more users can only fill the steps one
request leaves idle.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from satbench.answer.document import read_document
from satbench.answer.policy import Policy
from satbench.loadgen.runner import run_ladder
from satbench.recommender.record_formats import render_record
from satbench.recommender.run_analysis import analyze_run
from satbench.runtimes.llamacpp import LlamaServer
from testkit.live import prefill_config

pytestmark = [pytest.mark.real, pytest.mark.timeout(900)]

PROMPT = 1024


def test_the_peak_prefill_walk_on_a_real_server(server: LlamaServer, tmp_path: Path) -> None:
    config = prefill_config(server.url, PROMPT, 16, warmup_s=1.0, window_s=(4.0, 8.0, 16.0))
    manifest = asyncio.run(run_ladder(config, tmp_path))
    walk = manifest.prefill["lane"]
    assert walk.slot_context is not None and walk.prompt_tokens == min(PROMPT, walk.slot_context - 64)
    document = analyze_run(manifest, prometheus_url=None, run_dir=tmp_path, policy=Policy())
    answer = document["lanes"]["lane"]["prefill"]
    assert answer["status"] in ("settled", "unsaturated", "undecided"), answer["reason"]
    peak, (low, high) = answer["peak_prompt_tok_s"], answer["interval"]
    assert peak > 0 and low <= peak <= high and answer["requests"] >= 10, answer
    shortest, longest = answer["prompt_tokens"]
    assert abs(shortest / walk.prompt_tokens - 1) <= 0.25 and longest <= walk.slot_context  # the text's words
    first = answer["rungs"][0]
    assert first["concurrency"] == 1 and first["median_ttft_s"] > 0
    hand_run = shortest / first["median_ttft_s"]  # llm-d's recipe: a prompt over one request's median TTFT
    assert peak >= 0.9 * hand_run, (peak, hand_run, answer["rungs"])
    record = render_record(read_document(document), "llm-d")["records"]["lane"]
    assert record["status"] == "OK" and record["peak_prefill_tokens_per_second"] == peak
    print(f"peak prefill {peak:.0f} prompt tok/s [{low:.0f}, {high:.0f}] at c={answer['concurrency']} "
          f"({answer['status']}); one request at a time {hand_run:.0f}; rungs "
          + ", ".join(f"c={r['concurrency']} {r['prompt_tok_s']:.0f}" for r in answer["rungs"]))
