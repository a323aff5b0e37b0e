"""Simulator profiles: the frozen numbers that define one simulated model deployment.

A profile is a TOML file (see ``simulator/profiles/dense.toml`` for every key with its source). It is read
once at the entry point into frozen dataclasses; the engine, the capacity model and the server only see
those. Unknown keys are an error (a typo must not silently fall back to a default), and every number is
range-checked so a bad profile fails with a message that names the key.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "CostModel",
    "FaultSpec",
    "MemoryModel",
    "ModelInfo",
    "PowerModel",
    "Profile",
    "ProfileError",
    "ServerModel",
    "bundled_profiles",
    "load_profile",
    "profile_from_mapping",
]

PROFILE_DIR = Path(__file__).parent / "profiles"
ADMISSION_POLICIES = ("fifo", "unfair")
FAULT_KINDS = (
    "http_5xx",
    "drop_stream",
    "stall",
    "malformed_sse",
    "slow_metrics",
    "slots_disabled",
    "metrics_disabled",
    "engine_pause",
    "slowdown",
)


class ProfileError(ValueError):
    """A profile file or mapping that cannot be used; the message names the offending key."""


@dataclass(frozen=True)
class ModelInfo:
    name: str = "sim-model.gguf"
    description: str = ""
    n_params: int = 8_030_261_248
    n_ctx_train: int = 131072
    n_embd: int = 4096
    n_vocab: int = 128256
    ftype: str = "Q8_0"


@dataclass(frozen=True)
class ServerModel:
    slots: int = 4
    ctx_tokens: int = 65536
    slot_ctx_tokens: int = 0  # 0: same as ctx_tokens (unified KV cache shared by all slots)
    batch: int = 2048
    ubatch: int = 512
    admission: str = "fifo"
    time_scale: float = 1.0
    seed: int = 0
    truth_history: int = 100_000
    context_shift: bool = False  # llama-server --context-shift: generation goes on past a full context
    # llama-server --cache-ram: prompts a slot gives up are kept in host memory, up to this many tokens, and a
    # request restores the one sharing its longest prefix (simulator.engine); 0: off, one prompt per slot
    cache_ram_tokens: int = 0
    # vLLM / SGLang --stream-interval: tokens a stream event carries (the first token is sent alone at once, the
    # last event carries what is left); llama-server sends every token in its own event (1)
    stream_interval: int = 1

    @property
    def n_ctx_slot(self) -> int:
        return self.slot_ctx_tokens or self.ctx_tokens

    @property
    def kv_unified(self) -> bool:
        """One KV cache shared by every slot (``slot_ctx_tokens`` 0: each may use all of ``ctx_tokens``), as
        llama-server's ``-kvu`` (and its ``-np`` auto); else each slot owns ``slot_ctx_tokens`` of it."""
        return self.slot_ctx_tokens == 0


@dataclass(frozen=True)
class CostModel:
    """Per-step cost in milliseconds; see ``simulator.stepcost`` for the formula."""

    step_overhead_ms: float = 1.2
    weights_ms: float = 3.0
    decode_ms_per_token: float = 0.16
    prefill_ms_per_token: float = 0.1
    experts: int = 0
    experts_per_token: int = 0
    expert_ms: float = 0.0


@dataclass(frozen=True)
class MemoryModel:
    gpu_name: str = "Simulated H200-class GPU"
    gpu_count: int = 1
    gpu_total_bytes: int = 150_754_820_096
    weights_bytes: int = 8_540_000_000
    kv_bytes_per_token: int = 131072
    compute_buffer_bytes: int = 600_000_000
    host_rss_bytes: int = 1_200_000_000


@dataclass(frozen=True)
class PowerModel:
    """The GPUs' power draw, all of them together (``simulator.power`` integrates it into energy).

    Idle, the GPUs draw ``idle_w``. While a step runs they draw ``busy_w`` (the weights streamed, the clocks up)
    plus ``token_mj`` millijoules for every token in the batch (the arithmetic), never more than ``max_w`` (the
    board power limit). ``energy_counter`` false models a device without NVML's total-energy counter (before
    Volta, some virtual GPUs): it reports power only, as its one-second mean, the way NVML does."""

    idle_w: float = 90.0
    busy_w: float = 420.0
    max_w: float = 700.0
    token_mj: float = 10.0
    energy_counter: bool = True


