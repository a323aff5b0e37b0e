"""GPU memory readers: NVML for real GPUs, the simulator's ``/sim/gpu`` for simulated ones, a fake for tests.

A :class:`GpuReader` returns every device it sees, or raises :class:`GpuUnavailable` (no driver, no NVML
library, no permission): the collector then publishes ``gpu_up{source=...} 0`` and carries on, because a node
without an NVIDIA GPU is a normal case. A reader that does not apply at all (the runtime is not a
simulator) raises :class:`GpuSourceAbsent` and publishes nothing.

Simulated readings are published as ``gpu="sim0"``, ``gpu="sim1"``... with ``simulated="true"`` on every
``gpu_*`` series (real GPUs: their NVML index and ``simulated="false"``), so a simulated number can never be
mistaken for a real one, and ``{simulated="false"}`` selects hardware only.

NVML also lists the compute processes on each GPU with their memory where the driver allows (not inside
some containers, not for other users' processes without privileges); the runtime process's share is
published as ``runtime_gpu_memory_used_bytes``. The driver version (NVML's) goes into the runtime's
fingerprint, not into a series of its own.

Power and energy: NVML's power reading (``nvmlDeviceGetPowerUsage``, milliwatts: a one-second mean on most
boards) and, where the device has one (Volta and later), its total-energy counter
(``nvmlDeviceGetTotalEnergyConsumption``, millijoules since the driver loaded). A window's energy is the
counter's increase where there is one, else the power samples integrated over the window (the recommender says
which, ``core.energy``); a reading NVML does not support (or a binding too old to ask) is None, never a guess.
"""

from __future__ import annotations

import importlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = [
    "FakeGpuReader",
    "GpuDevice",
    "GpuReader",
    "GpuSourceAbsent",
    "GpuUnavailable",
    "NvmlGpuReader",
    "parse_sim_gpu",
]


class GpuUnavailable(Exception):
    """The source applies but cannot be read now (``gpu_up{source} 0``)."""


class GpuSourceAbsent(Exception):
    """The source does not apply to this node; nothing is published for it."""


@dataclass(frozen=True)
class GpuDevice:
    gpu: str
    name: str
    used_bytes: float
    total_bytes: float
    simulated: bool = False
    process_used_bytes: float | None = None
    driver: str | None = None  # NVML's driver version (the fingerprint's hardware.driver); None: simulated
    power_w: float | None = None  # the draw now (NVML: about a one-second mean); None: not supported
    energy_j: float | None = None  # total energy since the driver loaded; None: no counter on this device


class GpuReader(Protocol):
    source: str

    def read(self, pid: int | None) -> Sequence[GpuDevice]: ...


class FakeGpuReader:
    """Returns fixed devices, or raises ``error`` when one is given."""

    def __init__(
        self, devices: Sequence[GpuDevice] = (), source: str = "fake", error: Exception | None = None
    ) -> None:
        self.source = source
        self.devices = tuple(devices)
        self.error = error
        self.reads = 0

    def read(self, pid: int | None) -> Sequence[GpuDevice]:
        self.reads += 1
        if self.error is not None:
            raise self.error
        return self.devices


def _number(entry: Mapping[str, Any], *keys: str) -> float:
    for key in keys:
        value = entry.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
            return float(value)
    raise ValueError(f"/sim/gpu entry lacks a non-negative number under {keys[0]!r}")


