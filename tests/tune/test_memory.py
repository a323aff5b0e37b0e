"""Memory from the model: the GGUF header read by hand, KV bytes a token, a candidate against a budget.

The truth is the model's shape as written (``satbench.models.tiny``'s spec, or a header built here byte by
byte) and llama-server's own line for the tiny dense model at ``-c 4096``, recorded from this build:
``llama_kv_cache: size =   16.00 MiB (  1024 cells,   4 layers,  4/4 seqs), K (f16):    8.00 MiB, V (f16):
8.00 MiB``.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from satbench.core.gguf_metadata import GgufError, SkippedArray, read_gguf_metadata
from satbench.exporter.gpu import GpuDevice
from satbench.models.tiny import TINY_MODELS, synthetic_vocab, write_tiny_models
from satbench.runtimes.llamacpp import parse_startup_log
from satbench.tune.memory import (
    Budget,
    ModelMemory,
    budget_from_devices,
    fit,
    kv_bytes_per_token,
    model_memory_from_gguf,
)

LLAMA_KV_LINE = ("0.00.027.440 I llama_kv_cache: size =   16.00 MiB (  1024 cells,   4 layers,  4/4 seqs), "
                 "K (f16):    8.00 MiB, V (f16):    8.00 MiB")


@pytest.fixture(scope="module")
def dense(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_models(tmp_path_factory.mktemp("models"), synthetic_vocab(), [TINY_MODELS["dense"]])[0]


def test_the_header_of_a_tiny_model_reads_as_written(dense: Path) -> None:
    spec = TINY_MODELS["dense"]
    meta = read_gguf_metadata(dense)
    assert meta.version == 3 and meta.architecture == "llama"
    assert meta.arch_value("block_count") == spec.n_layer and meta.arch_value("context_length") == spec.n_ctx
    assert meta.arch_value("attention.head_count_kv") == spec.n_head_kv
    assert meta.values["tokenizer.ggml.tokens"][:3] == ["<unk>", "<s>", "</s>"]


def test_kv_bytes_a_token_match_the_shape_and_llama_servers_own_figure(dense: Path) -> None:
    spec = TINY_MODELS["dense"]
    memory = model_memory_from_gguf(dense)
    head = spec.n_embd // spec.n_head
    assert memory.kv_bytes_per_token == spec.n_layer * spec.n_head_kv * head * (2 + 2)  # f16 K and V
    assert memory.weights_bytes == dense.stat().st_size and memory.layers == spec.n_layer
    logged = parse_startup_log(LLAMA_KV_LINE)
    assert logged.kv_cache_bytes == 4096 * memory.kv_bytes_per_token  # -c 4096: 4 streams of 1024 cells
    q8 = model_memory_from_gguf(dense, ["-ctk", "q8_0", "-ctv", "q4_0"])
    assert q8.kv_bytes_per_token == spec.n_layer * spec.n_head_kv * head * (34 / 32 + 18 / 32)


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack("<Q", len(data)) + data


def _pair(key: str, kind: int, payload: bytes) -> bytes:
    return _string(key) + struct.pack("<I", kind) + payload


def header(pairs: list[bytes], version: int = 3) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", version, 0, len(pairs)) + b"".join(pairs)


def u32(key: str, value: int) -> bytes:
    return _pair(key, 4, struct.pack("<I", value))


def test_per_layer_kv_heads_and_explicit_head_sizes(tmp_path: Path) -> None:
    # a hybrid: 4 layers, attention on two of them (8 KV heads), key 128 and value 64 wide
    heads = struct.pack("<IQ", 4, 4) + struct.pack("<4I", 8, 0, 8, 0)
    path = tmp_path / "m.gguf"
    path.write_bytes(header([_pair("general.architecture", 8, _string("x")), u32("x.block_count", 4),
                             u32("x.embedding_length", 1024), u32("x.attention.head_count", 16),
                             _pair("x.attention.head_count_kv", 9, heads), u32("x.attention.key_length", 128),
                             u32("x.attention.value_length", 64)]))
    meta = read_gguf_metadata(path)
    per_token, said = kv_bytes_per_token(meta)
    assert per_token == 16 * (128 * 2 + 64 * 2) and "16 KV heads over 4 layers" in said
    no_explicit = header([_pair("general.architecture", 8, _string("x")), u32("x.block_count", 2),
                          u32("x.embedding_length", 512), u32("x.attention.head_count", 8)])
    path.write_bytes(no_explicit)  # no head_count_kv: every head is a KV head; head size 512 / 8
    assert kv_bytes_per_token(read_gguf_metadata(path))[0] == 2 * 8 * 64 * 4


def test_a_long_array_is_skipped_and_what_follows_it_still_read(tmp_path: Path) -> None:
    words = struct.pack("<IQ", 8, 5000) + b"".join(_string(f"w{i}") for i in range(5000))
    path = tmp_path / "vocab.gguf"
    path.write_bytes(header([_pair("tokenizer.ggml.tokens", 9, words), u32("after", 7)]))
    meta = read_gguf_metadata(path)
    assert meta.values == {"tokenizer.ggml.tokens": SkippedArray(8, 5000), "after": 7}


def test_what_is_not_modelled_says_so(tmp_path: Path) -> None:
    path = tmp_path / "mla.gguf"
    path.write_bytes(header([_pair("general.architecture", 8, _string("deepseek2")), u32("deepseek2.block_count", 2),
                             u32("deepseek2.attention.kv_lora_rank", 512)]))
    memory = model_memory_from_gguf(path)
    assert memory.kv_bytes_per_token is None and "latent" in (memory.why or "")
    assert fit(8192, memory, Budget(1 << 30, "tune.memory_bytes", 0)).fits is None  # nothing skipped on it


@pytest.mark.parametrize(("data", "said"), [
    (b"GGML\x00\x00\x00\x00", "no GGUF magic"),
    (header([u32("a", 1)])[:-2], "cut short"),
    (header([], version=7), "version 7"),
    (header([_pair("a", 42, b"")]), "unknown GGUF value type 42"),
])
def test_a_file_that_is_not_a_readable_gguf_is_one_line(tmp_path: Path, data: bytes, said: str) -> None:
    path = tmp_path / "bad.gguf"
    path.write_bytes(data)
    with pytest.raises(GgufError, match=said):
        read_gguf_metadata(path)
    assert model_memory_from_gguf(path).why is not None


def test_a_big_endian_header_reads_too(tmp_path: Path) -> None:
    path = tmp_path / "be.gguf"
    key = b"x.block_count"
    path.write_bytes(b"GGUF" + struct.pack(">IQQ", 3, 0, 1) + struct.pack(">Q", len(key)) + key
                     + struct.pack(">II", 4, 32))
    assert read_gguf_metadata(path).values == {"x.block_count": 32}


def test_a_candidate_is_measured_against_the_budget_with_its_arithmetic() -> None:
    memory = ModelMemory("gguf", 4096.0, 40 << 20)
    budget = Budget(64 << 20, "tune.memory_bytes", 0)
    small, large = fit(2 * 1792, memory, budget), fit(8 * 1792, memory, budget)
    assert small.fits and small.kv_bytes == 2 * 1792 * 4096 and small.need_bytes == (40 << 20) + 2 * 1792 * 4096
    assert large.fits is False and large.need_bytes == (40 << 20) + 8 * 1792 * 4096
    assert large.arithmetic == ("needs 96.00 MiB (weights 40.00 MiB + KV 56.00 MiB (14336 tokens x 4096 B)) but only "
                                "64.00 MiB usable (tune.memory_bytes: 64.00 MiB less a 0.00 MiB reserve)")
    assert fit(8 * 1792, memory, None).fits is None


def test_the_budget_of_the_gpus_seen_is_their_free_memory_less_a_reserve_each() -> None:
    gib = 1 << 30
    devices = [GpuDevice("0", "H100", 10 * gib, 80 * gib), GpuDevice("1", "H100", 0.0, 80 * gib)]
    budget = budget_from_devices(devices, gib)
    assert budget is not None and budget.total_bytes == 150 * gib and budget.usable_bytes == 148 * gib
    assert "0 (H100) 70.00 GiB free of 80.00 GiB" in budget.source
    assert budget_from_devices([], gib) is None
