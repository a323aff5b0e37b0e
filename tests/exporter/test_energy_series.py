"""The exporter's power and energy series: NVML's readings through ``NvmlGpuReader`` (a fake binding whose GPUs
draw a known curve), the simulator's, and the host's CPU package energy, each published or absent as its
source allows, with its ``*_up``."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client import CollectorRegistry

from satbench.exporter.collector import RuntimeCollector
from satbench.exporter.cpu_energy import CpuEnergyUnavailable, CpuPackage, FakeCpuEnergyReader
from satbench.exporter.gpu import FakeGpuReader, GpuDevice, NvmlGpuReader, parse_sim_gpu
from satbench.exporter.llamacpp import LlamaCppAdapter
from satbench.exporter.server import ExporterConfig
from testkit.fake_nvml import FakeNvml, PowerCurve


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


Scraped = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _scrape(*gpu: object, cpu: object = None, replace: bool = False) -> Scraped:
    adapter = LlamaCppAdapter("http://rt", client=httpx.Client(transport=httpx.MockTransport(
        lambda r: httpx.Response(404))))
    collector = RuntimeCollector(adapter, list(gpu), simulated_gpu_replaces_real=replace,  # type: ignore[arg-type]
                                 cpu_energy_reader=cpu)  # type: ignore[arg-type]
    registry = CollectorRegistry()
    registry.register(collector)
    try:
        return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in registry.collect() for s in f.samples}
    finally:
        collector.close()


REAL = (("gpu", "0"), ("simulated", "false"))


def test_nvml_power_and_energy_in_base_units() -> None:
    clock = Clock()
    nvml = FakeNvml([PowerCurve(300.0, 50.0, 20.0), PowerCurve(200.0, 0.0, 10.0, counter=False)], clock)
    devices = NvmlGpuReader(module=nvml, clock=clock).read(None)
    # milliwatts and millijoules from NVML, watts and joules here; the truth from the curve itself
    assert devices[0].power_w == pytest.approx(nvml.joules(0, 99.0, 100.0), abs=1e-3)
    assert devices[0].energy_j == pytest.approx(nvml.devices[0].energy(100.0), abs=1e-3)
    assert devices[1].power_w == pytest.approx(200.0) and devices[1].energy_j is None  # no counter: None
    scraped = _scrape(NvmlGpuReader(module=nvml, clock=clock))
    assert scraped["gpu_energy_joules_total", REAL] == pytest.approx(devices[0].energy_j)
    assert scraped["gpu_power_watts", (("gpu", "1"), ("simulated", "false"))] == pytest.approx(200.0)
    assert ("gpu_energy_joules_total", (("gpu", "1"), ("simulated", "false"))) not in scraped


def test_a_binding_without_the_energy_call_keeps_every_other_series() -> None:
    class OldBinding(FakeNvml):
        nvmlDeviceGetTotalEnergyConsumption = None  # an nvidia-ml-py from before the call

    clock = Clock()
    (device,) = NvmlGpuReader(module=OldBinding([PowerCurve(300.0, 0.0, 10.0)], clock), clock=clock).read(None)
    assert device.energy_j is None and device.power_w == pytest.approx(300.0) and device.used_bytes > 0


def test_simulated_readings_are_labelled_simulated() -> None:
    body = ('{"simulated": true, "gpus": [{"memory_used_bytes": 1, "memory_total_bytes": 2, "power_watts": 410.5, '
            '"energy_joules": 1234.5}, {"memory_used_bytes": 1, "memory_total_bytes": 2, "power_watts": 90.0}]}')
    devices = parse_sim_gpu(body)
    scraped = _scrape(FakeGpuReader(devices, source="simulator"))
    assert scraped["gpu_power_watts", (("gpu", "sim0"), ("simulated", "true"))] == 410.5
    assert scraped["gpu_energy_joules_total", (("gpu", "sim0"), ("simulated", "true"))] == 1234.5
    assert ("gpu_energy_joules_total", (("gpu", "sim1"), ("simulated", "true"))) not in scraped
    with pytest.raises(ValueError, match="power_watts"):
        parse_sim_gpu('{"simulated": true, "gpus": [{"memory_used_bytes": 1, "memory_total_bytes": 2, '
                      '"power_watts": -3}]}')


def test_cpu_package_energy_or_its_absence() -> None:
    cpu = FakeCpuEnergyReader([CpuPackage("package-0", 1500.25), CpuPackage("package-1", 900.0)], source="rapl")
    scraped = _scrape(cpu=cpu)
    assert scraped["cpu_energy_up", (("source", "rapl"),)] == 1.0
    assert scraped["cpu_energy_joules_total", (("package", "package-0"),)] == 1500.25
    assert scraped["cpu_energy_joules_total", (("package", "package-1"),)] == 900.0
    refused = FakeCpuEnergyReader(error=CpuEnergyUnavailable("permission denied reading x"), source="rapl")
    scraped = _scrape(cpu=refused)
    assert scraped["cpu_energy_up", (("source", "rapl"),)] == 0.0
    assert not any(name == "cpu_energy_joules_total" for name, _ in scraped)
    assert not any(name.startswith("cpu_energy") for name, _ in _scrape())  # no reader: nothing said


def test_a_simulated_node_publishes_no_host_cpu_energy() -> None:
    """The host that runs a simulator is not the node it models (as its real GPUs are hidden)."""
    sim = FakeGpuReader([GpuDevice("sim0", "simulated", 1.0, 2.0, simulated=True, power_w=90.0)], source="simulator")
    cpu = FakeCpuEnergyReader([CpuPackage("package-0", 10.0)], source="rapl")
    assert not any(n.startswith("cpu_energy") for n, _ in _scrape(sim, cpu=cpu, replace=True))
    assert ("cpu_energy_up", (("source", "rapl"),)) in _scrape(sim, cpu=cpu, replace=False)


def test_the_cpu_energy_setting_is_checked() -> None:
    with pytest.raises(ValueError, match="--cpu-energy must be auto, rapl or none"):
        ExporterConfig(runtime_url="http://127.0.0.1:8080", cpu_energy="msr")
