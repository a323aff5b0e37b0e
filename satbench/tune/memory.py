"""What a candidate needs in memory, from the model itself, and whether it fits before anything starts.

llama.cpp allocates a server's whole KV cache when it starts: ``-c`` tokens (every slot's share, or the one
unified pool), each holding a key and a value vector in every attention layer. So a candidate needs

    weights + kv_bytes_per_token x ctx_size,    kv_bytes_per_token = sum over layers of
                                                 n_head_kv(l) x (head_k x size(type_k) + head_v x size(type_v))

from the GGUF (``core.gguf_metadata``): ``<arch>.block_count``, ``<arch>.attention.head_count_kv`` (a number
or one per layer; 0 for a layer without attention), ``<arch>.attention.key_length`` / ``value_length``
(default ``embedding_length / head_count``, llama.cpp's own default). The element sizes are ggml's: f32 4
bytes, f16 and bf16 2, q8_0 34 bytes per block of 32, q4_0 18, q4_1 20, q5_0 22, q5_1 24, iq4_nl 18; the
cache types are the lane's ``-ctk``/``-ctv`` (f16 when it sets none, llama-server's default). Measured on
the tiny dense model: 4 layers x 4 KV heads x 64 x (2 + 2) bytes = 4096 bytes a token, and llama-server's
own line for ``-c 4096`` reads ``llama_kv_cache: size = 16.00 MiB``. Weights are the file's size (every
split of a split model), which also counts the small header: an estimate on the safe side.

Not modelled, and said so (``kv_bytes_per_token`` None, the reason in ``why``): multi-head latent attention
(``kv_lora_rank``: its cache holds a compressed latent), recurrent and hybrid state, and a file this reader
cannot read. A sliding-window model is counted as if every layer held the whole context, which over-states
its need (llama.cpp keeps ``n_swa`` cells on those layers): a candidate is then skipped on the safe side.

A simulator lane's model is its profile's ``[memory]`` table (``weights_bytes``, ``kv_bytes_per_token``,
``compute_buffer_bytes``): the simulator's stand-in for a GGUF, so a simulated tune skips what its simulated
GPU could not hold.

The budget: ``tune.memory_bytes`` where the config sets it (CPU or unified memory, or a stated share of a
GPU); else, for a llamacpp lane, the free memory of the GPUs the exporter's reader sees (NVML, summed over
devices: ``-ngl`` puts every layer, and its KV, on the GPUs); else, for a simulator lane, its profile's
simulated GPUs. Less ``tune.memory_reserve_bytes`` (default 1 GiB: what llama.cpp's ``--fit`` leaves free
per device by default, ``--fit-target 1024``, for compute buffers and the driver), and, where the model
states one (a profile), its compute buffer. No budget: nothing is skipped, and each candidate's need is still
recorded. A candidate that needs more than it is ``skipped`` before a start, the arithmetic in its reason.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from satbench.core.gguf_metadata import GgufError, GgufMetadata, read_gguf_metadata
from satbench.core.llama_argv import settings_from_argv
from satbench.core.model_files import split_paths

__all__ = [
    "CACHE_TYPE_BYTES",
    "Budget",
    "Fit",
    "ModelMemory",
    "budget_from_devices",
    "fit",
    "kv_bytes_per_token",
    "mib",
    "model_memory_from_gguf",
    "model_memory_from_profile",
]

CACHE_TYPE_BYTES: dict[str, float] = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32,
                                      "q4_1": 20 / 32, "q5_0": 22 / 32, "q5_1": 24 / 32, "iq4_nl": 18 / 32}
_GIB = 1 << 30


def mib(n: float) -> str:
    """Bytes as MiB or GiB, as llama.cpp prints them."""
    return f"{n / _GIB:.2f} GiB" if n >= _GIB else f"{n / (1 << 20):.2f} MiB"


@dataclass(frozen=True, slots=True)
class ModelMemory:
    """The memory facts of a lane's model: bytes a KV token takes, weights, a stated compute buffer."""

    source: str  # gguf | profile
    kv_bytes_per_token: float | None
    weights_bytes: int | None
    compute_bytes: int = 0
    layers: int | None = None
    kv_arithmetic: str = ""
    why: str | None = None  # why kv_bytes_per_token is None


@dataclass(frozen=True, slots=True)
class Budget:
    """The memory a candidate may use, where it comes from, and the reserve kept free of it."""

    total_bytes: int
    source: str
    reserve_bytes: int

    @property
    def usable_bytes(self) -> int:
        return max(0, self.total_bytes - self.reserve_bytes)


@dataclass(frozen=True, slots=True)
class Fit:
    """One candidate against the budget: what it needs, and whether that fits (None: no budget or no model)."""

    kv_bytes: int | None
    need_bytes: int | None
    fits: bool | None
    arithmetic: str


def _per_layer(value: Any, layers: int) -> list[int] | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return [value] * layers
    if isinstance(value, list) and len(value) == layers and all(isinstance(v, int) for v in value):
        return list(value)
    return None


