"""A real Prometheus over backfilled data: ``promtool tsdb create-blocks-from openmetrics`` then
``prometheus`` on loopback with that storage. Deterministic (no scrape timing) and fast to start."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from testkit.net import free_port, wait_http

__all__ = ["BackfilledPrometheus", "tools_available"]


def tools_available() -> bool:
    return shutil.which("prometheus") is not None and shutil.which("promtool") is not None


class BackfilledPrometheus:
    def __init__(self, openmetrics: str, workdir: Path) -> None:
        self.workdir = workdir
        data = workdir / "data"
        data.mkdir(parents=True, exist_ok=True)
        source = workdir / "series.om"
        source.write_text(openmetrics, encoding="utf-8")
        subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", str(source), str(data)],
                       check=True, capture_output=True, timeout=120)
        config = workdir / "prometheus.yml"
        config.write_text("global:\n  scrape_interval: 1s\n", encoding="utf-8")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._log = (workdir / "prometheus.log").open("wb")
        self._proc = subprocess.Popen(
            ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={data}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=3650d"],
            stdout=self._log, stderr=subprocess.STDOUT)
        try:
            wait_http(f"{self.url}/-/ready", timeout_s=60)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._log.close()

    def __enter__(self) -> BackfilledPrometheus:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
