"""RuntimeCollector on a private registry, fed by recorded payloads through an in-process transport."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry

from satbench.exporter.collector import RuntimeCollector
from satbench.exporter.gpu import FakeGpuReader, GpuDevice, GpuSourceAbsent, GpuUnavailable
from satbench.exporter.llamacpp import LlamaCppAdapter
from satbench.exporter.process import FakeProcessReader, ProcessReading
from satbench.exporter.snapshot import RuntimeSnapshot
from testkit.fixture_runtime import FixtureRuntime

GIB = 1024.0**3


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def scrape(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """One collect(): every sample as (name, sorted labels) -> value."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in registry.collect()
        for sample in family.samples
    }


def make(runtime: FixtureRuntime, **kwargs) -> tuple[CollectorRegistry, RuntimeCollector]:
    adapter = LlamaCppAdapter(
        "http://runtime.test", client=httpx.Client(transport=runtime.transport()), **kwargs.pop("adapter", {})
    )
    collector = RuntimeCollector(adapter, **kwargs)
    registry = CollectorRegistry()
    registry.register(collector)
    return registry, collector


@pytest.fixture
def dense(llamacpp_fixtures: Path) -> FixtureRuntime:
    return FixtureRuntime.from_folder(llamacpp_fixtures / "dense_np4")


def test_under_load(dense: FixtureRuntime) -> None:
    registry, collector = make(dense, process_reader=FakeProcessReader(ProcessReading(42, 1.5e8)))
    value = registry.get_sample_value
    assert value("runtime_up") == 1
    for source in ("metrics", "slots", "props"):
        assert value(f"runtime_{source}_up") == 1
        assert value("runtime_http_status", {"source": source}) == 200
    assert value("runtime_slots", {"state": "decode"}) == 4
    assert value("runtime_slots", {"state": "prefill"}) == 0
    assert value("runtime_slots", {"state": "idle"}) == 0
    assert value("runtime_slots_configured") == 4
    assert value("runtime_queue_depth") == 6
    assert value("runtime_batch_occupancy_ratio") == 1.0
    assert value("runtime_prompt_tokens_total") == 100
    assert value("runtime_output_tokens_total") == 72
    assert value("runtime_decode_steps_total") == 169
    assert value("runtime_busy_slot_decodes_total") == pytest.approx(457.0, abs=0.01)
    assert value("runtime_process_up") == 1
    assert value("runtime_process_resident_memory_bytes") == 1.5e8
    assert (
        value(
            "runtime_info",
            {"flavour": "llamacpp", "model": "tiny-llama-dense.gguf", "build_info": "b0-unknown"},
        )
        == 1
    )
    assert value("exporter_scrape_duration_seconds") is not None
    collector.close()


def test_sequence_gives_interval_occupancy_and_props_is_cached(
    dense: FixtureRuntime, llamacpp_fixtures: Path
) -> None:
    clock = Clock()
    base = llamacpp_fixtures / "dense_np4"
    dense.set("/metrics", base / "metrics_after_warmup.txt")
    dense.set("/slots", base / "slots_idle.json")
    registry, collector = make(dense, adapter={"clock": clock, "props_ttl_s": 30.0})
    first = scrape(registry)
    assert ("runtime_decode_occupancy_ratio", ()) not in first  # the first scrape has no interval
    assert first["runtime_props_cached", ()] == 0
    assert first["runtime_slots", (("state", "idle"),)] == 4
    dense.set("/metrics", base / "metrics_load.txt")
    dense.set("/slots", base / "slots_load.json")
    clock.now += 1
    second = scrape(registry)
    assert second["runtime_decode_occupancy_ratio", ()] == pytest.approx((457.0 - 72) / 97 / 4, rel=1e-4)
    assert second["runtime_props_cached", ()] == 1
    assert second["runtime_slots_configured", ()] == 4
    assert dense.requests.count("/props") == 1
    clock.now += 31
    scrape(registry)
    assert dense.requests.count("/props") == 2
    collector.close()


def test_metrics_disabled(dense: FixtureRuntime, llamacpp_fixtures: Path) -> None:
    dense.set("/metrics", llamacpp_fixtures / "extras" / "metrics_without_flag.txt", status=501)
    registry, collector = make(dense)
    value = registry.get_sample_value
    assert value("runtime_up") == 1
    assert value("runtime_metrics_up") == 0
    assert value("runtime_http_status", {"source": "metrics"}) == 501
    assert value("runtime_queue_depth") is None
    assert value("runtime_output_tokens_total") is None
    assert value("runtime_slots", {"state": "decode"}) == 4
    assert value("runtime_batch_occupancy_ratio") == 1.0
    collector.close()


