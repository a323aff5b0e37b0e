"""Load generator configuration: one pydantic model, validated once at the entry point, then passed down.

Why pydantic here and frozen dataclasses elsewhere: the config is the boundary where human-written TOML and
command-line overrides enter, so it must refuse every bad value *before* anything starts and name each bad
field in one message. A session orchestrator embeds ``LoadgenConfig`` in its own config, so the model has
no I/O and defaults that make a short session: two lanes of four rungs each finish in about 2-3 minutes
(warm-up 2 s, window 8-20 s, drain at most 5 s per rung).

``http_client``: ``auto`` sends plain-HTTP lanes through the kernel-timestamped socket client
(:mod:`loadgen.rawclient`) and HTTPS lanes through aiohttp; ``aiohttp`` forces aiohttp everywhere (for a
proxy setup the socket client does not speak, or to compare the two).

``max_loop_lag_s`` and ``max_idle_share`` are the client self-check (:mod:`loadgen.selfcheck`): a step timed
by client reads whose event-loop lag (or dispatch delay) p99 passes ``max_loop_lag_s``, or a kernel-timed
step whose users sat idle more than ``max_idle_share`` of their time, is marked invalid. ``gc_pause`` keeps
Python's cyclic garbage collector off while a step runs (a full collection can stall the loop for tens of
milliseconds) and collects between steps.

Overrides are a flat dict of dotted paths (``{"ladder.concurrency": [1, 2], "warmup_s": 1}``) applied on top
of the file before validation. API keys are never stored: a lane names an environment variable
(``api_key_env``) that is read when the session opens.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from core.api import ApiFlavour

__all__ = [
    "ConfigError",
    "LadderConfig",
    "LaneConfig",
    "LengthDist",
    "LoadgenConfig",
    "WorkloadConfig",
    "apply_overrides",
    "check_http_url",
    "load_config",
    "read_toml_config",
]

class ConfigError(ValueError):
    """A configuration was refused; the message names every bad field."""


def check_http_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"must be an http(s) URL with a host, got {value!r}")
    try:
        _ = parts.port
    except ValueError as exc:
        raise ValueError(f"bad port in {value!r}") from exc
    if parts.query or parts.fragment:
        raise ValueError("must not carry a query or fragment")
    return value.rstrip("/")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LaneConfig(_Model):
    """One model deployment to measure."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$", min_length=1, max_length=64)
    url: str
    api: ApiFlavour = "llamacpp"
    model: str = ""
    api_key_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    slots: int | None = Field(default=None, gt=0)

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        return check_http_url(value)

    def api_key(self) -> str | None:
        """The API key from the named environment variable (read now, never stored)."""
        return os.environ.get(self.api_key_env) if self.api_key_env else None


class LadderConfig(_Model):
    """The rungs and how to walk them (see ``loadgen.ladder.next_step``)."""

    concurrency: list[int] = Field(default_factory=lambda: [1, 2, 4, 8])
    plateau_stop: bool = False
    plateau_min_gain: float = Field(default=0.10, ge=0.0, le=10.0)
    plateau_patience: int = Field(default=1, ge=1)
    refine: bool = False
    refine_steps: int = Field(default=1, ge=0, le=8)

    @field_validator("concurrency")
    @classmethod
    def _check_ladder(cls, value: list[int]) -> list[int]:
        if not value:
            raise ValueError("ladder must list at least one concurrency")
        bad = [c for c in value if c <= 0]
        if bad:
            raise ValueError(f"concurrency must be positive, got {bad}")
        if len(set(value)) != len(value):
            raise ValueError(f"concurrency rungs repeat: {value}")
        return value


class LengthDist(_Model):
    """A token-length distribution: ``fixed`` (value), ``uniform`` (low..high), ``lognormal`` (median, sigma).

    Draws are clipped to ``[low, high]`` for every kind but ``fixed``.
    """

    kind: Literal["fixed", "uniform", "lognormal"] = "fixed"
    value: int = Field(default=64, ge=1)
    low: int = Field(default=1, ge=1)
    high: int = Field(default=4096, ge=1)
    median: float = Field(default=64.0, gt=0)
    sigma: float = Field(default=0.5, ge=0)

    @model_validator(mode="after")
    def _check_bounds(self) -> LengthDist:
        if self.high < self.low:
            raise ValueError(f"high ({self.high}) must be >= low ({self.low})")
        return self


