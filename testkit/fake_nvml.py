"""A fake NVML binding (``pynvml``'s functions) whose GPUs draw a known power curve, for the energy tests.

Each device draws ``P(t) = base_w + swing_w * sin(2 pi t / period_s)`` on the injected clock. Its total-energy
counter (``nvmlDeviceGetTotalEnergyConsumption``, millijoules) is that curve integrated in closed form from
``t = 0``, and its power reading (``nvmlDeviceGetPowerUsage``, milliwatts) the mean over the last second, as
NVML's is on most boards. A device built with ``counter=False`` raises NVML's not-supported error for the
counter, as a pre-Volta board does. ``joules(device, a, b)`` is the truth a window's energy is held to: the
integral itself, never a reading.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import SimpleNamespace

__all__ = ["FakeNvml", "PowerCurve"]


@dataclass(frozen=True)
class PowerCurve:
    base_w: float
    swing_w: float
    period_s: float
    counter: bool = True
    name: str = "NVIDIA H100 80GB HBM3"
    total_bytes: int = 85_520_809_984
    used_bytes: int = 20_000_000_000

    def energy(self, t: float) -> float:
        """Joules from 0 to ``t``."""
        w = 2 * math.pi / self.period_s
        return self.base_w * t + self.swing_w * (1 - math.cos(w * t)) / w


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):
    pass


class FakeNvml:
    """The subset of ``pynvml`` that ``exporter.gpu.NvmlGpuReader`` calls."""

    NVMLError = NVMLError
    NVMLError_NotSupported = NVMLError_NotSupported

    def __init__(self, devices: Sequence[PowerCurve], clock: Callable[[], float]) -> None:
        self.devices = tuple(devices)
        self.clock = clock

    def joules(self, device: int, a: float, b: float) -> float:
        """The truth: device ``device``'s energy from ``a`` to ``b``."""
        curve = self.devices[device]
        return curve.energy(b) - curve.energy(a)

    def nvmlInit(self) -> None:
        pass

    def nvmlSystemGetDriverVersion(self) -> str:
        return "550.54.15"

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetName(self, handle: int) -> str:
        return self.devices[handle].name

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        curve = self.devices[handle]
        free = curve.total_bytes - curve.used_bytes
        return SimpleNamespace(used=curve.used_bytes, total=curve.total_bytes, free=free)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[SimpleNamespace]:
        return []

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        curve, t = self.devices[handle], self.clock()
        return round(1000 * (curve.energy(t) - curve.energy(t - 1.0)))

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: int) -> int:
        curve = self.devices[handle]
        if not curve.counter:
            raise NVMLError_NotSupported("Not Supported")
        return round(1000 * curve.energy(self.clock()))
