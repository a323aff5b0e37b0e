"""Settings of the recommender service, validated once at the entry point.

Environment variables prefixed ``SATBENCH_RECOMMENDER_`` (nested with ``__``, e.g.
``SATBENCH_RECOMMENDER_POLICY__JAIN_MIN=0.8``) and a policy file (JSON or TOML, the ``policy`` table of a
session config works too) feed one ``RecommenderSettings``; ``recommender.cli`` builds it and passes it to
``create_app(settings)``. Nothing reads settings from module state.

``write_token`` (``SATBENCH_RECOMMENDER_WRITE_TOKEN``, the same variable a load generator or session reads to
send it) is the bearer token every write (``POST /runs``) needs; unset, the service makes one up at start
and nobody can write until it is handed out (``satbench recommender`` prints it, ``satbench run`` hands its
own to its own clients). Reads stay open. ``max_body_bytes``, ``max_steps``, ``max_lanes``,
``max_window_s`` and ``max_span_s`` bound what a write may ask the service to read and analyse.

``allowed_hosts`` lists the names the service answers to besides its bind address, this host's name,
``localhost``, ``127.0.0.1`` and ``::1`` (``host_names``; ``recommender.host_check``: any other ``Host`` gets
421).
``request_timeout_s`` is how long a connection may take to send a whole request (head and body) and
``max_connections`` how many the service holds open at once (``recommender.http_server``).

``prometheus_username`` and ``prometheus_password`` (``SATBENCH_RECOMMENDER_PROMETHEUS_PASSWORD``, or
``--prometheus-password-file``; never a flag's value) are the store's basic-auth credentials, sent with every
query and validity check: a store that refuses unauthenticated writes usually refuses unauthenticated reads
too. ``fingerprint_key`` (``SATBENCH_RECOMMENDER_FINGERPRINT_KEY`` or ``--fingerprint-key-file``) is the
fleet key the exporters' fingerprint series are signed with (``recommender.validity``): set, a series the
key does not verify decides nothing.
"""

from __future__ import annotations

import json
import socket
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from satbench.answer.policy import Policy
from satbench.core.config_files import validation_problems
from satbench.core.lane_evidence import ConfiguredRun
from satbench.recommender.errors import BadInput
from satbench.recommender.prometheus_source import PrometheusSourceConfig

__all__ = ["WRITE_TOKEN_ENV", "RecommenderSettings", "load_policy_file"]

WRITE_TOKEN_ENV = "SATBENCH_RECOMMENDER_WRITE_TOKEN"


class RecommenderSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SATBENCH_RECOMMENDER_", env_nested_delimiter="__",
                                      extra="forbid")

    prometheus_url: str | None = Field(default="http://127.0.0.1:9090", description="null: records only")
    host: str = "127.0.0.1"
    port: int = Field(default=9108, ge=0, le=65535)
    runs_dir: Path | None = None
    run_dirs: list[Path] = Field(default_factory=list, description="single run folders to serve besides runs_dir")
    recorded_answers: bool = Field(default=False, description="serve a finished run's recommendations.json as "
                                   "it was written, analysing only runs that have none")
    refresh_interval_s: float = Field(default=60.0, gt=0)
    validity_interval_s: float | None = Field(default=None, gt=0, description="how often answers are checked "
                                              "against the live fingerprints; null: every scrape interval")
    default_schema: Literal["v1", "v2"] = Field(default="v2", description="what GET /recommendations serves "
                                                "without ?schema=: v1 keeps an unmigrated consumer working")
    prometheus_timeout_s: float = Field(default=10.0, gt=0)
    prometheus_headers: dict[str, str] = Field(default_factory=dict, description="HTTP headers sent with every "
                                               "query (a multi-tenant store's X-Scope-OrgID)")
    prometheus_username: str | None = Field(default=None, description="basic-auth user for the store's queries")
    prometheus_password: SecretStr | None = Field(default=None, description="basic-auth password for the "
                                                  "store's queries (from the environment or a file)")
    fingerprint_key: SecretStr | None = Field(default=None, description="the fleet key fingerprint series are "
                                              "signed with; set: unsigned or badly signed series are ignored")
    ci_batches: int = Field(default=10, ge=2)
    ci_min_batches: int = Field(default=5, ge=2, description="fewest batches for a throughput interval")
    ci_min_e2e_multiple: float = Field(default=10.0, gt=0, description="shortest batch in mean latencies")
    min_batch_s: float = Field(default=2.0, gt=0, description="shortest interval batch (>= 2 scrapes)")
    scrape_interval_s: float = Field(default=1.0, gt=0, description="Prometheus scrape interval of loadgen")
    min_scrape_coverage: float = Field(default=0.8, ge=0, le=1, description="share of scrapes a window needs")
    policy: Policy = Field(default_factory=Policy)
    write_token: SecretStr | None = Field(default=None, description="the bearer token writes (POST /runs) need; "
                                          "unset: one is generated at start and writes wait until it is handed out")
    max_body_bytes: int = Field(default=8 << 20, ge=1024, le=1 << 30, description="the largest write body read")
    max_steps: int = Field(default=2048, ge=1, description="most step windows one posted run may list")
    max_lanes: int = Field(default=512, ge=1, description="most lanes one posted run may name")
    max_window_s: float = Field(default=3600.0, gt=0, description="longest step window a posted run may list")
    max_span_s: float = Field(default=7 * 86400.0, gt=0, description="longest time a posted run's windows span")
    allowed_hosts: list[str] = Field(default_factory=list, description="names the service answers to besides "
                                     "its bind address, localhost, 127.0.0.1 and ::1 ('*.example.org': every "
                                     "name under it; '*': any); any other Host header gets 421")
    request_timeout_s: float = Field(default=10.0, gt=0, le=3600, description="seconds a connection may take "
                                     "to send a whole request, head and body; then it is closed")
    max_connections: int = Field(default=8192, ge=16, description="connections held open at once; more are "
                                 "closed as they arrive (bounded by the open-files limit, less a reserve)")

    @field_validator("write_token", mode="before")
    @classmethod
    def _token_or_none(cls, value: object) -> object:
        """An empty token is no token (one is made up), never one that an empty ``Bearer`` matches; a
        short one is refused: it could be guessed."""
        text = value.get_secret_value() if isinstance(value, SecretStr) else value
        if text is None or (isinstance(text, str) and not text.strip()):
            return None
        if isinstance(text, str) and len(text.strip()) < 16:
            raise ValueError("write_token must be at least 16 characters")
        return text.strip() if isinstance(text, str) else value

    @field_validator("allowed_hosts")
    @classmethod
    def _names(cls, value: list[str]) -> list[str]:
        for name in value:
            if not name.strip() or any(c in name for c in " /@?#,"):
                raise ValueError(f"allowed_hosts: {name!r} is not a host name")
        return [name.strip() for name in value]

    def host_names(self) -> list[str]:
        """Every name the service answers to (``recommender.host_check``): its bind address, this host's own
        name (a rebinding needs the attacker's name, never ours), the loopback names, and ``allowed_hosts``."""
        return sorted({self.host, socket.gethostname(), "localhost", "127.0.0.1", "::1", *self.allowed_hosts})

    @field_validator("fingerprint_key", mode="before")
    @classmethod
    def _key_or_none(cls, value: object) -> object:
        """An empty key is no key; a short one is refused: it could be guessed."""
        text = value.get_secret_value() if isinstance(value, SecretStr) else value
        if text is None or (isinstance(text, str) and not text.strip()):
            return None
        if isinstance(text, str) and len(text.strip()) < 16:
            raise ValueError("fingerprint_key must be at least 16 characters")
        return text.strip() if isinstance(text, str) else value

    @model_validator(mode="after")
    def _password_needs_user(self) -> RecommenderSettings:
        if self.prometheus_password is not None and not self.prometheus_username:
            raise ValueError("prometheus_password is set without prometheus_username")
        return self

    def prometheus_auth(self) -> tuple[str, str] | None:
        """The store's basic-auth credentials, or None where none are configured."""
        if not self.prometheus_username:
            return None
        password = self.prometheus_password.get_secret_value() if self.prometheus_password is not None else ""
        return self.prometheus_username, password

    def fingerprint_key_bytes(self) -> bytes | None:
        return None if self.fingerprint_key is None else self.fingerprint_key.get_secret_value().encode()

    def source_config(self) -> PrometheusSourceConfig:
        return PrometheusSourceConfig(ci_batches=self.ci_batches, min_batch_s=self.min_batch_s,
                                      ci_min_e2e_multiple=self.ci_min_e2e_multiple,
                                      ci_min_batches=self.ci_min_batches,
                                      confidence=self.policy.confidence,
                                      scrape_interval_s=self.scrape_interval_s,
                                      min_scrape_coverage=self.min_scrape_coverage)


def load_policy_file(path: Path) -> Policy:
    """A policy from a JSON or TOML file: either the policy itself or a document with a ``policy`` table."""
    try:
        text = path.read_text(encoding="utf-8")
        data: Any = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (OSError, ValueError) as exc:
        raise BadInput(f"cannot read policy file {path}: {exc}") from exc
    if isinstance(data, dict) and (table := ConfiguredRun.model_validate(data).policy) is not None:
        data = table  # a session's config (or any document) with a policy table
    try:
        return Policy.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{loc}: {msg}" for loc, msg in validation_problems(exc, data, Policy))
        raise BadInput(f"invalid policy in {path}: {problems}") from None
