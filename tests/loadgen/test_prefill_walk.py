"""The peak-prefill walk on the simulator over loopback HTTP, against the engine's own prefill capacity.

Truth is the engine's construction (``simulator.stepcost``), never satbench's analysis: a step that holds ``n``
prompt tokens lasts ``step_seconds(cost, 0, n, ubatch)``, and a step holds at most the logical batch ``-b``
and at most what the slots have left to prefill (``slots x prompt``), so the most prompt tokens the engine can
evaluate per second is ``max over n <= min(batch, slots x prompt) of n / step_seconds(n)``. The walk
(``loadgen.prefill_walk``) measures it with long prompts and one output token at rising concurrency, and the
recommender's answer (``answer.prefill_analysis``) reads the peak; it must be within 10 % of the truth on
a dense and a Mixture-of-Experts profile, each with chunked (``-b`` below the prompt: a prompt over several
steps) and unchunked prefill (``-b`` above it: several prompts in one step). The dense profile here is
memory-bound (a step's fixed cost dominates a short batch), so one request reads far below the peak (the
hand-run recipe's floor) and the walk has to climb; llm-d's record of the answer is then ``OK``.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from satbench.answer.document import read_document
from satbench.answer.policy import Policy
from satbench.loadgen.runner import run_ladder
from satbench.recommender.record_formats import render_record
from satbench.recommender.run_analysis import analyze_run
from satbench.report.render import write_report
from satbench.simulator.profile import Profile, load_profile
from satbench.simulator.stepcost import step_seconds
from testkit.live import prefill_config
from testkit.sim import SimulatorProcess

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

# a dense model on a fast accelerator: a step's fixed cost (launch, one pass over the weights per micro-batch)
# is large beside its per-token cost, so prefill throughput grows with the tokens in a step
MEMORY_BOUND = """
name = "memory-bound"
[model]
name = "sim-memory-bound.gguf"
[server]
slots = 8
ctx_tokens = 65536
batch = 8192
ubatch = 2048
[cost]
step_overhead_ms = 5.0
weights_ms = 20.0
decode_ms_per_token = 0.05
prefill_ms_per_token = 0.02
"""


def prefill_capacity(profile: Profile, prompt_tokens: int) -> float:
    """The engine's most prompt tokens/s (module docstring)."""
    s = profile.server
    top = min(s.batch, s.slots * prompt_tokens)
    return max(n / step_seconds(profile.cost, 0, n, s.ubatch, s.time_scale) for n in range(1, top + 1))


def walk(profile: str, out: Path, prompt_tokens: int, **sim: Any) -> dict[str, Any]:
    """The lane's document entry after a one-rung ladder and the prefill walk, judged from the records."""
    with SimulatorProcess(profile, **sim) as server:
        config = prefill_config(server.url, prompt_tokens, 32, model="sim")
        manifest = asyncio.run(run_ladder(config, out))
    document = analyze_run(manifest, prometheus_url=None, run_dir=out, policy=Policy())
    return document


CASES = [  # (profile, simulator flags, prompt tokens): chunked = the logical batch below the prompt
    pytest.param("memory", {"batch": 8192}, 1024, id="dense-unchunked"),
    pytest.param("memory", {"batch": 2048, "ubatch": 512}, 6144, id="dense-chunked"),
    pytest.param("moe", {"batch": 4096, "time_scale": 0.15}, 1024, id="moe-unchunked"),
    pytest.param("moe", {"batch": 512, "time_scale": 0.15}, 2048, id="moe-chunked"),
]


@pytest.mark.parametrize(("name", "flags", "prompt"), CASES)
def test_the_peak_is_the_engines_prefill_capacity(tmp_path: Path, name: str, flags: dict[str, Any],
                                                  prompt: int) -> None:
    if name == "memory":
        path = tmp_path / "memory.toml"
        path.write_text(MEMORY_BOUND)
        name = str(path)
    profile = load_profile(name)
    server = profile.server
    batch, ubatch = flags.get("batch", server.batch), flags.get("ubatch", server.ubatch)
    scale = flags.get("time_scale", server.time_scale)
    truth = prefill_capacity(profile.with_overrides(batch=batch, ubatch=ubatch, time_scale=scale), prompt)
    document = walk(name, tmp_path / "run", prompt, **flags)
    answer = document["lanes"]["lane"]["prefill"]
    peak = answer["peak_prompt_tok_s"]
    # a peak read (undecided: the walk's last doubling straddled the rule, its figure a lower bound)
    assert answer["status"] in ("settled", "unsaturated", "undecided"), answer["reason"]
    assert abs(peak / truth - 1) <= 0.10, (peak, truth, answer["rungs"])
    assert answer["prompt_tokens"] == [prompt, prompt] and answer["requests"] >= 10
    low, high = answer["interval"]
    assert low <= peak <= high
    record = render_record(read_document(json.loads(json.dumps(document))), "llm-d")["records"]["lane"]
    assert record["status"] == "OK" and record["peak_prefill_tokens_per_second"] == peak
    assert record["valid_samples"] >= 10 and record["median_ttft_seconds"] > 0
    # the report says the document's figure: one number, two readers
    run = tmp_path / "run"
    (run / "recommendations.json").write_text(json.dumps(document))
    write_report(run)
    readme = (run / "README.md").read_text()
    assert f"{peak:,.0f} prompt tok/s at c={answer['concurrency']} ({answer['status']})" in readme
    assert f"{peak:,.0f} prompt tokens/s [{low:,.0f}, {high:,.0f}]" in (run / "report.html").read_text()
