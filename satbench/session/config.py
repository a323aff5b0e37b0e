"""The session config: one pydantic ``SessionConfig`` (TOML at the boundary), validated before anything runs.

A session needs more than the load generator: where each lane's runtime comes from (an embedded simulator
started here, a real ``llama-server`` started here from a model in ``model_dir``, or an external endpoint
already running), whether to start Prometheus and the recommender or use running ones, and where the run
folder goes. The load generator's own settings are embedded as loadgen's ``LoadgenConfig`` (its ``lanes``
are filled in by the session once each runtime's URL is known), so a ladder or a timing is configured once.

With no file at all the session is the README's ``make run``: two simulator lanes (``dense``, ``moe``),
ladder 1/2/4/8, a local Prometheus and recommender; timings shortened so that it finishes in about two
minutes on a small machine (``DEFAULT_LOADGEN``). The event-loop lag limit of lanes timed by the client's
reads (HTTPS) is relaxed to 50 ms there because the default session runs the runtimes, exporters and
Prometheus on the same few cores as the load generator; plain-HTTP lanes are timed by kernel receive stamps
and judged by their users' idle share instead (:mod:`loadgen.selfcheck`). ``min_requests`` (12) stays
above the recommender policy's ``min_requests_per_step`` (10), so a slow rung's window is stretched (up to
16 s) until it counts. Against real HTTPS endpoints, set ``loadgen.max_loop_lag_s`` back to loadgen's strict
default. Output lengths are drawn from 48..80 tokens
(mean 64) so that closed-loop users do not run in lockstep, which no real traffic does: with fixed lengths
every user finishes and re-enters prefill at the same instant, and the decode-stall verdict would measure
that artefact. API keys are never part of the config: a lane
names the environment variable that holds its key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from loadgen.config import (
    ApiFlavour,
    LoadgenConfig,
    apply_overrides,
    check_http_url,
    format_validation_error,
    read_toml_config,
)
from satbench.evidence import refuse_home_path

__all__ = [
    "DEFAULT_LOADGEN",
    "LaneRuntime",
    "PrometheusSection",
    "RecommenderSection",
    "SessionConfig",
    "SessionConfigError",
    "load_session_config",
]

DEFAULT_LOADGEN: dict[str, Any] = {
    "ladder": {"concurrency": [1, 2, 4, 8]},
    "warmup_s": 2.0,
    "min_window_s": 8.0,
    "max_window_s": 16.0,
    "min_requests": 12,
    "drain_timeout_s": 3.0,
    "max_loop_lag_s": 0.05,
    "workload": {"output_tokens": {"kind": "uniform", "low": 48, "high": 80}},
}


class SessionConfigError(ValueError):
    """The session config was refused; the message names every bad field."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LaneRuntime(_Model):
    """One lane and where its runtime comes from."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$", min_length=1, max_length=64)
    runtime: Literal["simulator", "llamacpp", "external"] = "simulator"
    profile: str = "dense"
    url: str | None = None
    api: ApiFlavour = "llamacpp"
    model: str = ""
    model_file: str | None = None
    parallel: int = Field(default=4, gt=0, le=256)
    ctx_size: int = Field(default=4096, gt=0)
    batch: int = Field(default=2048, gt=0)
    ubatch: int = Field(default=512, gt=0)
    threads: int | None = Field(default=None, gt=0)
    server_args: list[str] = Field(default_factory=list)
    api_key_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    slots: int | None = Field(default=None, gt=0)

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str | None) -> str | None:
        return None if value is None else check_http_url(value)

    @model_validator(mode="after")
    def _check_runtime(self) -> LaneRuntime:
        if self.runtime == "simulator":
            _check_profile(self.profile)
        if self.runtime == "external" and not self.url:
            raise ValueError(f"lane {self.name}: an external runtime needs a url")
        if self.runtime != "external" and self.url:
            raise ValueError(
                f"lane {self.name}: url is only for runtime = 'external' (the session picks ports)"
            )
        if self.runtime == "llamacpp" and not self.model_file:
            raise ValueError(f"lane {self.name}: a llamacpp runtime needs model_file (a GGUF in model_dir)")
        return self


class PrometheusSection(_Model):
    """``url`` set: use that Prometheus (it must scrape the lanes' exporters). Otherwise one is started."""

    url: str | None = None
    binary: str = "prometheus"
    scrape_interval_s: float = Field(default=1.0, gt=0.0, le=60.0)
    start_timeout_s: float = Field(default=30.0, gt=0.0)

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str | None) -> str | None:
        return None if value is None else check_http_url(value)


class RecommenderSection(_Model):
    """``url`` set: use that recommender service. Otherwise one is started on a free loopback port."""

    url: str | None = None
    start_timeout_s: float = Field(default=30.0, gt=0.0)

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str | None) -> str | None:
        return None if value is None else check_http_url(value)


def _check_profile(profile: str) -> None:
    from simulator.profile import ProfileError, load_profile

    try:
        load_profile(profile)
    except ProfileError as exc:
        raise ValueError(f"profile: {exc}") from exc


def _default_lanes() -> list[LaneRuntime]:
    return [LaneRuntime(name="dense", profile="dense"), LaneRuntime(name="moe", profile="moe")]


class SessionConfig(_Model):
    lanes: list[LaneRuntime] = Field(default_factory=_default_lanes)
    loadgen: LoadgenConfig = Field(default_factory=lambda: LoadgenConfig.model_validate(DEFAULT_LOADGEN))
    prometheus: PrometheusSection = Field(default_factory=PrometheusSection)
    recommender: RecommenderSection = Field(default_factory=RecommenderSection)
    policy: dict[str, Any] = Field(default_factory=dict)
    model_dir: Path | None = None
    out_dir: Path = Path("runs")
    start_timeout_s: float = Field(default=30.0, gt=0.0)

    @field_validator("model_dir")
    @classmethod
    def _refuse_home(cls, value: Path | None) -> Path | None:
        return None if value is None else refuse_home_path(value)

    @model_validator(mode="after")
    def _check(self) -> SessionConfig:
        names = [lane.name for lane in self.lanes]
        if not names:
            raise ValueError("a session needs at least one lane")
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate lane names: {', '.join(dupes)}")
        if self.loadgen.lanes:
            raise ValueError("put lanes in [[lanes]] at the top level, not in [loadgen]")
        if any(lane.runtime == "llamacpp" for lane in self.lanes) and self.model_dir is None:
            raise ValueError("llamacpp lanes need model_dir")
        return self

    def lane(self, name: str) -> LaneRuntime:
        for lane in self.lanes:
            if lane.name == name:
                return lane
        raise KeyError(name)


def load_session_config(path: Path | None, overrides: dict[str, Any] | None = None) -> SessionConfig:
    """Reads TOML (or nothing: the default session), applies dotted overrides, validates."""
    data: dict[str, Any] = {}
    if path is not None:
        data = read_toml_config(path, "session", SessionConfigError)
    section = data.get("loadgen") or {}
    if not isinstance(section, dict):
        raise SessionConfigError("[loadgen] must be a table")
    data = {**data, "loadgen": _merge(DEFAULT_LOADGEN, section)}
    data = apply_overrides(data, overrides or {})
    try:
        return SessionConfig.model_validate(data)
    except ValidationError as exc:
        raise SessionConfigError(format_validation_error(exc, "session")) from exc


def _merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        out[key] = (
            _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
        )
    return out
