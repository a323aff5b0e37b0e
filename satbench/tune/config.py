"""The tune config: a session config (``satbench.session.config``) plus a ``[tune]`` table, validated once.

The file is read here: its ``[tune]`` table (and ``--set tune.*`` overrides) becomes ``TuneConfig``, and the
rest goes to the session loader unchanged, every table flattened to dotted overrides so that ``[loadgen]``
still merges key by key over the session's defaults, exactly as ``satbench run`` reads it. A refusal is one
line naming the setting (``tune.parallel: ...``), as every config of this project says it
(``core.config_files``).

``[tune]`` keys:

- ``lanes``: the lanes to tune (default: every lane whose runtime the session starts, ``simulator`` or
  ``llamacpp``; an ``external`` lane cannot be tuned, its server is not ours to restart);
- ``parallel`` (default 2, 4, 8, 16), ``ubatch`` (default 128, 256, 512), ``batch`` (default: equal to each
  ubatch; when listed, every pair with batch >= ubatch is a candidate);
- ``ctx_per_slot``: each slot's context (``-c`` is this times ``parallel``); default from the server's own
  count of the workload's longest request plus its longest output and ``ctx_margin`` (``satbench.tune.context``);
- ``ctx_margin``: tokens of headroom over that count (default 64);
- ``ladder``: the rungs each walk lists before the extension doubles them (default 1, 2);
- ``prune``: skip the candidates a measured one dominates (default true; false walks the whole grid);
- ``memory_bytes``: the memory a candidate may use (CPU or unified memory, or a share of a GPU); unset, the
  free memory of the GPUs seen, or a simulator's simulated ones; ``memory_reserve_bytes`` kept free of it
  (default 1 GiB, llama.cpp's ``--fit-target``); ``kv_layout``: ``auto`` (default) adds a unified-KV candidate
  where the split one cannot fit, ``split`` never does (``satbench.tune.memory``, ``satbench.tune.grid``);
- ``evidence_walks``: walks the tune may add per lane where the comparison that decides the winner is not
  significant, each with windows ``evidence_window_factor`` (default 2) times longer than the last (default
  4; 0 decides at once by the default) (``satbench.tune.evidence``).

The grid owns what it searches. A lane's ``server_args`` may not set ``-np``/``--parallel``, ``-c``/``--ctx-size``,
``-b``/``--batch-size``, ``-ub``/``--ubatch-size``, the KV layout (``-kvu``, ``-no-kvu``, ``--kv-unified-per-slot``)
or ``--fit`` (the tune sets ``--fit off``, so a candidate that does not fit is refused by the server rather than
served with layers moved to the CPU): such a config is refused in one line naming the flag, because llama-server
keeps the last value of a flag given twice and the server would not be the candidate. Refused rather than
overridden: a flag the operator wrote and the tune silently dropped would be a second way to be wrong.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from satbench.core.config_files import FieldError, read_toml_config, validation_problems
from satbench.loadgen.config import WorkloadConfig
from satbench.loadgen.workload import max_prompt_tokens
from satbench.session.config import LaneRuntime, SessionConfig, SessionConfigError, load_session_config

__all__ = ["OWNED_FLAGS", "TuneConfig", "TuneConfigError", "TuneSetup", "default_ctx_per_slot",
           "load_tune_config", "owned_flag"]

# llama-server's spellings (common/arg.cpp) of what the tune sets on every candidate, and what sets each
OWNED_FLAGS: dict[str, str] = {
    **dict.fromkeys(("-np", "--parallel"), "tune.parallel"),
    **dict.fromkeys(("-c", "--ctx-size"), "tune.ctx_per_slot"),
    **dict.fromkeys(("-b", "--batch-size"), "tune.batch"),
    **dict.fromkeys(("-ub", "--ubatch-size"), "tune.ubatch"),
    **dict.fromkeys(("-kvu", "--kv-unified", "-no-kvu", "--no-kv-unified", "--kv-unified-per-slot"),
                    "tune.kv_layout"),
    **dict.fromkeys(("-fit", "--fit"), "the tune's --fit off"),
}


class TuneConfigError(ValueError):
    """The tune config was refused; the message is one line naming the setting."""


def _rungs(name: str, value: list[int], high: int) -> list[int]:
    if not value:
        raise ValueError(f"list at least one {name} value")
    bad = [v for v in value if v < 1 or v > high]
    if bad:
        raise ValueError(f"values must lie in 1..{high}, got {bad}")
    if len(set(value)) != len(value):
        raise ValueError(f"values repeat: {value}")
    return value


class TuneConfig(BaseModel):
    """The ``[tune]`` table (module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    lanes: list[str] | None = None
    parallel: list[int] = Field(default_factory=lambda: [2, 4, 8, 16])
    ubatch: list[int] = Field(default_factory=lambda: [128, 256, 512])
    batch: list[int] | None = None
    ctx_per_slot: int | None = Field(default=None, ge=16)
    ctx_margin: int = Field(default=64, ge=0)
    ladder: list[int] = Field(default_factory=lambda: [1, 2])
    prune: bool = True
    memory_bytes: int | None = Field(default=None, ge=1)
    memory_reserve_bytes: int = Field(default=1 << 30, ge=0)
    kv_layout: Literal["auto", "split"] = "auto"
    evidence_walks: int = Field(default=4, ge=0, le=64)
    evidence_window_factor: float = Field(default=2.0, gt=1.0, le=16.0)

    @field_validator("parallel")
    @classmethod
    def _check_parallel(cls, value: list[int]) -> list[int]:
        return _rungs("parallel", value, 256)

    @field_validator("ubatch", "batch")
    @classmethod
    def _check_batches(cls, value: list[int] | None) -> list[int] | None:
        return None if value is None else _rungs("batch size", value, 65536)

    @field_validator("ladder")
    @classmethod
    def _check_ladder(cls, value: list[int]) -> list[int]:
        return _rungs("concurrency", value, 64)

    @model_validator(mode="after")
    def _check_pairs(self) -> TuneConfig:
        if self.batch is not None and not self.pairs():
            raise FieldError([("batch", f"no batch {self.batch} is >= any ubatch {self.ubatch} "
                               "(llama-server needs ubatch <= batch)")])
        return self

    def pairs(self) -> list[tuple[int, int]]:
        """Every (batch, ubatch) the grid walks: batch = ubatch by default, else each batch >= ubatch."""
        if self.batch is None:
            return [(u, u) for u in self.ubatch]
        return [(b, u) for b in self.batch for u in self.ubatch if u <= b]


@dataclass(frozen=True, slots=True)
class TuneSetup:
    """What ``satbench tune`` runs: the session it builds on, its ``[tune]`` table and the lanes to tune.
    ``ctx_per_slot``: the nominal context (``default_ctx_per_slot``), or the config's where it sets one; the
    tune replaces a nominal one by the server's count per lane."""

    session: SessionConfig
    tune: TuneConfig
    lanes: tuple[LaneRuntime, ...]
    ctx_per_slot: int


def owned_flag(server_args: list[str]) -> tuple[str, str] | None:
    """The first flag of ``server_args`` the tune owns (``OWNED_FLAGS``), with the key that owns it."""
    for arg in server_args:
        name = arg.split("=", 1)[0] if arg.startswith("--") else arg
        if name in OWNED_FLAGS:
            return name, OWNED_FLAGS[name]
    return None


def default_ctx_per_slot(workload: WorkloadConfig) -> int:
    """The nominal longest request's context (longest prompt, probe included, plus longest output), rounded up
    to 256: the fallback where no server can count it (``satbench.tune.context``)."""
    out = workload.output_tokens
    longest_out = out.value if out.kind == "fixed" else out.high
    need = max_prompt_tokens(workload) + longest_out
    if workload.conversation is not None:  # each turn repeats the exchange so far
        need *= workload.conversation.turns
    return 256 * math.ceil(need / 256)


def _flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Tables as dotted paths to their values, so a file's table merges over defaults key by key."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(_flatten(value, path + "."))
        else:
            out[path] = value
    return out


def _tune_table(path: Path | None, overrides: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    data = read_toml_config(path, "tune", TuneConfigError) if path is not None else {}
    table = data.pop("tune", {})
    if not isinstance(table, dict):
        raise TuneConfigError("invalid tune config: tune: must be a table ([tune])")
    table = dict(table)
    session = _flatten(data)
    for key, value in overrides.items():
        if key.startswith("tune."):
            table[key.removeprefix("tune.")] = value
        else:
            session[key] = value
    return table, session


def _selected_lanes(session: SessionConfig, tune: TuneConfig) -> tuple[LaneRuntime, ...]:
    """The lanes ``tune.lanes`` names, by lane key (``node/lane``), or by bare name where one node serves it."""
    known = {lane.key: lane for lane in session.lanes}
    if tune.lanes is None:
        chosen = [lane for lane in session.lanes if lane.started]  # the tune restarts their servers
        if not chosen:
            raise TuneConfigError("invalid tune config: tune.lanes: every lane is external; satbench tune starts "
                                  "each candidate's server itself and cannot restart an external one (give a "
                                  "simulator or llamacpp lane)")
        return tuple(chosen)
    out: list[LaneRuntime] = []
    for name in tune.lanes:
        lane = known.get(name)
        if lane is None:
            named = [key for key, lane in known.items() if lane.name == name]
            if len(named) > 1:
                raise TuneConfigError(f"invalid tune config: tune.lanes: {name!r} is a lane of several nodes "
                                      f"({', '.join(named)}): name one by its key")
            if not named:
                raise TuneConfigError(f"invalid tune config: tune.lanes: no lane {name!r} "
                                      f"(lanes: {', '.join(known)})")
            lane = known[named[0]]
        if any(done.key == lane.key for done in out):
            raise TuneConfigError(f"invalid tune config: tune.lanes: {name!r} names lane {lane.key} again")
        if not lane.started:
            raise TuneConfigError(f"invalid tune config: tune.lanes: lane {lane.key} is external; satbench tune starts "
                                  "each candidate's server itself and cannot restart an external one")
        out.append(lane)
    return tuple(out)


def _check_server_args(lanes: tuple[LaneRuntime, ...]) -> None:
    for lane in lanes:
        hit = owned_flag(lane.server_args)
        if hit is not None:
            flag, key = hit
            raise TuneConfigError(f"invalid tune config: lanes.{lane.key}.server_args: sets {flag}, which the tune "
                                  f"sets on every candidate ({key}); llama-server keeps the last of a flag given "
                                  "twice, so every candidate would be that one server: remove it")


def load_tune_config(path: Path | None, overrides: dict[str, Any] | None = None) -> TuneSetup:
    """Reads the file (or nothing: the default session), splits off ``[tune]``, validates both."""
    table, session_overrides = _tune_table(path, overrides or {})
    try:
        tune = TuneConfig.model_validate(table)
    except ValidationError as exc:
        problems = validation_problems(exc, table, TuneConfig)
        raise TuneConfigError("invalid tune config: " + "; ".join(f"tune.{loc}: {msg}" for loc, msg in problems)
                              ) from None
    try:
        session = load_session_config(None, session_overrides)
    except SessionConfigError as exc:
        raise TuneConfigError(str(exc)) from None
    lanes = _selected_lanes(session, tune)
    _check_server_args(lanes)
    ctx = tune.ctx_per_slot or default_ctx_per_slot(session.loadgen.workload)
    return TuneSetup(session=session, tune=tune, lanes=lanes, ctx_per_slot=ctx)