def _optional(value: Any, key: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise ValueError(f"/sim/gpu {key} is not a non-negative number")
    return float(value)


def parse_sim_gpu(body: str) -> tuple[GpuDevice, ...]:
    """Devices from a ``/sim/gpu`` body. Refuses (ValueError) anything not flagged ``"simulated": true``."""
    data = json.loads(body)
    if not isinstance(data, Mapping):
        raise ValueError("/sim/gpu did not return a JSON object")
    if data.get("simulated") is not True:
        raise ValueError('/sim/gpu reading is not flagged "simulated": true')
    entries = data.get("gpus")
    if entries is None:
        entries = [data]
    if not isinstance(entries, list):
        raise ValueError("/sim/gpu 'gpus' is not a list")
    devices = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, Mapping):
            raise ValueError("/sim/gpu entry is not an object")
        used = _number(entry, "memory_used_bytes", "used_bytes", "used")
        total = _number(entry, "memory_total_bytes", "total_bytes", "total")
        process = entry.get("process_used_bytes")
        power, energy = entry.get("power_watts"), entry.get("energy_joules")
        devices.append(
            GpuDevice(
                gpu=f"sim{i}",
                name=str(entry.get("name") or "simulated"),
                used_bytes=used,
                total_bytes=total,
                simulated=True,
                process_used_bytes=float(process) if isinstance(process, int | float) else used,
                power_w=_optional(power, "power_watts"),
                energy_j=_optional(energy, "energy_joules"),
            )
        )
    return tuple(devices)


class NvmlGpuReader:
    """Real GPUs through NVML (``pynvml`` from nvidia-ml-py). A failed init is retried every ``retry_s``."""

    source = "nvml"

    def __init__(self, retry_s: float = 30.0, clock: Callable[[], float] = time.monotonic,
                 module: Any = None) -> None:
        """``module``: NVML's Python binding (default: ``pynvml``), or a fake with the same functions."""
        self._module = module
        self._retry_s = retry_s
        self._clock = clock
        self._ready = False
        self._failed_at: float | None = None
        self._failure = ""

    def _init(self) -> Any:
        pynvml = self._module
        if pynvml is None:
            try:
                pynvml = importlib.import_module("pynvml")
            except ImportError as exc:
                raise GpuUnavailable(f"pynvml not installed: {exc}") from exc
        if self._ready:
            return pynvml
        if self._failed_at is not None and self._clock() - self._failed_at < self._retry_s:
            raise GpuUnavailable(self._failure)
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            self._failed_at = self._clock()
            self._failure = f"NVML unavailable: {exc}"
            raise GpuUnavailable(self._failure) from exc
        self._ready = True
        return pynvml

    def read(self, pid: int | None) -> Sequence[GpuDevice]:
        nvml = self._init()
        devices = []
        driver = self._driver(nvml)
        try:
            for index in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                memory = nvml.nvmlDeviceGetMemoryInfo(handle)
                name = nvml.nvmlDeviceGetName(handle)
                devices.append(
                    GpuDevice(
                        gpu=str(index),
                        name=name.decode() if isinstance(name, bytes) else str(name),
                        used_bytes=float(memory.used),
                        total_bytes=float(memory.total),
                        process_used_bytes=self._process_memory(nvml, handle, pid),
                        driver=driver,
                        power_w=self._scaled(nvml, "nvmlDeviceGetPowerUsage", handle),
                        energy_j=self._scaled(nvml, "nvmlDeviceGetTotalEnergyConsumption", handle),
                    )
                )
        except nvml.NVMLError as exc:
            raise GpuUnavailable(f"NVML read failed: {exc}") from exc
        return devices

    @staticmethod
    def _scaled(nvml: Any, function: str, handle: Any) -> float | None:
        """A milli-unit reading (mW, mJ) in base units; None where the device or the binding lacks it."""
        read = getattr(nvml, function, None)
        if read is None:
            return None
        try:
            value = read(handle)
        except nvml.NVMLError:
            return None
        return float(value) / 1000.0

    @staticmethod
    def _driver(nvml: Any) -> str | None:
        try:
            version = nvml.nvmlSystemGetDriverVersion()
        except nvml.NVMLError:
            return None
        return version.decode() if isinstance(version, bytes) else str(version)

    @staticmethod
    def _process_memory(nvml: Any, handle: Any, pid: int | None) -> float | None:
        if pid is None:
            return None
        try:
            processes = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
        except nvml.NVMLError:
            return None
        used = [p.usedGpuMemory for p in processes if p.pid == pid and p.usedGpuMemory is not None]
        return float(sum(used)) if used else 0.0