def test_slots_off(dense: FixtureRuntime) -> None:
    dense.routes["/slots"] = (
        501,
        '{"error":{"code":501,"message":"This server does not support slots endpoint."}}',
    )
    registry, collector = make(dense)
    value = registry.get_sample_value
    assert value("runtime_slots_up") == 0
    assert value("runtime_slots", {"state": "idle"}) is None
    assert value("runtime_slots_configured") == 4  # from /props
    assert value("runtime_batch_occupancy_ratio") == 1.0  # requests_processing / total_slots
    assert value("runtime_queue_depth") == 6
    collector.close()


def test_runtime_unreachable_never_raises() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    adapter = LlamaCppAdapter(
        "http://runtime.test", client=httpx.Client(transport=httpx.MockTransport(refuse))
    )
    registry = CollectorRegistry()
    registry.register(
        RuntimeCollector(adapter, [FakeGpuReader(source="nvml", error=GpuUnavailable("no NVML"))])
    )
    value = registry.get_sample_value
    assert value("runtime_up") == 0
    assert (
        value("runtime_metrics_up") == 0 and value("runtime_slots_up") == 0 and value("runtime_props_up") == 0
    )
    assert value("runtime_http_status", {"source": "health"}) == 0
    assert value("runtime_queue_depth") is None
    assert value("gpu_up", {"source": "nvml"}) == 0


@pytest.mark.slow
def test_hung_runtime_answers_within_budget(dense: FixtureRuntime) -> None:
    dense.hang_s = 0.8
    registry, collector = make(dense, budget_s=0.2)
    start = time.monotonic()
    assert registry.get_sample_value("runtime_up") == 0
    assert time.monotonic() - start < 1.0
    assert registry.get_sample_value("runtime_process_up") == 0
    collector.close()


def test_adapter_that_raises_is_contained() -> None:
    class Broken:
        flavour = "broken"

        def fetch(self, budget_s: float) -> RuntimeSnapshot:
            raise RuntimeError("boom")

        def close(self) -> None:
            pass

    registry = CollectorRegistry()
    registry.register(RuntimeCollector(Broken()))
    assert registry.get_sample_value("runtime_up") == 0


def test_gpu_sources(dense: FixtureRuntime) -> None:
    real = FakeGpuReader(
        [GpuDevice("0", "H200", 10 * GIB, 141 * GIB, process_used_bytes=8 * GIB)], source="nvml"
    )
    sim = FakeGpuReader(
        [GpuDevice("sim0", "simulated", 3 * GIB, 24 * GIB, simulated=True, process_used_bytes=3 * GIB)],
        source="simulator",
    )
    absent = FakeGpuReader(source="other", error=GpuSourceAbsent("not a simulator"))
    registry, collector = make(dense, gpu_readers=[real, sim, absent])
    value = registry.get_sample_value
    assert value("gpu_up", {"source": "nvml"}) == 1
    assert value("gpu_up", {"source": "simulator"}) == 1
    assert value("gpu_up", {"source": "other"}) is None
    assert value("gpu_memory_used_bytes", {"gpu": "0", "simulated": "false"}) == 10 * GIB
    assert value("gpu_memory_total_bytes", {"gpu": "0", "simulated": "false"}) == 141 * GIB
    assert value("runtime_gpu_memory_used_bytes", {"gpu": "0", "simulated": "false"}) == 8 * GIB
    assert value("gpu_memory_used_bytes", {"gpu": "sim0", "simulated": "true"}) == 3 * GIB
    assert value("gpu_info", {"gpu": "sim0", "name": "simulated", "simulated": "true"}) == 1
    assert value("gpu_info", {"gpu": "0", "name": "H200", "simulated": "false"}) == 1
    collector.close()


def test_no_nvml_is_normal(dense: FixtureRuntime) -> None:
    registry, collector = make(
        dense, gpu_readers=[FakeGpuReader(source="nvml", error=GpuUnavailable("no lib"))]
    )
    value = registry.get_sample_value
    assert value("gpu_up", {"source": "nvml"}) == 0
    assert value("runtime_up") == 1 and value("runtime_queue_depth") == 6
    collector.close()
