"""What the trace's ``hash_ids`` imply the prompt cache serves, and what the simulator's engine serves of it.

The truth is the trace's own block ids (``Trace.implied_cache_share``: each request's leading ids seen before
it, in tokens, over all prompt tokens) and the engine's counter of prompt tokens it took from a cache, fed the
synthesised prompts (``loadgen.traces.TracePrompts``) at the trace's times in virtual time. With llama-server's
host-memory prompt cache (``--cache-ram``; the simulator's ``cache_ram_tokens``) the engine serves what the ids
imply within 10 %, at the trace's rate and at a factor near the lane's capacity; with one prompt per slot it
serves less, and less under more load (a prefix's slot is busy or overwritten more often).
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pytest

from satbench.loadgen.traces import read_trace
from satbench.simulator.cli import configure
from satbench.simulator.dropin import apply_llama_flags
from satbench.simulator.profile import load_profile
from testkit.trace_truth import generate_mooncake, serve_trace


def test_the_engine_serves_what_the_hash_ids_imply_with_a_host_memory_prompt_cache(tmp_path: Path) -> None:
    trace = read_trace(generate_mooncake(tmp_path / "t.jsonl", n=120, rate_rps=2.0, seed=4, groups=3))
    implied = trace.implied_cache_share()
    assert 0.3 < implied < 0.8  # the generated sharing: three system prompts of two blocks, 80 % of requests
    profile = load_profile("dense")
    ram = dataclasses.replace(profile, server=dataclasses.replace(profile.server, cache_ram_tokens=1 << 20))
    slot_only = []
    for factor in (1.0, 2.5):
        _, served = serve_trace(ram, trace, factor)
        assert abs(served / implied - 1) <= 0.10, (factor, served, implied)
        slot_only.append(serve_trace(profile, trace, factor)[1])
    assert slot_only[0] < implied and slot_only[1] <= slot_only[0]


@pytest.mark.parametrize(("flags", "tokens"), [
    ([], 0), (["--cache-ram", "0"], 0), (["-cram", "1024"], None), (["--cache-ram", "-1"], 1 << 40)])
def test_the_drop_in_simulator_takes_llama_server_s_cache_ram_flag(flags: list[str], tokens: int | None) -> None:
    """``--cache-ram MiB`` is the host cache's bound in the profile's own KV bytes a token (left out: off)."""
    parser = argparse.ArgumentParser()
    configure(parser)
    args = parser.parse_args(["-m", "m.gguf", *flags])
    args.slots_flag = False
    profile = load_profile(args.profile)
    served, _ = apply_llama_flags(profile, args, {})
    expected = 1024 * (1 << 20) // profile.memory.kv_bytes_per_token if tokens is None else tokens
    assert served.server.cache_ram_tokens == expected
