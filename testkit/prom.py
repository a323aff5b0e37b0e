"""A real, throw-away Prometheus for tests: ``with PrometheusProcess(config) as prom: prom.query(q)``.

Writes the config (and copies of the rule files, referenced by their copied paths) into a temporary
directory, starts the ``prometheus`` binary on a free loopback port with its own TSDB directory, waits for
``/-/ready`` and kills the process on exit, even when the test fails (``testkit.process.ChildProcess``). It
never touches a system Prometheus that may already listen on :9090.

``rule_files`` given here are appended to the config's ``rule_files`` (a config that already lists rule
files keeps them). ``query`` returns the ``data.result`` list of an instant query, ``query_range`` that of a
range query; both raise :class:`PrometheusQueryError` on an error answer.

``web_config`` (the text of a ``--web.config.file``: ``basic_auth_users`` with bcrypt hashes) with ``auth`` (the
user and password its own readiness check and queries send) starts it behind basic auth, as a store that
takes writes must run (docs/fleet-store.md, "Credentials").
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import quote

import httpx

from testkit.net import free_port
from testkit.process import ChildProcess

__all__ = ["PrometheusProcess", "PrometheusQueryError", "prometheus_binary", "promtool_binary"]


class PrometheusQueryError(RuntimeError):
    pass


def prometheus_binary() -> str | None:
    return shutil.which("prometheus")


def promtool_binary() -> str | None:
    return shutil.which("promtool")


class PrometheusProcess:
    """A real Prometheus on ``127.0.0.1:<free port>``; ``.url`` is its base URL once entered."""

    def __init__(
        self,
        config_text: str,
        rule_files: Sequence[Path] = (),
        startup_timeout_s: float = 30.0,
        extra_args: Iterable[str] = (),
        web_config: str | None = None,
        auth: tuple[str, str] | None = None,
    ) -> None:
        self.config_text = config_text
        self.web_config = web_config
        self.auth = auth
        self.rule_files = tuple(Path(p) for p in rule_files)
        self.startup_timeout_s = startup_timeout_s
        self.extra_args = tuple(extra_args)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.dir: Path | None = None
        self.child: ChildProcess | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    @property
    def proc(self) -> subprocess.Popen[bytes] | None:
        return None if self.child is None else self.child.proc

    def _write_config(self, root: Path) -> Path:
        text = self.config_text
        if self.rule_files:
            copies = []
            for i, src in enumerate(self.rule_files):
                dst = root / "rules" / f"{i:02d}-{src.name}"
                dst.parent.mkdir(exist_ok=True)
                shutil.copyfile(src, dst)
                copies.append(dst)
            listed = "".join(f'  - "{p}"\n' for p in copies)
            text = text.replace("rule_files: []\n", "rule_files:\n")
            if "\nrule_files:\n" in "\n" + text:
                text = text.replace("rule_files:\n", "rule_files:\n" + listed, 1)
            else:
                text = text.rstrip("\n") + "\nrule_files:\n" + listed
        path = root / "prometheus.yml"
        path.write_text(text)
        return path

    def __enter__(self) -> PrometheusProcess:
        binary = prometheus_binary()
        if binary is None:
            raise RuntimeError("the prometheus binary is not installed (Debian: apt-get install prometheus)")
        self._tmp = tempfile.TemporaryDirectory(prefix="satbench-prom-")
        root = self.dir = Path(self._tmp.name)
        config = self._write_config(root)
        argv = [
            binary,
            f"--config.file={config}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            f"--storage.tsdb.path={root / 'data'}",
            "--web.enable-lifecycle",
            "--log.level=warn",
            *self.extra_args,
        ]
        ready_url = self.url + "/-/ready"
        if self.web_config is not None:
            (root / "web.yml").write_text(self.web_config)
            argv.append(f"--web.config.file={root / 'web.yml'}")
        if self.auth is not None:
            user, password = (quote(part, safe="") for part in self.auth)
            ready_url = f"http://{user}:{password}@127.0.0.1:{self.port}/-/ready"
        self.child = ChildProcess(argv, name="prometheus", ready_url=ready_url, cwd=root,
                                  log_path=root / "prometheus.log", startup_timeout_s=self.startup_timeout_s)
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

    def _cleanup(self) -> None:
        self.child = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def log(self) -> str:
        return "" if self.child is None else self.child.log()

    def _get(self, path: str, params: dict[str, Any]) -> Any:
        resp = httpx.get(self.url + path, params=params, timeout=10.0, auth=self.auth)
        body = resp.json()
        if resp.status_code != 200 or body.get("status") != "success":
            raise PrometheusQueryError(f"{path} {params}: HTTP {resp.status_code}: {body.get('error', body)}")
        return body["data"]

    def query(self, promql: str, time: float | None = None) -> list[dict[str, Any]]:
        """Instant query; each result has ``metric`` (labels) and ``value`` ``[ts, "str"]``."""
        params: dict[str, Any] = {"query": promql}
        if time is not None:
            params["time"] = f"{time:.3f}"
        return list(self._get("/api/v1/query", params)["result"])

    def query_value(self, promql: str, time: float | None = None) -> float | None:
        """The single value of an instant query, or None when it returns nothing (raises on several)."""
        result = self.query(promql, time)
        if not result:
            return None
        if len(result) > 1:
            raise PrometheusQueryError(f"{promql!r} returned {len(result)} series")
        return float(result[0]["value"][1])

    def query_range(self, promql: str, start: float, end: float, step_s: float) -> list[dict[str, Any]]:
        params = {"query": promql, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step_s}"}
        return list(self._get("/api/v1/query_range", params)["result"])

    def targets(self) -> list[dict[str, Any]]:
        return list(self._get("/api/v1/targets", {})["activeTargets"])

    def wait_for_scrapes(self, promql: str, timeout_s: float = 15.0) -> None:
        """Waits until ``promql`` returns at least one series (e.g. ``up{job="x"} == 1``)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.query(promql):
                return
            time.sleep(0.1)
        raise TimeoutError(f"{promql!r} returned nothing within {timeout_s}s\n{self.log()}")
