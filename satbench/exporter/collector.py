"""The exporter's custom collector: one fetch of the runtime, its GPUs and its process per scrape.

``collect()`` runs the runtime adapter, the GPU readers and the process reader concurrently within
``budget_s`` and yields fresh metric families (names in DESIGN.md). It never raises: a source that fails
or does not answer in time only removes its own series and sets its ``*_up`` gauge to 0. Per-scrape state
is limited to the previous decode counters of each model (for ``runtime_decode_occupancy_ratio`` and a
monotonic ``runtime_busy_slot_decodes_total``, see :mod:`exporter.occupancy`) and the adapter's ``/props``
cache. The runtime series themselves are built in :mod:`exporter.runtime_series`.

Scrapes that come close together share one read of the node (:mod:`exporter.shared_read`): a scrape that
finds a read in flight, or one that began at most ``read_max_age_s`` ago (``--read-max-age-s``, default
``DEFAULT_READ_MAX_AGE_S``, 0.5 s: half the 1 s scrape interval, so a single scraper always reads afresh),
reports that read, so sixteen clients scraping one exporter cost the node about what one does. Each scrape
still answers with its own ``exporter_scrape_duration_seconds``, and says how old its read is
(``exporter_read_age_seconds``, whose HELP states the bound) and whether another scrape made it
(``exporter_read_shared``); every other value, ``*_up`` included, is the shared read's. The occupancy state
steps once per read, not per scrape. ``fingerprints()`` (``GET /fingerprint``) always reads afresh.

``collect_for(model)`` serves ``/metrics?model=NAME`` on a router node: the adapter fetches only that model,
and the node-wide series (runtime, GPU, process) come along, so one exporter can be scraped once per lane.

With ``simulated_gpu_replaces_real`` (``--gpu auto``), a runtime that turns out to be the simulator has its
simulated GPU published instead of the host's real GPUs, which the simulated runtime does not use.

Every scrape also publishes ``runtime_fingerprint_info`` (:mod:`exporter.live_fingerprint`), built from what
the scrape read anyway (``/props``, the process's argv, the GPUs); :meth:`RuntimeCollector.fingerprints`
reads the same sources without publishing (or stepping the occupancy state) for ``GET /fingerprint``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from satbench.exporter.adapter import Clock, RuntimeAdapter
from satbench.exporter.cpu_energy import CpuEnergyReader, CpuPackage
from satbench.exporter.gpu import GpuDevice, GpuReader, GpuSourceAbsent
from satbench.exporter.kvcache import KV_SETTINGS
from satbench.exporter.live_fingerprint import GpuReading, LiveFingerprints, fingerprint_family
from satbench.exporter.occupancy import OccupancyBook
from satbench.exporter.process import ProcessReader, ProcessReading
from satbench.exporter.runtime_series import runtime_series
from satbench.exporter.shared_read import SharedReads
from satbench.exporter.snapshot import RuntimeSnapshot

__all__ = ["DEFAULT_BUDGET_S", "DEFAULT_READ_MAX_AGE_S", "ModelScope", "RuntimeCollector"]

DEFAULT_BUDGET_S = 0.5
DEFAULT_READ_MAX_AGE_S = 0.5  # half the 1 s scrape interval of the session's Prometheus
_GRACE_S = 0.1
_WAIT_SLACK_S = 2.0  # beyond budget and grace, before a scrape gives up on a shared read and reads itself


@dataclass(frozen=True)
class _GpuOutcome:
    source: str
    devices: tuple[GpuDevice, ...]
    error: str | None
    duration_s: float
    absent: bool = False


@dataclass(frozen=True)
class _Gathered:
    """Everything one scrape read, before any series is built."""

    snapshot: RuntimeSnapshot
    process: ProcessReading | None
    process_error: str | None
    process_s: float
    gpus: tuple[_GpuOutcome, ...]
    cpu: tuple[CpuPackage, ...] = ()
    cpu_error: str | None = None


def _gauge(name: str, doc: str, value: float | None = None, labels: Sequence[str] = ()) -> GaugeMetricFamily:
    if value is not None:
        return GaugeMetricFamily(name, doc, value=value)
    return GaugeMetricFamily(name, doc, labels=list(labels))


def _failure(exc: Exception) -> Metric:
    return _gauge("runtime_up", f"exporter failure: {type(exc).__name__}", 0.0)


class RuntimeCollector(Collector):
    """Publishes ``runtime_*`` and ``gpu_*`` for one runtime node; register it on a private registry."""

    def __init__(
        self,
        adapter: RuntimeAdapter,
        gpu_readers: Sequence[GpuReader] = (),
        process_reader: ProcessReader | None = None,
        budget_s: float = DEFAULT_BUDGET_S,
        clock: Clock = time.monotonic,
        simulated_gpu_replaces_real: bool = False,
        kv_unified: str = "auto",
        fingerprints: LiveFingerprints | None = None,
        read_max_age_s: float = 0.0,
        cpu_energy_reader: CpuEnergyReader | None = None,
    ) -> None:
        """``read_max_age_s`` 0 (the default here; ``satbench exporter`` uses ``DEFAULT_READ_MAX_AGE_S``):
        every scrape reads the node. ``cpu_energy_reader``: the host's CPU package energy (None: not
        published); with ``simulated_gpu_replaces_real`` it is not published for a simulator either (the host
        that runs a simulated node is not the node)."""
        if kv_unified not in KV_SETTINGS:
            raise ValueError(f"--kv-unified must be one of {', '.join(KV_SETTINGS)}, got {kv_unified!r}")
        self.adapter = adapter
        self.kv_unified = kv_unified
        self.gpu_readers = tuple(gpu_readers)
        self.process_reader = process_reader
        self.cpu_energy_reader = cpu_energy_reader
        self.budget_s = budget_s
        self.simulated_gpu_replaces_real = simulated_gpu_replaces_real
        self._clock = clock
        self._pool = ThreadPoolExecutor(max_workers=4 + len(self.gpu_readers), thread_name_prefix="collector")
        self._occupancy = OccupancyBook()
        self._fingerprints = fingerprints if fingerprints is not None else LiveFingerprints()
        self._reads: SharedReads[list[Metric]] = SharedReads(read_max_age_s, clock,
                                                             budget_s + _GRACE_S + _WAIT_SLACK_S)

    def describe(self) -> list[Metric]:
        return []

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.adapter.close()
        self._fingerprints.close()

    def collect(self) -> Iterator[Metric]:
        return self.collect_for(None)

    def for_model(self, model: str) -> ModelScope:
        """A collector publishing only ``model`` of a router node (plus the node-wide series)."""
        return ModelScope(self, model)

    def collect_for(self, model: str | None) -> Iterator[Metric]:
        start = self._clock()
        try:
            read = self._reads.get(model, lambda: self._read_node(model))
            families, began, shared = list(read.value), read.began, read.shared
        except Exception as exc:  # collect() must never raise
            families, began, shared = [_failure(exc)], start, False
        end = self._clock()
        max_age = self._reads.max_age_s
        families.append(_gauge(
            "exporter_read_age_seconds",
            f"Seconds since the node read this scrape reports began: scrapes within --read-max-age-s "
            f"({max_age:g} s; 0: off) share one read of the runtime, its GPUs and its process, so every other "
            f"value here, *_up included, may be up to that old (plus one read).", max(0.0, end - began)))
        families.append(_gauge("exporter_read_shared",
                               "1 when this scrape reports a read another scrape made (see exporter_read_age_seconds).",
                               float(shared)))
        families.append(_gauge("exporter_scrape_duration_seconds",
                               "Time this exporter took to answer this scrape (its own, also with a shared read).",
                               end - start))
        yield from families

    def _read_node(self, model: str | None) -> list[Metric]:
        """One read of the node, as the families a scrape publishes (never raises)."""
        try:
            return self._scrape(self._clock(), model)
        except Exception as exc:
            return [_failure(exc)]

    def _fetch(self, model: str | None) -> RuntimeSnapshot:
        if model is None:
            return self.adapter.fetch(self.budget_s)
        return self.adapter.fetch(self.budget_s, model=model)

    def fingerprints(self, model: str | None = None) -> dict[str | None, dict[str, Any]]:
        """The live fingerprint(s), read now: ``{None: fp}`` on a single-model node, ``{model: fp}`` per
        loaded model of a router (``model`` narrows a router to that one). Publishes nothing."""
        got = self._gather(self._clock(), model)
        return self._fingerprints.build(got.snapshot, got.process, got.process_error, self._readings(got.gpus),
                                        wait_s=self._fingerprints.sample_wait_s)

    def _gather(self, start: float, model: str | None) -> _Gathered:
        deadline = start + self.budget_s + _GRACE_S
        runtime_future = self._pool.submit(self._fetch, model)
        process, process_error, process_s = self._read_process()
        pid = process.pid if process is not None else None
        gpu_futures = [self._pool.submit(self._read_gpu, reader, pid) for reader in self.gpu_readers]
        pending: list[Future[Any]] = [runtime_future, *gpu_futures]
        cpu, cpu_error = self._read_cpu_energy()
        wait(pending, timeout=max(0.0, deadline - self._clock()))
        if runtime_future.done() and runtime_future.exception() is None:
            snapshot = runtime_future.result()
        else:
            snapshot = RuntimeSnapshot(flavour=self.adapter.flavour, up=False, sources=())
        outcomes = tuple(
            f.result() if f.done() else _GpuOutcome(r.source, (), "no answer in time", self._clock() - start)
            for r, f in zip(self.gpu_readers, gpu_futures, strict=True)
        )
        return _Gathered(snapshot, process, process_error, process_s, outcomes, cpu, cpu_error)

    def _scrape(self, start: float, model: str | None) -> list[Metric]:
        got = self._gather(start, model)
        self._fingerprints.note(got.snapshot)
        argv = got.process.cmdline if got.process is not None else None
        environ = dict(got.process.environ) if got.process is not None and got.process.environ is not None else None
        families = runtime_series(got.snapshot, self.budget_s, argv, self.kv_unified, self._occupancy, environ)
        families += self._process_families(got.process, got.process_s)
        families += self._gpu_families(got.gpus)
        families += self._cpu_energy_families(got)
        try:
            fps = self._fingerprints.build(got.snapshot, got.process, got.process_error, self._readings(got.gpus))
        except Exception:  # the fingerprint must never cost the scrape its other series
            fps = {}
        if fps:
            families.append(fingerprint_family(fps, self._fingerprints.signer))
        return families

    def _visible(self, outcomes: Sequence[_GpuOutcome]) -> list[_GpuOutcome]:
        """The GPU sources published: applicable ones, the real GPUs hidden behind a simulated one."""
        simulator = any(o.source == "simulator" and not o.absent for o in outcomes)
        hide_real = simulator and self.simulated_gpu_replaces_real
        return [o for o in outcomes if not o.absent and not (hide_real and o.source == "nvml")]

    def _readings(self, outcomes: Sequence[_GpuOutcome]) -> list[GpuReading]:
        return [GpuReading(o.source, o.devices, o.error) for o in self._visible(outcomes)]

    def _read_gpu(self, reader: GpuReader, pid: int | None) -> _GpuOutcome:
        t0 = self._clock()
        try:
            devices = tuple(reader.read(pid))
        except GpuSourceAbsent:
            return _GpuOutcome(reader.source, (), None, self._clock() - t0, absent=True)
        except Exception as exc:
            return _GpuOutcome(reader.source, (), str(exc) or type(exc).__name__, self._clock() - t0)
        return _GpuOutcome(reader.source, devices, None, self._clock() - t0)

    def _read_process(self) -> tuple[ProcessReading | None, str | None, float]:
        if self.process_reader is None:
            return None, None, 0.0
        t0 = self._clock()
        try:
            return self.process_reader.read(), None, self._clock() - t0
        except Exception as exc:
            return None, str(exc) or type(exc).__name__, self._clock() - t0

    def _read_cpu_energy(self) -> tuple[tuple[CpuPackage, ...], str | None]:
        if self.cpu_energy_reader is None:
            return (), None
        try:
            return tuple(self.cpu_energy_reader.read()), None
        except Exception as exc:
            return (), str(exc) or type(exc).__name__

    def _cpu_energy_families(self, got: _Gathered) -> list[Metric]:
        reader = self.cpu_energy_reader
        simulator = any(o.source == "simulator" and not o.absent for o in got.gpus)
        if reader is None or (simulator and self.simulated_gpu_replaces_real):
            return []
        up = _gauge("cpu_energy_up", "1 when the host's CPU package energy could be read (rapl: powercap; "
                    "0: absent or not readable, often root only).", labels=["source"])
        up.add_metric([reader.source], float(got.cpu_error is None))
        energy = CounterMetricFamily("cpu_energy_joules", "CPU package energy (cores and uncore; not DRAM, not the "
                                     "host) since the exporter's first read, counter wraps undone.",
                                     labels=["package"])
        for package in got.cpu:
            energy.add_metric([package.package], package.joules_total)
        return [up, energy]

    def _process_families(self, reading: ProcessReading | None, took: float) -> list[Metric]:
        out: list[Metric] = [_gauge("runtime_process_up", "1 when the runtime process was found and read.",
                                    float(reading is not None))]
        if reading is not None:
            out.append(_gauge("runtime_process_resident_memory_bytes",
                              "Resident memory of the runtime process.", reading.rss_bytes))
        out.append(_gauge("runtime_process_scrape_duration_seconds",
                          "Time to read the runtime process.", took))
        return out

    def _gpu_families(self, outcomes: Sequence[_GpuOutcome]) -> list[Metric]:
        up = _gauge("gpu_up", "1 when the GPU source could be read (nvml: real GPUs; simulator: /sim/gpu).",
                    labels=["source"])
        took = _gauge("gpu_scrape_duration_seconds", "Time to read each GPU source.", labels=["source"])
        labels = ["gpu", "simulated"]
        used = _gauge("gpu_memory_used_bytes", 'GPU memory used (simulated="true": the simulator\'s model).',
                      labels=labels)
        total = _gauge("gpu_memory_total_bytes", "GPU memory total.", labels=labels)
        process = _gauge("runtime_gpu_memory_used_bytes", "GPU memory used by the runtime process.",
                         labels=labels)
        info = _gauge("gpu_info", "1 per GPU, naming it (NVML's device name, or the simulator's modelled one).",
                      labels=["gpu", "name", "simulated"])
        power = _gauge("gpu_power_watts", "GPU power draw (NVML: its reading, about a one-second mean).",
                       labels=labels)
        energy = CounterMetricFamily("gpu_energy_joules", "GPU energy since the driver loaded (NVML's total-energy "
                                     "counter; absent where the device has none).", labels=labels)
        for outcome in self._visible(outcomes):
            up.add_metric([outcome.source], float(outcome.error is None))
            took.add_metric([outcome.source], outcome.duration_s)
            for dev in outcome.devices:
                key = [dev.gpu, "true" if dev.simulated else "false"]
                info.add_metric([dev.gpu, dev.name, key[1]], 1.0)
                used.add_metric(key, dev.used_bytes)
                total.add_metric(key, dev.total_bytes)
                if dev.process_used_bytes is not None:
                    process.add_metric(key, dev.process_used_bytes)
                if dev.power_w is not None:
                    power.add_metric(key, dev.power_w)
                if dev.energy_j is not None:
                    energy.add_metric(key, dev.energy_j)
        return [up, took, info, used, total, process, power, energy]


class ModelScope(Collector):
    """``/metrics?model=NAME``: the collector's scrape narrowed to one model of a router node."""

    def __init__(self, collector: RuntimeCollector, model: str) -> None:
        self.collector = collector
        self.model = model

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        return self.collector.collect_for(self.model)
