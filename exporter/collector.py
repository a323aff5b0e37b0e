"""The exporter's custom collector: one fetch of the runtime, its GPUs and its process per scrape.

``collect()`` runs the runtime adapter, the GPU readers and the process reader concurrently within
``budget_s`` and yields fresh metric families (names in DESIGN.md). It never raises: a source that fails
or does not answer in time only removes its own series and sets its ``*_up`` gauge to 0. Per-scrape state
is limited to the previous decode counters (for ``runtime_decode_occupancy_ratio`` and a monotonic
``runtime_busy_slot_decodes_total``, see :mod:`exporter.occupancy`) and the adapter's ``/props`` cache.

With ``simulated_gpu_replaces_real`` (``--gpu auto``), a runtime that turns out to be the simulator has its
simulated GPU published instead of the host's real GPUs, which the simulated runtime does not use.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from exporter.adapter import Clock, RuntimeAdapter
from exporter.gpu import GpuDevice, GpuReader, GpuSourceAbsent
from exporter.occupancy import OccupancyState, advance
from exporter.process import ProcessReader, ProcessReading
from exporter.snapshot import RuntimeSnapshot

__all__ = ["DEFAULT_BUDGET_S", "RuntimeCollector"]

DEFAULT_BUDGET_S = 0.5
_GRACE_S = 0.1
_RUNTIME_SOURCES = ("health", "metrics", "slots", "props")


@dataclass(frozen=True)
class _GpuOutcome:
    source: str
    devices: tuple[GpuDevice, ...]
    error: str | None
    duration_s: float
    absent: bool = False


def _gauge(name: str, doc: str, value: float | None = None, labels: Sequence[str] = ()) -> GaugeMetricFamily:
    if value is not None:
        return GaugeMetricFamily(name, doc, value=value)
    return GaugeMetricFamily(name, doc, labels=list(labels))


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
    ) -> None:
        self.adapter = adapter
        self.gpu_readers = tuple(gpu_readers)
        self.process_reader = process_reader
        self.budget_s = budget_s
        self.simulated_gpu_replaces_real = simulated_gpu_replaces_real
        self._clock = clock
        self._pool = ThreadPoolExecutor(max_workers=4 + len(self.gpu_readers), thread_name_prefix="collector")
        self._lock = threading.Lock()
        self._occupancy: OccupancyState | None = None

    def describe(self) -> list[Metric]:
        return []

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.adapter.close()

    def collect(self) -> Iterator[Metric]:
        start = self._clock()
        try:
            families = self._scrape(start)
        except Exception as exc:  # collect() must never raise
            families = [_gauge("runtime_up", f"exporter failure: {type(exc).__name__}", 0.0)]
        total = _gauge("exporter_scrape_duration_seconds", "Time this exporter took to answer the scrape.")
        total.add_metric([], self._clock() - start)
        families.append(total)
        yield from families

    def _scrape(self, start: float) -> list[Metric]:
        deadline = start + self.budget_s + _GRACE_S
        runtime_future = self._pool.submit(self.adapter.fetch, self.budget_s)
        process, process_s = self._read_process()
        pid = process.pid if process is not None else None
        gpu_futures = [self._pool.submit(self._read_gpu, reader, pid) for reader in self.gpu_readers]
        pending: list[Future[Any]] = [runtime_future, *gpu_futures]
        wait(pending, timeout=max(0.0, deadline - self._clock()))
        if runtime_future.done() and runtime_future.exception() is None:
            snapshot = runtime_future.result()
        else:
            snapshot = RuntimeSnapshot(flavour=self.adapter.flavour, up=False, sources=())
        families = self._runtime_families(snapshot)
        families += self._process_families(process, process_s)
        outcomes = [
            f.result() if f.done() else _GpuOutcome(r.source, (), "no answer in time", self._clock() - start)
            for r, f in zip(self.gpu_readers, gpu_futures, strict=True)
        ]
        families += self._gpu_families(outcomes)
        return families

    def _read_gpu(self, reader: GpuReader, pid: int | None) -> _GpuOutcome:
        t0 = self._clock()
        try:
            devices = tuple(reader.read(pid))
        except GpuSourceAbsent:
            return _GpuOutcome(reader.source, (), None, self._clock() - t0, absent=True)
        except Exception as exc:
            return _GpuOutcome(reader.source, (), str(exc) or type(exc).__name__, self._clock() - t0)
        return _GpuOutcome(reader.source, devices, None, self._clock() - t0)

    def _read_process(self) -> tuple[ProcessReading | None, float]:
        if self.process_reader is None:
            return None, 0.0
        t0 = self._clock()
        try:
            return self.process_reader.read(), self._clock() - t0
        except Exception:
            return None, self._clock() - t0

    def _runtime_families(self, snap: RuntimeSnapshot) -> list[Metric]:
        out: list[Metric] = [_gauge("runtime_up", "1 when the runtime /health answers 200.", float(snap.up))]
        by_name = {s.name: s for s in snap.sources}
        for name in ("metrics", "slots", "props"):
            src = by_name.get(name)
            doc = f"1 when the runtime /{name} gave usable data this scrape (0: disabled, failing, slow)."
            if name == "props":
                doc += f" /props is slow-changing and cached by the exporter (runtime_{name}_cached)."
            out.append(_gauge(f"runtime_{name}_up", doc, float(src.up) if src else 0.0))
        status = _gauge("runtime_http_status", "HTTP status of each runtime endpoint (0: no answer).",
                        labels=["source"])
        duration = _gauge("runtime_scrape_duration_seconds", "Time to fetch each runtime source (0: cached).",
                          labels=["source"])
        for name in _RUNTIME_SOURCES:
            src = by_name.get(name)
            status.add_metric([name], float(src.http_status or 0) if src else 0.0)
            duration.add_metric([name], src.duration_s if src else self.budget_s)
        out += [status, duration]
        props = by_name.get("props")
        out.append(_gauge("runtime_props_cached", "1 when this scrape reused a cached /props answer.",
                          float(bool(props and props.cached))))
        info = _gauge("runtime_info", "Runtime flavour, model and build (from /props, cached).",
                      labels=[k for k, _ in snap.info])
        if snap.info:
            info.add_metric([v for _, v in snap.info], 1.0)
            out.append(info)
        out += self._state_families(snap)
        return out

    def _state_families(self, snap: RuntimeSnapshot) -> list[Metric]:
        out: list[Metric] = []
        if snap.slots is not None:
            slots = _gauge("runtime_slots", "Slots by state at scrape time (from /slots).", labels=["state"])
            for state in ("idle", "prefill", "decode"):
                slots.add_metric([state], float(getattr(snap.slots, state)))
            out.append(slots)
        if snap.slots_configured is not None:
            out.append(_gauge("runtime_slots_configured", "Configured parallel slots (/slots, else /props).",
                              float(snap.slots_configured)))
        if snap.requests_processing is not None:
            out.append(_gauge("runtime_requests_processing", "Requests holding a slot (runtime's own gauge).",
                              snap.requests_processing))
        if snap.queue_depth is not None:
            out.append(_gauge("runtime_queue_depth", "Requests waiting for a slot (llama.cpp: deferred).",
                              snap.queue_depth))
        ratio = snap.occupancy_ratio
        if ratio is not None:
            out.append(_gauge(
                "runtime_batch_occupancy_ratio",
                "Busy slots / total slots at scrape time (busy from /slots, else requests_processing).",
                ratio))
        for attr, name, doc in (
            ("prompt_tokens_total", "runtime_prompt_tokens", "Prompt tokens processed (uncached)."),
            ("prompt_tokens_cached_total", "runtime_prompt_tokens_cached",
             "Prompt tokens served from the prompt cache (no prefill); not in runtime_prompt_tokens_total."),
            ("output_tokens_total", "runtime_output_tokens", "Output tokens generated."),
            ("decode_steps_total", "runtime_decode_steps", "Batched decode steps (llama_decode calls)."),
        ):
            value = getattr(snap, attr)
            if value is not None:
                out.append(CounterMetricFamily(name, doc, value=value))
        if snap.decode_steps_total is not None and snap.busy_slot_decodes_total is not None:
            with self._lock:
                step = advance(self._occupancy, snap.decode_steps_total, snap.busy_slot_decodes_total,
                               snap.slots_configured)
                self._occupancy = step.state
            out.append(CounterMetricFamily(
                "runtime_busy_slot_decodes",
                "Sum over decode steps of the busy slots in the batch (llama.cpp: n_busy_slots_per_decode "
                "x n_decode_total); rate() / rate(runtime_decode_steps_total) = mean batch size.",
                value=step.busy_published))
            if step.interval_ratio is not None:
                out.append(_gauge(
                    "runtime_decode_occupancy_ratio",
                    "Mean busy slots per decode step / slots, since this exporter's previous scrape.",
                    step.interval_ratio))
        return out

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
        simulator = any(o.source == "simulator" and not o.absent for o in outcomes)
        hide_real = simulator and self.simulated_gpu_replaces_real
        for outcome in outcomes:
            if outcome.absent or (hide_real and outcome.source == "nvml"):
                continue
            up.add_metric([outcome.source], float(outcome.error is None))
            took.add_metric([outcome.source], outcome.duration_s)
            for dev in outcome.devices:
                key = [dev.gpu, "true" if dev.simulated else "false"]
                info.add_metric([dev.gpu, dev.name, key[1]], 1.0)
                used.add_metric(key, dev.used_bytes)
                total.add_metric(key, dev.total_bytes)
                if dev.process_used_bytes is not None:
                    process.add_metric(key, dev.process_used_bytes)
        return [up, took, info, used, total, process]
