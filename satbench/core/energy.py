"""Energy over a step window, per token, and what it costs: one definition for every path that reports it.

**What is measured.** The lane's GPUs, each by NVML's total-energy counter where the device has one (Volta and
later: ``nvmlDeviceGetTotalEnergyConsumption``): the window's energy is the counter's increase. A device without
the counter is measured by its power samples (``nvmlDeviceGetPowerUsage``, about a one-second mean on most
boards): each sample is the mean draw over the interval since the one before, integrated over the window,
which is right to the extent the samples tile it (one a second at the session's one-second scrape). A lane's
energy is every GPU's summed, or none where one of them has no reading (a partial sum would read as a real,
lower figure). ``gpu_source`` says which: ``counter``,
``samples``, or ``counter+samples`` for a lane whose GPUs differ. The simulator models its GPUs' draw step by
step (``simulator.power``), so every path runs without a GPU, labelled simulated as its memory is.

The host's CPU package energy (RAPL through powercap, ``exporter.cpu_energy``) is measured where the exporter
runs beside the runtime and the kernel lets it read the counter; it is the package (cores and uncore), not the
DRAM nor the whole host. Absent, it is unknown, never a guess.

What a lane's figure covers is its exporter's: NVML lists every GPU of the host the exporter runs on, and the CPU
package runs whatever else the host runs (where the load generator, Prometheus or another lane share the host,
their draw is in it); two lanes of one node measured at once share one draw. The session walks a node's lanes
one after the other where it can, and ``scope`` says what was read; it is never the lane's share of a host.

**At the window's edges.** A window starts and ends between scrapes. Prometheus' ``increase`` stretches the
mean rate between the first and last samples inside the window over the whole window, which errs by the change
of power across a scrape interval at each edge (a percent on a 30 s window whose draw swings by a third). Here
the raw samples around the window are read instead (``promql.window_samples``) and the counter is interpolated
linearly at the window's start and end (a counter reset, a restarted exporter, is undone as ``increase`` does);
power samples, each the mean over the interval since the one before, are integrated over exactly the window.
A device whose samples leave an edge uncovered by more than two scrape intervals has no figure: a guess is
never a reading.

**Per token.** ``joules_per_token`` is the window's energy over the output tokens that arrived in it (the
throughput's own count), ``tokens_per_joule`` its inverse: the efficiency figures MLPerf Power and the ML.ENERGY
leaderboard publish (energy per output token), here per rung. Which energy: the GPUs' where the lane has any
(``scope`` ``gpu``: what an accelerator node is bought and powered for), else the CPU package's (``cpu-package``:
a CPU-only node). Both readings stay in the figures, so a CPU-offloaded model's host share is seen beside it.
A node's wall power (fans, PSU losses, NICs) is more than either: ``scope`` says what the figure covers.

**Per kilowatt and per price.** At an answer, ``tok_s_per_kw`` is the rung's throughput over its mean draw in
kW (AgentPerf's per-megawatt figures, at rack scale); with a node price per hour (``policy.cost``), the cost of a
million output tokens at that rung's throughput (``price / 3600 / throughput * 1e6``) and the node's price per
hour: the price of the node, whatever part of it the lane uses.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "COUNTER_METRICS",
    "CPU_COUNTER",
    "GPU_COUNTER",
    "GPU_POWER",
    "EnergyFigures",
    "EnergyReadings",
    "EnergySource",
    "Samples",
    "cost_per_million_tokens",
    "counter_increase",
    "energy_figures",
    "power_integral",
    "tokens_per_s_per_kw",
    "window_readings",
]

GPU_COUNTER = "gpu_energy_joules_total"
GPU_POWER = "gpu_power_watts"
CPU_COUNTER = "cpu_energy_joules_total"
COUNTER_METRICS = (GPU_COUNTER, GPU_POWER, CPU_COUNTER)  # what a window's energy is read from

Samples = Sequence[tuple[float, float]]  # (time, value), in time order

EnergySource = Literal["counter", "samples", "counter+samples"]


@dataclass(frozen=True, slots=True)
class EnergyReadings:
    """The raw answers of one window: the GPUs' energy (joules, summed), how many GPUs it came from by counter and
    by power samples alone, and the CPU packages' energy (joules, summed). None: nothing read."""

    gpu_joules: float | None = None
    gpu_counted: int = 0
    gpu_sampled: int = 0
    cpu_joules: float | None = None


@dataclass(frozen=True, slots=True)
class EnergyFigures:
    """Energy over one step window (see the module's docstring). None where nothing was read."""

    gpu_joules: float | None = None
    gpu_watts: float | None = None
    gpu_source: EnergySource | None = None
    cpu_joules: float | None = None
    cpu_watts: float | None = None
    scope: Literal["gpu", "cpu-package"] | None = None
    joules_per_token: float | None = None
    tokens_per_joule: float | None = None

    @property
    def watts(self) -> float | None:
        """The mean draw of what ``scope`` covers."""
        return self.gpu_watts if self.scope == "gpu" else self.cpu_watts if self.scope == "cpu-package" else None

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> EnergyFigures:
        data = data or {}
        return cls(**{name: data.get(name) for name in cls.__slots__})


def _usable(joules: float | None) -> float | None:
    return joules if joules is not None and math.isfinite(joules) and joules >= 0 else None