class WorkloadConfig(_Model):
    """What each user sends: seeded, so the same config replays the same requests."""

    seed: int = 0
    prompt_tokens: LengthDist = Field(default_factory=lambda: LengthDist(value=64))
    output_tokens: LengthDist = Field(default_factory=lambda: LengthDist(value=64))
    ignore_eos: bool = True
    temperature: float = Field(default=0.0, ge=0.0)
    prefill_probe_share: float = Field(default=0.0, ge=0.0, le=1.0)
    prefill_probe_tokens: int = Field(default=1024, ge=1)


class LoadgenConfig(_Model):
    """Everything the ladder walk needs. Defaults make a short session (see module docstring)."""

    lanes: list[LaneConfig] = Field(default_factory=list)
    ladder: LadderConfig = Field(default_factory=LadderConfig)
    workload: WorkloadConfig = Field(default_factory=WorkloadConfig)
    warmup_s: float = Field(default=2.0, ge=0.0)
    min_window_s: float = Field(default=8.0, gt=0.0)
    max_window_s: float = Field(default=20.0, gt=0.0)
    min_requests: int = Field(default=8, ge=1)
    ci_rel_bound: float = Field(default=0.05, gt=0.0, le=1.0)
    batch_s: float | None = Field(default=None, gt=0.0)
    drain: Literal["wait", "cancel"] = "wait"
    drain_timeout_s: float = Field(default=5.0, ge=0.0)
    request_timeout_s: float = Field(default=120.0, gt=0.0)
    connect_timeout_s: float = Field(default=5.0, gt=0.0)
    max_event_bytes: int = Field(default=1 << 20, ge=1024)
    http_client: Literal["auto", "aiohttp"] = "auto"
    max_loop_lag_s: float = Field(default=0.010, gt=0.0)
    max_idle_share: float = Field(default=0.05, gt=0.0, le=1.0)
    gc_pause: bool = True
    metrics_port: int | None = Field(default=0, ge=0, le=65535)
    metrics_host: str = Field(default="127.0.0.1", min_length=1)
    recommender_url: str | None = None
    progress: bool | None = None

    @model_validator(mode="after")
    def _check_session(self) -> LoadgenConfig:
        problems = []
        if self.max_window_s < self.min_window_s:
            problems.append(f"max_window_s ({self.max_window_s}) is shorter than min_window_s "
                            f"({self.min_window_s})")
        if self.max_window_s < self.warmup_s:
            problems.append(f"max_window_s ({self.max_window_s}) is shorter than warmup_s ({self.warmup_s})")
        names = [lane.name for lane in self.lanes]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            problems.append(f"duplicate lane names: {', '.join(dupes)}")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @field_validator("recommender_url")
    @classmethod
    def _check_recommender(cls, value: str | None) -> str | None:
        if value is None:
            return None
        return check_http_url(value)

    def lane(self, name: str) -> LaneConfig:
        for lane in self.lanes:
            if lane.name == name:
                return lane
        raise KeyError(name)


def apply_overrides(data: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Returns a copy of ``data`` with each dotted-path override set (``"ladder.concurrency": [1, 2]``)."""
    out: dict[str, Any] = _deep_copy(data)
    for path, value in overrides.items():
        keys = path.split(".")
        node = out
        for key in keys[:-1]:
            child = node.get(key)
            if not isinstance(child, dict):
                child = {}
                node[key] = child
            node = child
        node[keys[-1]] = value
    return out


def _deep_copy(data: dict[str, Any]) -> dict[str, Any]:
    return {k: _deep_copy(v) if isinstance(v, dict) else v for k, v in data.items()}


def format_validation_error(exc: ValidationError, what: str = "loadgen") -> str:
    """One line per bad field, named by its dotted path: ``invalid <what> config:\n  ladder.concurrency: ...``."""
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(config)"
        lines.append(f"  {loc}: {err['msg']}")
    return f"invalid {what} config:\n" + "\n".join(lines)


def read_toml_config(path: Path, what: str, error: type[ValueError]) -> dict[str, Any]:
    """The TOML table of a config file; ``error`` names the file and the cause when it cannot be read."""
    try:
        with Path(path).open("rb") as fh:
            return tomllib.load(fh)
    except OSError as exc:
        raise error(f"cannot read {what} config {path}: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{what} config {path} is not valid TOML: {exc}") from exc


def load_config(path: Path | None, overrides: dict[str, Any] | None = None) -> LoadgenConfig:
    """Reads a TOML file (or nothing), applies dotted overrides, validates. Raises ``ConfigError``."""
    data: dict[str, Any] = {}
    if path is not None:
        data = read_toml_config(path, "loadgen", ConfigError)
        if isinstance(data.get("loadgen"), dict) and "lanes" not in data:
            data = data["loadgen"]
    data = apply_overrides(data, overrides or {})
    try:
        return LoadgenConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc)) from exc