def kv_bytes_per_token(meta: GgufMetadata, type_k: str = "f16", type_v: str = "f16") -> tuple[float | None, str]:
    """Bytes one token of KV cache takes for this model, and the arithmetic (or why it cannot be told)."""
    arch = meta.architecture
    if arch is None:
        return None, "the GGUF names no general.architecture"
    if meta.arch_value("attention.kv_lora_rank") is not None:
        return None, f"{arch} caches a compressed latent (multi-head latent attention): not modelled"
    if meta.arch_value("ssm.state_size") is not None:
        return None, f"{arch} keeps recurrent state: not modelled"
    layers = meta.arch_value("block_count")
    if not isinstance(layers, int) or layers < 1:
        return None, f"the GGUF has no {arch}.block_count"
    heads = meta.arch_value("attention.head_count")
    heads_kv = meta.arch_value("attention.head_count_kv")
    per_layer = _per_layer(heads_kv if heads_kv is not None else heads, layers)
    if per_layer is None:
        return None, f"{arch}.attention.head_count_kv is neither a number nor one per layer"
    embd = meta.arch_value("embedding_length")
    head0 = max((h for h in (_per_layer(heads, layers) or [0])), default=0)
    default_head = embd // head0 if isinstance(embd, int) and head0 > 0 else None
    head_k = meta.arch_value("attention.key_length") or default_head
    head_v = meta.arch_value("attention.value_length") or default_head
    if not isinstance(head_k, int) or not isinstance(head_v, int):
        return None, f"the GGUF tells neither {arch}.attention.key_length nor embedding_length / head_count"
    size_k, size_v = CACHE_TYPE_BYTES.get(type_k), CACHE_TYPE_BYTES.get(type_v)
    if size_k is None or size_v is None:
        return None, f"cache type {type_k if size_k is None else type_v} is not one whose size is modelled"
    total_heads = sum(per_layer)
    per_token = total_heads * (head_k * size_k + head_v * size_v)
    uniform = len(set(per_layer)) == 1
    said = (f"{layers} layers x {per_layer[0]} KV heads" if uniform else f"{total_heads} KV heads over {layers} layers")
    return per_token, (f"{said} x ({head_k} x {size_k:g} B {type_k} K + {head_v} x {size_v:g} B {type_v} V) "
                       f"= {per_token:g} B a token")


def model_memory_from_gguf(path: Path, server_args: Sequence[str] = ()) -> ModelMemory:
    """The memory facts of a GGUF (and its splits), with the lane's ``-ctk``/``-ctv`` cache types."""
    settings, _ = settings_from_argv(["llama-server", *server_args])
    type_k, type_v = settings.get("cache_type_k") or "f16", settings.get("cache_type_v") or "f16"
    try:
        weights: int | None = sum(p.stat().st_size for p in split_paths(path))
    except OSError:
        weights = None
    try:
        meta = read_gguf_metadata(path)
    except (GgufError, OSError) as exc:
        return ModelMemory("gguf", None, weights, why=f"cannot read the GGUF: {exc}")
    per_token, said = kv_bytes_per_token(meta, type_k, type_v)
    layers = meta.arch_value("block_count")
    return ModelMemory("gguf", per_token, weights, layers=layers if isinstance(layers, int) else None,
                       kv_arithmetic=said if per_token is not None else "", why=None if per_token is not None else said)


def model_memory_from_profile(memory: Any) -> ModelMemory:
    """A simulator profile's ``[memory]`` table as the model's memory facts."""
    per_token = float(memory.kv_bytes_per_token)
    return ModelMemory("profile", per_token, int(memory.weights_bytes), compute_bytes=int(memory.compute_buffer_bytes),
                       kv_arithmetic=f"{per_token:g} B a token (the profile's [memory] kv_bytes_per_token)")


def budget_from_devices(devices: Sequence[Any], reserve_bytes: int) -> Budget | None:
    """The free memory of the GPUs a reader saw (``exporter.gpu.GpuDevice``), a reserve kept on each."""
    if not devices:
        return None
    free = sum(max(0, int(d.total_bytes - d.used_bytes)) for d in devices)
    kind = "simulated GPU" if all(getattr(d, "simulated", False) for d in devices) else "GPU"
    names = ", ".join(f"{d.gpu} ({d.name}) {mib(max(0.0, d.total_bytes - d.used_bytes))} free of "
                      f"{mib(d.total_bytes)}" for d in devices)
    return Budget(free, f"{kind} memory free before the first start: {names}", reserve_bytes * len(devices))


def fit(ctx_size: int, model: ModelMemory | None, budget: Budget | None) -> Fit:
    """``ctx_size`` tokens of KV for ``model`` against ``budget`` (module docstring), with the arithmetic."""
    if model is None or model.kv_bytes_per_token is None:
        why = "no model memory facts" if model is None else model.why or "unknown"
        return Fit(None, None, None, f"KV bytes not modelled: {why}")
    kv = math.ceil(model.kv_bytes_per_token * ctx_size)
    weights = model.weights_bytes or 0
    need = weights + kv + model.compute_bytes
    parts = [f"weights {mib(weights)}", f"KV {mib(kv)} ({ctx_size} tokens x {model.kv_bytes_per_token:g} B)"]
    if model.compute_bytes:
        parts.append(f"compute {mib(model.compute_bytes)}")
    said = f"needs {mib(need)} ({' + '.join(parts)})"
    if budget is None:
        return Fit(kv, need, None, f"{said}; no memory budget (tune.memory_bytes unset, no GPU seen)")
    fits = need <= budget.usable_bytes
    return Fit(kv, need, fits, f"{said} {'within' if fits else 'but only'} {mib(budget.usable_bytes)} usable "
                               f"({budget.source}: {mib(budget.total_bytes)} less a {mib(budget.reserve_bytes)} "
                               f"reserve)")
