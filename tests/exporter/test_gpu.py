"""GPU readers: /sim/gpu parsing and probing, NVML without a GPU, simulated readings replacing real ones."""

from __future__ import annotations

import json

import httpx
import pytest
from prometheus_client import CollectorRegistry

from satbench.exporter.adapter import EndpointFetcher
from satbench.exporter.collector import RuntimeCollector
from satbench.exporter.gpu import (
    FakeGpuReader,
    GpuDevice,
    GpuSourceAbsent,
    GpuUnavailable,
    NvmlGpuReader,
    parse_sim_gpu,
)
from satbench.exporter.llamacpp import LlamaCppAdapter
from satbench.exporter.sim_gpu import SimulatedGpuReader

SIM_GPU = {
    "simulated": True,
    "profile": "dense",
    "memory_total_bytes": 150754820096,
    "memory_used_bytes": 9140000000,
    "gpus": [
        {
            "index": 0,
            "name": "Simulated H200-class GPU",
            "simulated": True,
            "memory_total_bytes": 150754820096,
            "memory_used_bytes": 9140000000,
        }
    ],
}


def test_parse_sim_gpu() -> None:
    (dev,) = parse_sim_gpu(json.dumps(SIM_GPU))
    assert dev == GpuDevice("sim0", "Simulated H200-class GPU", 9140000000, 150754820096, True, 9140000000)


def test_parse_sim_gpu_flat_and_several() -> None:
    flat = {"simulated": True, "memory_used_bytes": 1, "memory_total_bytes": 2}
    assert [d.gpu for d in parse_sim_gpu(json.dumps(flat))] == ["sim0"]
    two = dict(SIM_GPU, gpus=SIM_GPU["gpus"] * 2)
    assert [d.gpu for d in parse_sim_gpu(json.dumps(two))] == ["sim0", "sim1"]


@pytest.mark.parametrize(
    "body",
    [
        json.dumps(dict(SIM_GPU, simulated=False)),  # not flagged: could be mistaken for a real GPU
        json.dumps({k: v for k, v in SIM_GPU.items() if k != "simulated"}),
        json.dumps({"simulated": True, "gpus": [{"memory_used_bytes": -1, "memory_total_bytes": 2}]}),
        json.dumps({"simulated": True, "gpus": "x"}),
        "[]",
        "nope",
    ],
)
def test_parse_sim_gpu_rejects(body: str) -> None:
    with pytest.raises(ValueError):
        parse_sim_gpu(body)


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def test_sim_reader_probes_and_backs_off_on_a_real_runtime() -> None:
    calls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        return httpx.Response(404, text="File Not Found")

    clock = Clock()
    fetcher = EndpointFetcher("http://rt", client=httpx.Client(transport=httpx.MockTransport(handler)))
    reader = SimulatedGpuReader(fetcher, recheck_s=60, clock=clock)
    for _ in range(3):
        with pytest.raises(GpuSourceAbsent):
            reader.read(None)
    assert calls == ["/sim/gpu"]
    clock.now = 61
    with pytest.raises(GpuSourceAbsent):
        reader.read(None)
    assert len(calls) == 2
    fetcher.close()


def test_sim_reader_failure_after_success_is_unavailable() -> None:
    answers = [httpx.Response(200, json=SIM_GPU), httpx.Response(500, text="boom")]

    def handler(request: httpx.Request) -> httpx.Response:
        return answers.pop(0)

    fetcher = EndpointFetcher("http://rt", client=httpx.Client(transport=httpx.MockTransport(handler)))
    reader = SimulatedGpuReader(fetcher)
    assert reader.read(None)[0].simulated
    with pytest.raises(GpuUnavailable):
        reader.read(None)
    fetcher.close()


def test_nvml_reader_reads_or_reports_unavailable() -> None:
    # On a host without an NVIDIA driver this is the "no NVML" path; on a GPU host, real devices.
    reader = NvmlGpuReader()
    try:
        devices = reader.read(None)
    except GpuUnavailable as exc:
        assert "NVML" in str(exc) or "pynvml" in str(exc)
        with pytest.raises(GpuUnavailable):  # cached failure, no retry before retry_s
            reader.read(None)
    else:
        assert all(d.total_bytes >= d.used_bytes > 0 and not d.simulated for d in devices)


@pytest.mark.parametrize("replace", [True, False])
def test_simulated_gpu_replaces_real_ones_when_asked(replace: bool) -> None:
    real = FakeGpuReader([GpuDevice("0", "H200", 1.0, 2.0)], source="nvml")
    sim = FakeGpuReader([GpuDevice("sim0", "simulated", 3.0, 4.0, simulated=True)], source="simulator")
    adapter = LlamaCppAdapter(
        "http://rt", client=httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(404)))
    )
    registry = CollectorRegistry()
    collector = RuntimeCollector(adapter, [real, sim], simulated_gpu_replaces_real=replace)
    registry.register(collector)
    scraped = {
        (s.name, tuple(sorted(s.labels.items()))): s.value for f in registry.collect() for s in f.samples
    }
    assert scraped["gpu_memory_used_bytes", (("gpu", "sim0"), ("simulated", "true"))] == 3.0
    assert (("gpu_memory_used_bytes", (("gpu", "0"), ("simulated", "false"))) in scraped) is not replace
    assert (("gpu_up", (("source", "nvml"),)) in scraped) is not replace
    collector.close()