@dataclass(frozen=True)
class FaultSpec:
    """One fault active in ``[start_s, start_s + duration_s)`` of server time (seconds since start).

    ``rate`` is the fraction of eligible requests hit; ``delay_s`` is the stall or slowdown length;
    ``after_tokens`` is where a stream is dropped, stalled or corrupted; ``status`` is the 5xx code;
    ``every_s`` repeats an ``engine_pause`` every so many seconds of its window (``None``: once, at its start).
    A ``slowdown`` multiplies every engine step by ``factor``, reached ``ramp_s`` after its start (linearly
    from 1; 0: at once): a co-tenant, thermal limits, a server that slows with uptime.
    """

    kind: str
    start_s: float = 0.0
    duration_s: float = float("inf")
    rate: float = 1.0
    delay_s: float = 5.0
    after_tokens: int = 4
    status: int = 500
    every_s: float | None = None
    factor: float = 2.0
    ramp_s: float = 0.0

    def active(self, t_s: float) -> bool:
        return self.start_s <= t_s < self.start_s + self.duration_s

    def pause_left(self, t_s: float) -> float:
        """An ``engine_pause``: how much of its pause is left at ``t_s`` (0 outside one). The engine pauses
        ``delay_s`` from its window's start, and again every ``every_s``."""
        if not self.active(t_s):
            return 0.0
        since = t_s - self.start_s
        if self.every_s is not None:
            since %= self.every_s
        return max(0.0, self.delay_s - since)

    def step_scale(self, t_s: float) -> float:
        """A ``slowdown``: what it multiplies an engine step by at ``t_s`` (1 outside its window)."""
        if not self.active(t_s):
            return 1.0
        reached = 1.0 if self.ramp_s <= 0 else min(1.0, (t_s - self.start_s) / self.ramp_s)
        return 1.0 + (self.factor - 1.0) * reached


@dataclass(frozen=True)
class Profile:
    name: str
    model: ModelInfo = field(default_factory=ModelInfo)
    server: ServerModel = field(default_factory=ServerModel)
    cost: CostModel = field(default_factory=CostModel)
    memory: MemoryModel = field(default_factory=MemoryModel)
    power: PowerModel = field(default_factory=PowerModel)
    eos_tokens: tuple[int, int] = (16, 256)
    faults: tuple[FaultSpec, ...] = ()
    sources: Mapping[str, str] = field(default_factory=dict)

    @property
    def is_moe(self) -> bool:
        return self.cost.experts > 0

    def with_overrides(self, **overrides: Any) -> Profile:
        """A copy with ``[server]`` keys replaced (``slots=8``, ``admission="unfair"``); None keeps a key."""
        values = {k: v for k, v in overrides.items() if v is not None}
        if not values:
            return self
        server = _build(ServerModel, {**dataclasses.asdict(self.server), **values}, "server")
        _check_server(server)
        return dataclasses.replace(self, server=server)


def _build(cls: type[Any], raw: Mapping[str, Any], section: str) -> Any:
    names = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(raw) - set(names))
    if unknown:
        raise ProfileError(f"[{section}]: unknown key(s) {', '.join(unknown)}; known: {', '.join(names)}")
    out: dict[str, Any] = {}
    for key, value in raw.items():
        f = names[key]
        default = f.default if f.default is not dataclasses.MISSING else ""
        if isinstance(default, bool) or isinstance(value, bool):
            ok = isinstance(value, bool) and isinstance(default, bool)
        elif isinstance(default, int):
            ok = isinstance(value, int)
        elif isinstance(default, float):
            ok = isinstance(value, int | float)
            value = float(value)
        else:
            ok = isinstance(value, type(default))
        if not ok:
            raise ProfileError(f"[{section}] {key}: expected {type(default).__name__}, got {value!r}")
        out[key] = value
    return cls(**out)


def _positive(section: str, key: str, value: float, allow_zero: bool = False) -> None:
    if value < 0 or (value == 0 and not allow_zero):
        raise ProfileError(f"[{section}] {key} must be {'>= 0' if allow_zero else '> 0'}, got {value}")


def _check_server(s: ServerModel) -> None:
    for key in ("slots", "ctx_tokens", "batch", "ubatch", "time_scale", "truth_history", "stream_interval"):
        _positive("server", key, getattr(s, key))
    _positive("server", "slot_ctx_tokens", s.slot_ctx_tokens, allow_zero=True)
    _positive("server", "cache_ram_tokens", s.cache_ram_tokens, allow_zero=True)
    if s.slot_ctx_tokens > s.ctx_tokens:
        raise ProfileError("[server] slot_ctx_tokens cannot exceed ctx_tokens")
    if s.admission not in ADMISSION_POLICIES:
        raise ProfileError(f"[server] admission must be one of {ADMISSION_POLICIES}, got {s.admission!r}")


def _check_cost(c: CostModel) -> None:
    for key in ("step_overhead_ms", "weights_ms", "decode_ms_per_token", "prefill_ms_per_token", "expert_ms"):
        _positive("cost", key, getattr(c, key), allow_zero=True)
    if c.step_overhead_ms + c.weights_ms + c.decode_ms_per_token <= 0:
        raise ProfileError("[cost] a decode step must cost some time")
    if c.experts < 0 or c.experts_per_token < 0 or c.experts_per_token > c.experts:
        raise ProfileError("[cost] need 0 <= experts_per_token <= experts")
    if c.experts and not c.experts_per_token:
        raise ProfileError("[cost] experts_per_token must be > 0 when experts is set")


