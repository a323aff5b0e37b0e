"""Writes a run's ``prometheus.yml``: scrape jobs for exporters, loadgen and recommender, plus rule files.

The session orchestrator calls :func:`render_prometheus_config` with the targets it started; the committed
``prometheus/prometheus.yml`` is the hand-written equivalent for a fixed stack. Deployment facts (``lane``,
``node``) are target labels, never exporter flags. Only exporter targets should carry ``lane``: loadgen
and recommender series carry their own ``lane`` label, which a target label of the same name would rename
to ``exported_lane``.

One exporter of a llama-server in router mode serves every model; a lane of model M scrapes it with
``params={"model": M}`` (``GET /metrics?model=M``), rendered as the ``__param_model`` target label that
Prometheus turns into the scrape's query string and then drops, so the lane's series carry only its own
target labels (``lane``, ``node``) plus the exporter's ``model`` label. Targets of one job may differ in
params (same address, several lanes), so the job names the rules match stay the same.

The output is YAML written by hand (every scalar JSON-quoted, which YAML reads verbatim), so the runtime
needs no YAML library. Scrape timeout equals the interval (Prometheus requires timeout <= interval); the
exporter answers within its own budget well before that.

``remote_write`` URLs (``[prometheus] remote_write`` of the session config) make this Prometheus forward
every sample it stores, rule results included, to a central PromQL store (VictoriaMetrics, Mimir, Thanos
Receive; docs/fleet-store.md) that the recommender can then be pointed at instead. Their
``queue_config.batch_send_deadline`` is short (``REMOTE_WRITE_DEADLINE_S``): Prometheus' default (5 s) holds
a partly filled batch that long, and a session of a few seconds per window would end, and the store be asked,
before its last samples were sent. ``remote_write_auth`` (user, password file) adds ``basic_auth`` with a
``password_file``: Prometheus reads the password from that file, so it is in no rendered config.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

__all__ = [
    "EXPORTER_JOB",
    "LOADGEN_JOB",
    "RECOMMENDER_JOB",
    "REMOTE_WRITE_DEADLINE_S",
    "ScrapeTarget",
    "format_duration",
    "render_prometheus_config",
]

# The one source of the scrape job names: compose/prometheus.yml, prometheus/prometheus.yml, the docs'
# example and every job= matcher of the rules use these (tests/prometheus/test_job_names.py).
EXPORTER_JOB = "satbench_exporter"
LOADGEN_JOB = "satbench_loadgen"
RECOMMENDER_JOB = "satbench_recommender"

# Longest a partly filled remote_write batch waits before it is sent (Prometheus' default is 5 s).
REMOTE_WRITE_DEADLINE_S = 1.0

_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_ADDRESS = re.compile(r"^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+):[0-9]{1,5}$")


@dataclass(frozen=True)
class ScrapeTarget:
    """One ``host:port`` to scrape in ``job``, with its target labels (e.g. ``lane``, ``node``) and the query
    parameters of its scrape (``params={"model": M}`` for one model of a router exporter)."""

    job: str
    address: str
    labels: Mapping[str, str] = field(default_factory=dict)
    metrics_path: str = "/metrics"
    params: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not _LABEL.match(self.job):
            raise ValueError(f"job name {self.job!r} must match {_LABEL.pattern}")
        if not _ADDRESS.match(self.address):
            raise ValueError(f"target address {self.address!r} must be host:port (no scheme, no path)")
        for name in self.labels:
            if not _LABEL.match(name) or name.startswith("__"):
                raise ValueError(f"target label {name!r} must match {_LABEL.pattern} and not start with __")
        if not self.metrics_path.startswith("/"):
            raise ValueError(f"metrics_path {self.metrics_path!r} must start with /")
        for name, value in self.params.items():
            if not _LABEL.match(name):
                raise ValueError(f"scrape param {name!r} must match {_LABEL.pattern}")
            if not isinstance(value, str) or not value:
                raise ValueError(f"scrape param {name!r} needs a non-empty string value, got {value!r}")

    @property
    def static_labels(self) -> dict[str, str]:
        """The target's labels as written in ``static_configs``: its labels plus ``__param_<name>``."""
        return {**self.labels, **{f"__param_{name}": value for name, value in self.params.items()}}


def format_duration(seconds: float) -> str:
    """A Prometheus duration: whole seconds as ``"1s"``, anything else in whole milliseconds."""
    if seconds <= 0:
        raise ValueError(f"a duration must be positive, got {seconds}")
    ms = round(seconds * 1000)
    if ms < 1:
        raise ValueError(f"a duration must be at least 1ms, got {seconds}")
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def _q(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


def _check_remote_write(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"remote_write URL {url!r} must be http(s)://host[:port]/path")
    return url


def render_prometheus_config(
    targets: Sequence[ScrapeTarget],
    rule_files: Sequence[Path],
    scrape_interval_s: float = 1.0,
    remote_write: Sequence[str] = (),
    remote_write_deadline_s: float = REMOTE_WRITE_DEADLINE_S,
    remote_write_auth: tuple[str, Path] | None = None,
) -> str:
    """The text of a ``prometheus.yml`` scraping ``targets`` (grouped by job), loading ``rule_files`` and
    forwarding every stored sample to each ``remote_write`` URL (batches sent within
    ``remote_write_deadline_s``, with basic auth from ``remote_write_auth``: user, absolute password file)."""
    if remote_write_auth is not None and not remote_write_auth[1].is_absolute():
        raise ValueError(f"remote_write password file {remote_write_auth[1]} must be an absolute path")
    interval = format_duration(scrape_interval_s)
    urls = [_check_remote_write(url) for url in remote_write]
    jobs: dict[str, list[ScrapeTarget]] = {}
    for target in targets:
        jobs.setdefault(target.job, []).append(target)
    lines = [
        "# Generated by satbench (exporter.promconfig.render_prometheus_config); edits are overwritten.",
        "global:",
        f"  scrape_interval: {interval}",
        f"  scrape_timeout: {interval}",
        f"  evaluation_interval: {interval}",
    ]
    if rule_files:
        lines.append("rule_files:")
        lines += [f"  - {_q(str(path))}" for path in rule_files]
    lines.append("scrape_configs:" if jobs else "scrape_configs: []")
    for job, members in jobs.items():
        paths = {t.metrics_path for t in members}
        if len(paths) > 1:
            raise ValueError(f"job {job!r} mixes metrics paths {sorted(paths)}; use one job per path")
        lines += [f"  - job_name: {_q(job)}", f"    metrics_path: {_q(paths.pop())}", "    static_configs:"]
        for target in members:
            lines.append(f"      - targets: [{_q(target.address)}]")
            labels = target.static_labels
            if labels:
                lines.append("        labels:")
                lines += [f"          {_q(name)}: {_q(value)}" for name, value in sorted(labels.items())]
    if urls:
        deadline = format_duration(remote_write_deadline_s)
        lines.append("remote_write:")
        for url in urls:
            lines += [f"  - url: {_q(url)}", "    queue_config:", f"      batch_send_deadline: {deadline}"]
            if remote_write_auth is not None:
                user, password_file = remote_write_auth
                lines += ["    basic_auth:", f"      username: {_q(user)}",
                          f"      password_file: {_q(str(password_file))}"]
    return "\n".join(lines) + "\n"
