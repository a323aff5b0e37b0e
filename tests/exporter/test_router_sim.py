"""The exporter against the simulator in router mode, over real HTTP, and a real Prometheus scraping one
router exporter once per lane with ``__param_model``."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from satbench.exporter.promconfig import EXPORTER_JOB, ScrapeTarget, render_prometheus_config
from satbench.exporter.server import ExporterConfig, ExporterServer, build_collector, serve
from testkit.exposition import samples
from testkit.prom import PrometheusProcess, prometheus_binary
from tests.simulator.dropin_util import DropIn

LOADED, IDLE = "dense-a", "moe-b"


@pytest.fixture
def router(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[DropIn]:
    monkeypatch.setenv("LLAMA_CACHE", str(tmp_path / "empty-cache"))
    models = tmp_path / "models"
    models.mkdir()
    for name in (LOADED, IDLE):
        (models / f"{name}.gguf").write_bytes(b"stand-in")
    argv = ("--router", "--models-dir", str(models), "--no-models-autoload", "--model-load-s", "0.05",
            "--metrics", "-c", "2048", "-np", "2")
    with DropIn(*argv) as sim:
        assert httpx.post(sim.url + "/models/load", json={"model": LOADED}).json() == {"success": True}
        deadline = time.monotonic() + 5
        while _status(sim.url, LOADED) != "loaded":
            assert time.monotonic() < deadline
            time.sleep(0.02)
        r = httpx.post(sim.url + "/completion", json={"model": LOADED, "prompt": "hello there", "n_predict": 8},
                       timeout=10)
        assert r.status_code == 200
        yield sim


def _status(url: str, model: str) -> str:
    return next(m["status"]["value"] for m in httpx.get(url + "/v1/models").json()["data"] if m["id"] == model)


@pytest.fixture
def exporter(router: DropIn) -> Iterator[ExporterServer]:
    collector = build_collector(ExporterConfig(runtime_url=router.url, port=0, gpu="none", budget_s=2.0))
    server = serve(collector)
    try:
        yield server
    finally:
        server.close()
        collector.close()


def test_router_exporter_agrees_with_the_models_own_slots(router: DropIn, exporter: ExporterServer) -> None:
    got = samples(httpx.get(exporter.url + "/metrics", timeout=10).text)
    one = samples(httpx.get(exporter.url + "/metrics", params={"model": LOADED}, timeout=10).text)
    slots = httpx.get(router.url + "/slots", params={"model": LOADED}).json()
    assert got[("runtime_up", ())] == 1 and got[("runtime_models_up", ())] == 1
    assert got[("runtime_model_loaded", (("model", LOADED),))] == 1
    assert got[("runtime_model_loaded", (("model", IDLE),))] == 0
    assert got[("runtime_model_status", (("model", IDLE), ("status", "unloaded")))] == 1
    assert ("runtime_model_loaded", (("model", IDLE),)) not in one  # one model per lane
    for view in (got, one):
        m = (("model", LOADED),)
        idle = [s for s in slots if not s["is_processing"]]
        assert view[("runtime_slots", (("model", LOADED), ("state", "idle")))] == len(idle)
        assert view[("runtime_slots_configured", m)] == len(slots) == 2
        held = sum(s.get("n_prompt_tokens", 0) for s in idle)  # a never-used slot has none (as the real one)
        assert held > 0  # the finished request's prompt and output stay in its slot
        assert view[("runtime_kv_cache_tokens", (("model", LOADED), ("state", "idle")))] == held
        assert view[("runtime_kv_cache_tokens", (("model", LOADED), ("state", "active")))] == 0
        split = (("kv_layout", "split"), ("model", LOADED))  # from the child's argv in /v1/models
        assert view[("runtime_kv_cache_capacity_tokens", split)] == sum(s["n_ctx"] for s in slots) == 2048
        assert view[("runtime_output_tokens_total", m)] == 8
        assert view[("runtime_metrics_up", m)] == 1 and view[("runtime_up", ())] == 1
    assert not any(name == "runtime_queue_depth" and labels == () for name, labels in got)
    assert _status(router.url, IDLE) == "unloaded"  # scraping never loaded it


@pytest.mark.slow
@pytest.mark.skipif(prometheus_binary() is None, reason="the prometheus binary is not installed")
def test_prometheus_scrapes_one_router_exporter_per_lane(exporter: ExporterServer) -> None:
    address = f"127.0.0.1:{exporter.port}"
    targets = [
        ScrapeTarget(EXPORTER_JOB, address, {"lane": "a", "node": "n1"}, params={"model": LOADED}),
        ScrapeTarget(EXPORTER_JOB, address, {"lane": "b", "node": "n1"}, params={"model": IDLE}),
    ]
    with PrometheusProcess(render_prometheus_config(targets, [], scrape_interval_s=0.5)) as prom:
        prom.wait_for_scrapes('runtime_model_loaded{lane="b"}')
        prom.wait_for_scrapes('runtime_slots_configured{lane="a"}')
        a = prom.query('runtime_model_loaded{lane="a"}')
        b = prom.query('runtime_model_loaded{lane="b"}')
        assert [(s["metric"]["model"], s["value"][1]) for s in a] == [(LOADED, "1")]
        assert [(s["metric"]["model"], s["value"][1]) for s in b] == [(IDLE, "0")]
        assert prom.query_value('runtime_up{lane="b"}') == 1  # an unloaded model is not a runtime down
        assert prom.query_value(f'runtime_slots_configured{{lane="a",model="{LOADED}"}}') == 2
        assert not prom.query('runtime_slots_configured{lane="b"}')
        assert not any(k.startswith("__param") for s in a + b for k in s["metric"])
        up = prom.query(f'up{{job="{EXPORTER_JOB}"}}')
        assert sorted(s["metric"]["lane"] for s in up) == ["a", "b"]
