"""A real Prometheus (testkit/prom.py) scraping the exporter in front of replayed llama-server payloads:
target labels arrive, recording rules evaluate, and the process is gone afterwards."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from satbench.exporter.promconfig import EXPORTER_JOB, ScrapeTarget, render_prometheus_config
from satbench.exporter.server import ExporterConfig, build_collector, serve
from testkit.fixture_runtime import FixtureRuntime, LoopbackRuntime
from testkit.prom import PrometheusProcess

PROM_DIR = Path(__file__).resolve().parents[2] / "prometheus"


@pytest.mark.slow
def test_prometheus_scrapes_exporter_with_target_labels(llamacpp_fixtures: Path) -> None:
    with LoopbackRuntime(FixtureRuntime.from_folder(llamacpp_fixtures / "dense_np8")) as runtime:
        collector = build_collector(ExporterConfig(runtime_url=runtime.url, port=0, gpu="none"))
        server = serve(collector)
        try:
            target = ScrapeTarget(EXPORTER_JOB, f"127.0.0.1:{server.port}", {"lane": "dense", "node": "n1"})
            config = render_prometheus_config([target], [], scrape_interval_s=0.2)
            rules = sorted((PROM_DIR / "rules").glob("*.yml"))
            with PrometheusProcess(config, rule_files=rules) as prom:
                prom.wait_for_scrapes('runtime_up{lane="dense",node="n1"} == 1')
                assert prom.query_value('runtime_queue_depth{lane="dense"}') == 10
                assert prom.query_value('runtime_slots{lane="dense",state="decode"}') == 8
                prom.wait_for_scrapes('lane:runtime_queue_depth:sum{lane="dense"}')
                assert prom.query_value('lane:runtime_queue_depth:sum{lane="dense"}') == 10
                proc = prom.proc
                assert proc is not None
        finally:
            server.close()
            collector.close()
    assert proc.poll() is not None  # killed on exit
    with pytest.raises(httpx.HTTPError):
        httpx.get(prom.url + "/-/ready", timeout=1)


def test_bad_query_raises_clear_error() -> None:
    from testkit.prom import PrometheusQueryError

    with PrometheusProcess(render_prometheus_config([], [])) as prom:
        with pytest.raises(PrometheusQueryError, match="parse error"):
            prom.query("sum(")
        assert prom.query_value("vector(3)") == 3
