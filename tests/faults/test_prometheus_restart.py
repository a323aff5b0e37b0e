"""Prometheus restarted in the middle of a step window: the series has a gap, and that window is not used.

A real load generator runs a two-rung ladder against the simulator while a real Prometheus scrapes its
``/metrics`` every 0.5 s. During the second rung's window Prometheus is stopped and started again on the
same port and TSDB; as Prometheus applies a new target list only every few seconds, the whole window falls
in the gap. The lane must not be answered from that window (``degraded`` below it); with the run's records
at hand the window is taken from the records instead, and a note says so.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from satbench.answer.policy import Policy
from satbench.core.manifest import StepWindow
from satbench.loadgen.runner import LadderRunner
from satbench.recommender.prometheus_figures import PromStepResults, figures_from_prometheus
from satbench.recommender.prometheus_source import PrometheusSourceConfig
from satbench.recommender.run_analysis import analyze_run_async
from testkit.net import free_port
from testkit.process import ChildProcess
from testkit.prom import prometheus_binary
from testkit.sim import SimulatorProcess
from tests.faults.conftest import short_config

pytestmark = [pytest.mark.skipif(prometheus_binary() is None, reason="the prometheus binary is not installed"),
              pytest.mark.slow]
SCRAPE_S = 0.5


class RestartablePrometheus:
    """The prometheus binary on a fixed port and data folder, so a restart keeps both."""

    def __init__(self, root: Path, target_port: int) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        (root / "prometheus.yml").write_text(
            f"global:\n  scrape_interval: {int(SCRAPE_S * 1000)}ms\nscrape_configs:\n  - job_name: loadgen\n"
            f"    static_configs:\n      - targets: ['127.0.0.1:{target_port}']\n")
        binary = prometheus_binary()
        assert binary is not None
        self.child = ChildProcess(
            [binary, f"--config.file={root / 'prometheus.yml'}", f"--storage.tsdb.path={root / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=error"],
            name="prometheus", ready_url=self.url + "/-/ready", cwd=root, log_path=root / "prometheus.log",
            graceful=True)

    def start(self) -> None:
        self.child.start()

    def wait_scraped(self, timeout_s: float = 30.0) -> None:
        """Prometheus applies a new target list only every few seconds; wait for the first scrape."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            body = httpx.get(self.url + "/api/v1/query", params={"query": 'up{job="loadgen"} == 1'}).json()
            if body["data"]["result"]:
                return
            time.sleep(0.1)
        raise TimeoutError("Prometheus never scraped the load generator")

    def stop(self) -> None:
        self.child.stop()


@dataclass(frozen=True)
class Outcome:
    doc: dict[str, Any]
    patched: dict[str, Any]


@pytest.fixture(scope="module")
def outcome(tmp_path_factory: pytest.TempPathFactory) -> Outcome:
    root = tmp_path_factory.mktemp("restart")
    out = root / "run"
    with SimulatorProcess("dense", seed=3) as sim:
        config = short_config(sim.url, ladder={"concurrency": [1, 2]}, min_window_s=3.0, max_window_s=3.0,
                              metrics_port=0)
        runner = LadderRunner(config, out, run_id="restart-run")
        port = runner.start_metrics()
        assert port is not None
        prom = RestartablePrometheus(root, port)

        async def scenario() -> None:
            task = asyncio.create_task(runner.run())
            while not runner.manifest.steps and not task.done():  # c=1 measured: c=2's warm-up begins
                await asyncio.sleep(0.05)
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, prom.stop)
            # down for c=2's whole warm-up and window, so the window falls in the gap however loaded the machine
            # (a one-second stop half a second into the window left it usable once the restart came back early)
            await asyncio.sleep(config.warmup_s + config.max_window_s + 1.0)
            await loop.run_in_executor(None, prom.start)
            await task

        try:
            prom.start()
            prom.wait_scraped()
            asyncio.run(scenario())
            source = PrometheusSourceConfig(scrape_interval_s=SCRAPE_S, min_scrape_coverage=0.8)
            doc = asyncio.run(analyze_run_async(runner.manifest, prometheus_url=prom.url, run_dir=None,
                                                policy=Policy(), source_config=source))
            patched = asyncio.run(analyze_run_async(runner.manifest, prometheus_url=prom.url, run_dir=out,
                                                    policy=Policy(), source_config=source))
        finally:
            runner.close()
            prom.stop()
    return Outcome(doc, patched)


def _step(doc: dict[str, Any], c: int) -> dict[str, Any]:
    step: dict[str, Any] = next(s for s in doc["lanes"]["dense"]["steps"] if s["concurrency"] == c)
    return step


def test_the_window_prometheus_missed_is_not_answered_from(outcome: Outcome) -> None:
    doc = outcome.doc
    assert doc["source"]["kind"] == "prometheus"
    assert _step(doc, 1)["usable"], _step(doc, 1)
    assert not _step(doc, 2)["usable"]
    lane = doc["lanes"]["dense"]
    assert lane["status"] == "degraded" and "c=2" in lane["reason"], lane
    assert lane["recommended_concurrency"] == 1


def test_with_records_the_missed_window_is_taken_from_them(outcome: Outcome) -> None:
    notes = outcome.patched.get("notes", [])
    assert any("c=2" in note and "records" in note for note in notes), notes
    assert _step(outcome.patched, 2)["usable"]


def test_the_missed_window_is_named_as_missed_scrapes(outcome: Outcome) -> None:
    assert "scrape" in (_step(outcome.doc, 2)["unusable_reason"] or "")


def test_a_window_wholly_inside_the_gap_is_named_as_missed_scrapes() -> None:
    window = StepWindow(lane="dense", concurrency=2, start=1000.0, end=1010.0)
    figures = figures_from_prometheus(window, PromStepResults(), confidence=0.95, scrape_interval_s=SCRAPE_S,
                                      min_scrape_coverage=0.8)
    assert not figures.valid and "scrape" in (figures.reason or "")
