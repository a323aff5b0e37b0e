"""A real, throw-away VictoriaMetrics for tests: ``with VictoriaMetricsProcess() as vm: vm.query(q)``.

Why: the recommender speaks only the Prometheus HTTP API, so any PromQL store can serve it; a fleet keeps one
such store for every site (docs/fleet-store.md). VictoriaMetrics single-node is the one that comes as a
Debian package (``victoria-metrics``, like ``prometheus``), so the claim is checked against it: a session's
Prometheus ``remote_write``s to ``write_url`` and the recommender is pointed at ``url``.

The process listens on ``127.0.0.1:<free port>`` with its own storage in a temporary folder (it never touches
a system VictoriaMetrics on :8428) and is stopped on exit (SIGTERM, then SIGKILL), even when a test fails.
Its flags make it answer like a fresh Prometheus for data only seconds old:

- ``-search.latencyOffset=0s``: by default VictoriaMetrics hides samples younger than 30 s from queries (it
  expects late arrivals); releases before 1.88 floor the offset at 1 s, so an instant query at a time less than
  1 s from now is moved 1 s back there (the recommender asks at windows' ends, which are older by then);
- ``-search.disableCache``: no rollup-result cache, so a query repeated after more samples arrived is answered
  from the samples, and ``query_range`` start/end are never aligned to the step for caching;
- ``-retentionPeriod=100y``: the backfilled synthetic runs of other tests lie hours in the past; nothing is
  dropped as too old (VictoriaMetrics refuses samples outside its retention).

VictoriaMetrics buffers what it ingests and makes it searchable about once a second; ``flush`` forces that
(``/internal/force_flush``) so that a test can ask straight after it waited for the writes (``wait_holds``).

``auth=(user, password)`` starts it as a fleet's store should run (docs/fleet-store.md, "Credentials"): every
request but ``/health`` and ``/metrics`` needs basic auth (``-httpAuth.*``), and the delete, snapshot,
force-merge, cache-reset, config and flags endpoints need an auth key (``admin_key``) that no writer holds. Both
reach it through the environment (``-envflag.enable``), never its command line, which every user of the host can
read in ``/proc``.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from testkit.net import free_port
from testkit.process import ChildProcess

__all__ = [
    "MISSING_REASON",
    "VictoriaMetricsProcess",
    "VictoriaMetricsQueryError",
    "victoria_metrics_binary",
]

# Debian's package installs ``victoria-metrics``; upstream's release archives name it ``victoria-metrics-prod``.
BINARY_NAMES = ("victoria-metrics", "victoria-metrics-prod")
MISSING_REASON = "VictoriaMetrics is not installed (Debian: apt-get install victoria-metrics)"

# runtime_fingerprint_info carries some 36 labels (every setting that changes the answer); VictoriaMetrics keeps 30
# by default and drops the rest silently (docs/fleet-store.md), so every store satbench writes to raises it.
FINGERPRINT_LABELS_FLAG = "-maxLabelsPerTimeseries=64"

DEFAULT_FLAGS = (
    "-search.latencyOffset=0s",
    "-search.disableCache",
    "-retentionPeriod=100y",
    "-loggerLevel=WARN",
    FINGERPRINT_LABELS_FLAG,
)


class VictoriaMetricsQueryError(RuntimeError):
    pass


def victoria_metrics_binary() -> str | None:
    for name in BINARY_NAMES:
        found = shutil.which(name)
        if found is not None:
            return found
    return None


class VictoriaMetricsProcess:
    """A real VictoriaMetrics single-node on ``127.0.0.1:<free port>``.

    ``url`` is its Prometheus-compatible query base (``/api/v1/query`` and ``/api/v1/query_range`` below it),
    ``write_url`` its Prometheus remote-write endpoint.
    """

    def __init__(self, startup_timeout_s: float = 30.0, stop_timeout_s: float = 10.0,
                 extra_args: Iterable[str] = (), auth: tuple[str, str] | None = None) -> None:
        self.auth = auth
        self.admin_key = secrets.token_urlsafe(24) if auth is not None else None
        self.startup_timeout_s = startup_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.extra_args = tuple(extra_args)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.write_url = f"{self.url}/api/v1/write"
        self.dir: Path | None = None
        self.child: ChildProcess | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    @property
    def proc(self) -> subprocess.Popen[bytes] | None:
        return None if self.child is None else self.child.proc

    def __enter__(self) -> VictoriaMetricsProcess:
        binary = victoria_metrics_binary()
        if binary is None:
            raise RuntimeError(MISSING_REASON)
        self._tmp = tempfile.TemporaryDirectory(prefix="satbench-vm-")
        root = self.dir = Path(self._tmp.name)
        argv = [
            binary,
            f"-httpListenAddr=127.0.0.1:{self.port}",
            f"-storageDataPath={root / 'data'}",
            *DEFAULT_FLAGS,
            *self.extra_args,
        ]
        env = None
        if self.auth is not None:
            argv.append("-envflag.enable")
            env = {**os.environ, **self._secret_flags()}
        # SIGTERM first: it flushes its buffers and closes the storage cleanly
        self.child = ChildProcess(argv, name="victoria-metrics", ready_url=self.url + "/health", cwd=root, env=env,
                                  log_path=root / "victoria-metrics.log", startup_timeout_s=self.startup_timeout_s,
                                  stop_timeout_s=self.stop_timeout_s, graceful=True)
        try:
            self.child.start()
        except BaseException:
            self._cleanup()
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.child is not None:
            self.child.stop()
        self._cleanup()

    def _secret_flags(self) -> dict[str, str]:
        """The auth flags as ``-envflag.enable`` reads them (a flag's dots as underscores)."""
        assert self.auth is not None and self.admin_key is not None
        keys = ("deleteAuthKey", "snapshotAuthKey", "forceMergeAuthKey", "search.resetCacheAuthKey",
                "configAuthKey", "flagsAuthKey", "pprofAuthKey")
        return {"httpAuth_username": self.auth[0], "httpAuth_password": self.auth[1],
                **{key.replace(".", "_"): self.admin_key for key in keys}}

    def _cleanup(self) -> None:
        self.child = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
            self.dir = None

    def log(self) -> str:
        return "" if self.child is None else self.child.log()

    def flush(self) -> None:
        """Makes every sample ingested so far searchable now (instead of within about a second)."""
        httpx.get(self.url + "/internal/force_flush", timeout=10.0, auth=self.auth).raise_for_status()

    def _get(self, path: str, params: dict[str, Any]) -> Any:
        resp = httpx.get(self.url + path, params=params, timeout=10.0, auth=self.auth)
        try:
            body = resp.json()
        except ValueError:
            raise VictoriaMetricsQueryError(f"{path} {params}: HTTP {resp.status_code}: {resp.text[:300]}") from None
        if resp.status_code != 200 or body.get("status") != "success":
            raise VictoriaMetricsQueryError(f"{path} {params}: HTTP {resp.status_code}: {body.get('error', body)}")
        return body["data"]

    def query(self, promql: str, time: float | None = None) -> list[dict[str, Any]]:
        """Instant query; each result has ``metric`` (labels) and ``value`` ``[ts, "str"]`` (or ``values`` for
        a range-vector selector such as ``up[1m]``: the raw samples)."""
        params: dict[str, Any] = {"query": promql}
        if time is not None:
            params["time"] = f"{time:.3f}"
        return list(self._get("/api/v1/query", params)["result"])

    def query_range(self, promql: str, start: float, end: float, step_s: float) -> list[dict[str, Any]]:
        params = {"query": promql, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step_s}"}
        return list(self._get("/api/v1/query_range", params)["result"])

    def wait_holds(self, check: Callable[[VictoriaMetricsProcess], bool], timeout_s: float = 20.0,
                   what: str = "the expected samples") -> None:
        """Flushes and calls ``check(self)`` until it is true (remote-written samples arrive in batches), or
        raises TimeoutError after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.flush()
            if check(self):
                return
            if time.monotonic() >= deadline:
                raise TimeoutError(f"VictoriaMetrics did not hold {what} within {timeout_s:g} s\n{self.log()}")
            time.sleep(0.2)