def _check_power(p: PowerModel) -> None:
    for key in ("idle_w", "busy_w", "max_w", "token_mj"):
        value = getattr(p, key)
        if not math.isfinite(value):
            raise ProfileError(f"[power] {key} must be a finite number, got {value}")
        _positive("power", key, value, allow_zero=key == "token_mj")
    if not p.idle_w <= p.busy_w <= p.max_w:
        raise ProfileError(f"[power] need idle_w <= busy_w <= max_w, got {p.idle_w}, {p.busy_w}, {p.max_w}")


def fault_from_mapping(raw: Mapping[str, Any]) -> FaultSpec:
    if "kind" not in raw:
        raise ProfileError("fault: missing 'kind'")
    kind = raw["kind"]
    if kind not in FAULT_KINDS:
        raise ProfileError(f"fault: kind must be one of {FAULT_KINDS}, got {kind!r}")
    rest = {k: v for k, v in raw.items() if k != "kind"}
    spec: FaultSpec = _build(FaultSpec, {"kind": kind, **rest}, "faults")
    if not 0.0 <= spec.rate <= 1.0:
        raise ProfileError("fault: rate must lie in [0, 1]")
    if spec.duration_s <= 0 or spec.delay_s < 0 or spec.after_tokens < 0:
        raise ProfileError("fault: duration_s must be > 0, delay_s and after_tokens >= 0")
    if spec.every_s is not None and spec.every_s <= spec.delay_s:
        raise ProfileError("fault: every_s must be longer than delay_s (the pause would never end)")
    if not (spec.factor > 0 and math.isfinite(spec.factor)) or not (spec.ramp_s >= 0 and math.isfinite(spec.ramp_s)):
        raise ProfileError("fault: factor must be a finite number > 0 and ramp_s a finite number >= 0")
    if kind == "http_5xx" and not 500 <= spec.status <= 599:
        raise ProfileError("fault: status must be a 5xx code")
    return spec


def profile_from_mapping(raw: Mapping[str, Any], name: str = "custom") -> Profile:
    """Builds and validates a profile from parsed TOML (``[sources]`` says where numbers come from)."""
    known = {"name", "model", "server", "cost", "memory", "power", "generation", "faults", "sources"}
    unknown = sorted(set(raw) - known)
    if unknown:
        listed = ", ".join(sorted(known))
        raise ProfileError(f"unknown top-level key(s) {', '.join(unknown)}; known: {listed}")
    generation = dict(raw.get("generation", {}))
    eos = generation.pop("eos_tokens", [16, 256])
    if generation:
        raise ProfileError(f"[generation]: unknown key(s) {', '.join(sorted(generation))}")
    if not (isinstance(eos, list) and len(eos) == 2 and all(isinstance(x, int) and x > 0 for x in eos)):
        raise ProfileError("[generation] eos_tokens must be [min, max] positive integers")
    if eos[0] > eos[1]:
        raise ProfileError("[generation] eos_tokens: min > max")
    server = _build(ServerModel, raw.get("server", {}), "server")
    cost = _build(CostModel, raw.get("cost", {}), "cost")
    memory = _build(MemoryModel, raw.get("memory", {}), "memory")
    _check_server(server)
    _check_cost(cost)
    for key in ("gpu_count", "gpu_total_bytes", "weights_bytes", "kv_bytes_per_token"):
        _positive("memory", key, getattr(memory, key))
    power = _build(PowerModel, raw.get("power", {}), "power")
    _check_power(power)
    faults = raw.get("faults", [])
    if not isinstance(faults, list):
        raise ProfileError("faults must be an array of tables ([[faults]])")
    sources = raw.get("sources", {})
    if not isinstance(sources, Mapping) or not all(isinstance(v, str) for v in sources.values()):
        raise ProfileError("[sources] must map keys to strings")
    return Profile(
        name=str(raw.get("name", name)),
        model=_build(ModelInfo, raw.get("model", {}), "model"),
        server=server,
        cost=cost,
        memory=memory,
        power=power,
        eos_tokens=(eos[0], eos[1]),
        faults=tuple(fault_from_mapping(f) for f in faults),
        sources=dict(sources),
    )


def bundled_profiles() -> list[str]:
    """The names of the profiles shipped with the simulator (``dense``, ``moe``, ...), sorted."""
    return sorted(p.stem for p in PROFILE_DIR.glob("*.toml"))


def load_profile(name_or_path: str) -> Profile:
    """Loads a bundled profile by name (``dense``, ``moe``, ``starving``) or a TOML file by path."""
    bundled = PROFILE_DIR / f"{name_or_path}.toml"
    is_name = name_or_path.isidentifier() and bundled.is_file()
    path = bundled if is_name else Path(name_or_path)
    if not is_name and not path.is_file() and not path.suffix and "/" not in name_or_path:
        raise ProfileError(f"no simulator profile {name_or_path!r} (choices: {', '.join(bundled_profiles())}, "
                           "or the path of a profile TOML)")
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ProfileError(f"cannot read profile {name_or_path!r}: {exc.strerror or exc}") from exc
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"profile {path}: invalid TOML: {exc}") from exc
    return profile_from_mapping(raw, name=path.stem)
