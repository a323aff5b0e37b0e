"""Reading back what started: llama-server's own start-up lines, and a candidate checked against them.

The log lines are this build's, recorded from the tiny dense model (``-np 4 -c 4096 -b 256 -ub 256 -lv 4``
and, for the unified layout, ``LLAMA_ARG_KV_UNIFIED=1`` with ``-np 2 -c 2048`` and no layout flag: the
environment filled what the command line left out). The offload and sliding-window lines follow the format
strings of ``src/llama-model.cpp`` and ``src/llama-kv-cache.cpp`` (this CPU build prints no offload line).
"""

from __future__ import annotations

import pytest

from satbench.runtimes.llamacpp import StartupLog, parse_startup_log
from satbench.tune.grid import Candidate
from satbench.tune.readback import verify

SPLIT_LOG = "\n".join([
    "0.00.015.694 I llama_context: kv_unified            = false",
    "0.00.015.868 I llama_kv_cache:        CPU KV buffer size =    16.00 MiB",
    "0.00.027.440 I llama_kv_cache: size =   16.00 MiB (  1024 cells,   4 layers,  4/4 seqs), "
    "K (f16):    8.00 MiB, V (f16):    8.00 MiB",
    "0.00.036.078 I srv    load_model: initializing, n_slots = 4, n_ctx_slot = 1024, kv_unified = 'false'"])
ENV_UNIFIED_LOG = ("0.00.090.226 I srv    load_model: initializing, n_slots = 2, n_ctx_slot = 2048, "
                   "kv_unified = 'true'")
GPU_LOG = """\
load_tensors: offloading 32 repeating layers to GPU
load_tensors: offloaded 20/33 layers to GPU
llama_kv_cache_iswa: creating non-SWA KV cache, size = 4096 cells
llama_kv_cache: size =   51.00 MiB (  4096 cells,  12 layers,  1/1 seqs), K (q8_0):   25.50 MiB, V (q8_0):   25.50 MiB
llama_kv_cache_iswa: creating     SWA KV cache, size = 768 cells
llama_kv_cache: size =    9.56 MiB (   768 cells,  12 layers,  1/1 seqs), K (q8_0):    4.78 MiB, V (q8_0):    4.78 MiB
"""


def test_the_start_up_lines_read_as_the_server_printed_them() -> None:
    split = parse_startup_log(SPLIT_LOG)
    assert (split.slots, split.n_ctx_slot, split.kv_unified) == (4, 1024, False)
    assert split.kv_cache_bytes == 16 << 20 and split.kv_cells == 1024 and split.kv_seqs == (4, 4)
    assert split.kv_types == ("f16", "f16") and split.offloaded_layers is None
    assert parse_startup_log(ENV_UNIFIED_LOG).kv_unified is True
    gpu = parse_startup_log(GPU_LOG)
    assert gpu.offloaded_layers == (20, 33) and gpu.kv_seqs == (1, 1) and gpu.kv_types == ("q8_0", "q8_0")
    assert gpu.kv_cache_bytes == round((51.00 + 9.56) * (1 << 20))  # both caches of a sliding-window model
    assert parse_startup_log("") == StartupLog()


def props(slots: int, n_ctx: int) -> dict[str, object]:
    return {"total_slots": slots, "default_generation_settings": {"n_ctx": n_ctx}}


CANDIDATE = Candidate(4, 256, 256, 1024)


@pytest.mark.parametrize(("answer", "startup", "ngl", "said"), [
    (props(4, 1024), parse_startup_log(SPLIT_LOG), None, None),
    (props(4, 1280), None, None, None),  # more context than asked: a padding, noted
    (props(8, 512), None, None, "runs 8 slots"),  # a wrapper that dropped --parallel
    (props(4, 512), None, None, "each slot holds 512 tokens"),
    ({"error": "GET /props failed: ConnectError"}, None, None, None),  # unverified, noted, not a mismatch
    ({}, parse_startup_log(ENV_UNIFIED_LOG), None, "n_slots = 2"),  # the log alone still tells
    (props(4, 1024), parse_startup_log(ENV_UNIFIED_LOG), None, "kv_unified = true"),
    (props(4, 1024), parse_startup_log(GPU_LOG), None, "offloaded 20/33 layers"),
    (props(4, 1024), parse_startup_log(GPU_LOG), 20, None),  # the lane asked for 20 layers
])
def test_a_started_server_that_is_not_the_candidate_is_refused(answer: dict[str, object], startup: StartupLog | None,
                                                                ngl: int | None, said: str | None) -> None:
    problems, record = verify(CANDIDATE, answer, startup, ngl)
    assert (not problems) == (said is None), problems
    if said is not None:
        assert any(said in p for p in problems), problems
    assert record.problems == problems


def test_what_the_server_does_not_publish_is_said_unverified() -> None:
    problems, record = verify(CANDIDATE, {"error": "GET /props failed: ConnectError"}, None)
    assert problems == [] and record.total_slots is None and "unverified" in record.notes[0]


def test_a_unified_candidate_reads_back_its_whole_pool_per_slot() -> None:
    unified = Candidate(4, 256, 256, 1024, kv_unified=True, pool=3072)
    log = parse_startup_log("load_model: initializing, n_slots = 4, n_ctx_slot = 3072, kv_unified = 'true'")
    problems, record = verify(unified, props(4, 3072), log)
    assert problems == [] and record.kv_unified is True and record.notes == []
    assert verify(unified, props(4, 3072), parse_startup_log(SPLIT_LOG))[0]  # the server built it split