def energy_figures(readings: EnergyReadings, window_s: float, output_tokens: float) -> EnergyFigures:
    """The window's figures from its readings and the output tokens that arrived in it."""
    gpu = _usable(readings.gpu_joules) if readings.gpu_counted + readings.gpu_sampled else None
    cpu = _usable(readings.cpu_joules)
    if window_s <= 0 or (gpu is None and cpu is None):
        return EnergyFigures()
    source: EnergySource | None = None
    if gpu is not None:
        source = ("counter" if not readings.gpu_sampled else "samples" if not readings.gpu_counted
                  else "counter+samples")
    scoped = gpu if gpu is not None else cpu
    per_token = scoped / output_tokens if scoped is not None and output_tokens > 0 else None
    return EnergyFigures(
        gpu_joules=gpu, gpu_watts=None if gpu is None else gpu / window_s, gpu_source=source,
        cpu_joules=cpu, cpu_watts=None if cpu is None else cpu / window_s,
        scope="gpu" if gpu is not None else "cpu-package",
        joules_per_token=per_token,
        tokens_per_joule=None if scoped is None or scoped <= 0 or output_tokens <= 0 else output_tokens / scoped)


def tokens_per_s_per_kw(throughput_tok_s: float | None, watts: float | None) -> float | None:
    """Output tokens per second per kilowatt drawn."""
    if throughput_tok_s is None or watts is None or watts <= 0:
        return None
    return throughput_tok_s / (watts / 1000.0)


def cost_per_million_tokens(price_per_hour: float | None, throughput_tok_s: float | None) -> float | None:
    """What a million output tokens cost on a node priced ``price_per_hour``, served at ``throughput_tok_s``."""
    if price_per_hour is None or throughput_tok_s is None or throughput_tok_s <= 0:
        return None
    return price_per_hour / 3600.0 / throughput_tok_s * 1e6


def _spacing(samples: Samples) -> float:
    return statistics.median(b[0] - a[0] for a, b in itertools.pairwise(samples))


def _covers(samples: Samples, start: float, end: float, spacing: float) -> bool:
    """Whether the samples reach both edges of the window within two sample intervals."""
    return samples[0][0] - start <= 2 * spacing and end - samples[-1][0] <= 2 * spacing


def _at(points: Samples, t: float) -> float:
    """``points`` (at least two) linearly interpolated at ``t``, or extended by the nearest segment."""
    i = next((k for k in range(1, len(points) - 1) if points[k][0] >= t), len(points) - 1)
    (t0, v0), (t1, v1) = points[i - 1], points[i]
    return v0 + (v1 - v0) * (t - t0) / (t1 - t0) if t1 > t0 else v1


def counter_increase(samples: Samples, start: float, end: float) -> float | None:
    """How much a counter grew from ``start`` to ``end``: its resets undone, interpolated at both edges. None
    with fewer than two samples or edges left uncovered."""
    if len(samples) < 2 or end <= start:
        return None
    spacing = _spacing(samples)
    if not _covers(samples, start, end, spacing):
        return None
    offset, last, total = 0.0, None, []
    for t, v in samples:
        if last is not None and v < last:
            offset += last
        last = v
        total.append((t, v + offset))
    return max(0.0, _at(total, end) - _at(total, start))


def power_integral(samples: Samples, start: float, end: float) -> float | None:
    """Energy from ``start`` to ``end`` of power samples that are each the mean over the interval since the
    sample before (the first: over one median interval; after the last: its value, held). None with fewer than
    two samples, edges left uncovered, or more than two samples missed in a row inside the window."""
    if len(samples) < 2 or end <= start:
        return None
    spacing = _spacing(samples)
    if not _covers(samples, start, end, spacing) or any(
            b[0] - a[0] > 3 * spacing for a, b in itertools.pairwise(samples) if b[0] > start and a[0] < end):
        return None  # an edge uncovered, or a gap of more than two missed samples inside the window
    joules, before = 0.0, min(samples[0][0] - spacing, start)
    for t, watts in samples:
        joules += watts * max(0.0, min(t, end) - max(before, start))
        before = t
    return joules + samples[-1][1] * max(0.0, end - max(before, start))


def _device(labels: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in labels.items() if k != "__name__"))


def window_readings(series: Sequence[tuple[Mapping[str, str], Samples]], start: float, end: float) -> EnergyReadings:
    """A window's readings from the raw samples of ``COUNTER_METRICS`` around it: each GPU by its counter where
    it has one, else by its power samples; the CPU packages by their counters. A device without a usable reading
    leaves its kind None (a partial sum is no reading), as does a kind with no device."""
    by_device: dict[str, dict[tuple[tuple[str, str], ...], Samples]] = {m: {} for m in COUNTER_METRICS}
    for labels, samples in series:
        name = labels.get("__name__", "")
        if name in by_device:
            by_device[name][_device(labels)] = samples
    gpu: list[float | None] = []
    counted = sampled = 0
    for device in by_device[GPU_COUNTER].keys() | by_device[GPU_POWER].keys():
        counter = by_device[GPU_COUNTER].get(device)
        joules = None if counter is None else counter_increase(counter, start, end)
        if joules is not None:
            counted += 1
        elif (power := by_device[GPU_POWER].get(device)) is not None:
            joules = power_integral(power, start, end)
            sampled += joules is not None
        gpu.append(joules)
    cpu = [counter_increase(s, start, end) for s in by_device[CPU_COUNTER].values()]
    return EnergyReadings(gpu_joules=_whole(gpu), gpu_counted=counted, gpu_sampled=sampled, cpu_joules=_whole(cpu))


def _whole(parts: list[float | None]) -> float | None:
    """The sum of every device's energy, or None where any device seen has none: a sum over some of a lane's
    GPUs would read as a real, lower figure."""
    if not parts or any(p is None for p in parts):
        return None
    return sum(p for p in parts if p is not None)
