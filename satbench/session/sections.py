"""The session config's sections beside its lanes (``satbench.session.config``, which validates the whole and
re-exports these): the nodes' labels, the fleet's spread, the Prometheus (started or given, its remote writes and
the credentials of each), and the recommender. Frozen, every key known, every float finite.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from satbench.core.config_files import MAX_SECONDS, HttpUrl
from satbench.core.lanes import NAME_PATTERN

__all__ = ["FleetSection", "NodeSection", "PrometheusSection", "RecommenderSection", "SectionModel"]

_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


class SectionModel(BaseModel):
    """A config section: frozen, every key known (a misspelt one is an error), every float finite."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class NodeSection(SectionModel):
    """One node of a fleet (``[[nodes]]``): a runtime host, its labels (a GPU class...) and its lanes."""

    name: str = Field(pattern=NAME_PATTERN, min_length=1, max_length=64)
    labels: dict[str, str] = Field(default_factory=dict)
    lanes: list[dict[str, Any]] = Field(min_length=1)  # each validated as a LaneRuntime of this node

    @field_validator("labels")
    @classmethod
    def _check_labels(cls, value: dict[str, str]) -> dict[str, str]:
        bad = sorted(k for k in value if not _LABEL_NAME.match(k) or k in ("node", "lane"))
        if bad:
            raise ValueError(f"not usable as node label names: {', '.join(bad)} (Prometheus label names; "
                             "node and lane are the answer's own)")
        return value


class FleetSection(SectionModel):
    """``[fleet]``: lanes from Prometheus file-based service discovery besides ``[[nodes]]``.

    Each ``file_sd`` file is a Prometheus ``file_sd_configs`` target file (JSON; YAML with PyYAML): every
    target is a lane's exporter (``host:port``) with the labels ``node``, ``lane`` and ``url`` (the runtime's
    base URL); optional ``api`` and ``model`` are the lane's, every other label (not ``__``-prefixed) is a
    node label. The lanes are ``external``: the session measures them and starts none."""

    file_sd: list[Path] = Field(default_factory=list)


class PrometheusSection(SectionModel):
    """``url`` set: use that Prometheus (it must scrape the lanes' exporters). Otherwise one is started.

    ``remote_write``: URLs the started Prometheus forwards every sample to (a fleet's central PromQL store,
    docs/fleet-store.md); a Prometheus given by ``url`` is configured by its owner instead. A store that takes
    writes only with credentials gets ``remote_write_username`` and ``remote_write_password_file`` as basic
    auth: the rendered ``prometheus.yml`` names the file (Prometheus reads it), so the password is in no
    command line, config or evidence file. A URL with a password in it is refused for that reason.

    ``username`` and ``password_file``: the basic-auth credentials of a Prometheus or store given by ``url``
    that wants them for reads (a fleet's, behind its gate: docs/fleet-store.md, "Credentials"). Every reader of
    it in the session sends them: the waits for its scrapes, the recommender the session starts
    (``--prometheus-username``, ``--prometheus-password-file``) and the in-process analysis. The password is
    read from the file when the session starts and is in no command line, manifest or evidence file; a
    Prometheus that refuses the session's reads (401/403) stops it before anything starts, in one line.
    """

    url: HttpUrl | None = None
    binary: str = "prometheus"
    scrape_interval_s: float = Field(default=1.0, gt=0.0, le=60.0)
    start_timeout_s: float = Field(default=30.0, gt=0.0, le=MAX_SECONDS)
    remote_write: list[HttpUrl] = Field(default_factory=list)
    remote_write_username: str | None = Field(default=None, min_length=1, max_length=256)
    remote_write_password_file: Path | None = None
    username: str | None = Field(default=None, min_length=1, max_length=256)
    password_file: Path | None = None

    @field_validator("url")
    @classmethod
    def _no_password_in_read_url(cls, value: HttpUrl | None) -> HttpUrl | None:
        if value is not None and urlsplit(str(value)).password:
            raise ValueError("the URL carries a password: it would be written into the run's manifest and the "
                             "recommender's command line; give username and password_file instead")
        return value

    @field_validator("remote_write")
    @classmethod
    def _no_password_in_url(cls, value: list[HttpUrl]) -> list[HttpUrl]:
        if any(urlsplit(url).password for url in value):
            raise ValueError("a remote_write URL carries a password: it would be written into the run's "
                             "prometheus.yml; give remote_write_username and remote_write_password_file instead")
        return value

    @field_validator("remote_write_password_file", "password_file")
    @classmethod
    def _readable(cls, value: Path | None) -> Path | None:
        if value is None:
            return None
        path = value.expanduser().resolve()
        if not path.is_file() or not os.access(path, os.R_OK):
            raise ValueError(f"{value} is not a readable file")
        return path

    @model_validator(mode="after")
    def _auth_whole(self) -> PrometheusSection:
        if (self.remote_write_username is None) != (self.remote_write_password_file is None):
            raise ValueError("remote_write_username and remote_write_password_file go together")
        if self.remote_write_username is not None and not self.remote_write:
            raise ValueError("remote_write_username is set but remote_write names no URL")
        if (self.username is None) != (self.password_file is None):
            raise ValueError("username and password_file go together (the read credentials of prometheus.url)")
        if self.username is not None and self.url is None:
            raise ValueError("username is set but url is not: the Prometheus a session starts is its own, on "
                             "loopback, and takes no credentials")
        return self

    def read_auth(self) -> tuple[str, str] | None:
        """``(username, password)`` for reading the Prometheus at ``url``, the password read from its file now;
        None without credentials. ``ValueError`` naming the setting for a file that cannot be read or is
        empty."""
        if self.username is None or self.password_file is None:
            return None
        try:
            password = self.password_file.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"prometheus.password_file {self.password_file}: "
                             f"{getattr(exc, 'strerror', None) or exc}") from exc
        if not password:
            raise ValueError(f"prometheus.password_file {self.password_file}: the file is empty")
        return self.username, password

    def remote_write_auth(self) -> tuple[str, Path] | None:
        """``(username, password_file)`` for the remote_write section, or None."""
        if self.remote_write_username is None or self.remote_write_password_file is None:
            return None
        return self.remote_write_username, self.remote_write_password_file


class RecommenderSection(SectionModel):
    """``url`` set: use that recommender service. Otherwise one is started on a free loopback port."""

    url: HttpUrl | None = None
    start_timeout_s: float = Field(default=30.0, gt=0.0, le=MAX_SECONDS)
