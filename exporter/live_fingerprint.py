"""The live fingerprint of a runtime node: what its answers would be measured on right now.

:mod:`core.fingerprint` defines the fingerprint and compares two of them; this module gathers the live
one from what the exporter already reads each scrape, so publishing it adds no request to the runtime:

- ``/props`` (the adapter's, cached ``--props-ttl-s``): build, model path, slot count, context per slot;
- the runtime process's command line (``exporter.process``; in router mode the child's argv from
  ``/v1/models``): batch, micro-batch, flash attention, KV cache types, GPU layers;
- the model files named by ``/props`` ``model_path``, read through the runtime process's own view
  (relative to its working directory, else under ``/proc/PID/root``), sized every scrape and hashed once
  on a background thread (``sha256`` null with reason ``hashing`` until done). A runtime whose process is
  not on this host has its model path only;
- the GPUs the collector publishes (the simulator's modelled GPU when it replaces the host's; a source
  that fails this scrape keeps its last good facts, which do not change while the host runs) and the
  host's CPU (``/proc/cpuinfo`` model name and logical core count, read once).

A restart with other settings shows once the cached ``/props`` expires (``--props-ttl-s``) and the process
reader has found the new process. The series is ``runtime_fingerprint_info{<core.fingerprint.INFO_LABELS>}
1``; on a router node one per loaded model, whose ``model`` label is the model id (as on every per-model
series) and ``model_path`` the path.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
from prometheus_client.metrics_core import Metric

from core.fingerprint import ModelHasher, cpu_facts, gpu_facts, info_labels, model_file_facts, node_fingerprint
from exporter.gpu import GpuDevice
from exporter.process import ProcessReading
from exporter.snapshot import RuntimeSnapshot

__all__ = ["FINGERPRINT_SERIES", "GpuReading", "LiveFingerprints", "fingerprint_family", "read_cpu"]

FINGERPRINT_SERIES = "runtime_fingerprint_info"
_DOC = ("1 per runtime (per loaded model on a router): what answers measured now are valid for; "
        "a label is empty when unknown (GET /fingerprint says why).")
REMOTE = "the runtime is not on this host (remote runtime: no --runtime-pid and the URL's host is not this one)"


@dataclass(frozen=True)
class GpuReading:
    """One GPU source as the collector publishes it this scrape (``error`` None: read)."""

    source: str
    devices: tuple[GpuDevice, ...]
    error: str | None = None


def read_cpu(path: str = "/proc/cpuinfo") -> tuple[str | None, str | None]:
    """The host's CPU (``"<model name> (<n> cores)"``) and, when it cannot tell, why."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return None, f"cannot read {path}: {exc.strerror or exc}"
    cpu = cpu_facts(text, os.cpu_count())
    return cpu, None if cpu is not None else f"{path} names no CPU model"


class LiveFingerprints:
    """Builds the fingerprint of each runtime (model) of a scrape; owns the background model hasher."""

    def __init__(self, hasher: ModelHasher | None = None, cpu: tuple[str | None, str | None] | None = None) -> None:
        self.hasher = hasher if hasher is not None else ModelHasher()
        self._cpu = cpu if cpu is not None else read_cpu()
        self._last_gpus: dict[str, tuple[GpuDevice, ...]] = {}
        self._cwd: tuple[int, str | None] | None = None
        self._lock = threading.Lock()

    def close(self) -> None:
        self.hasher.close()

    def build(
        self,
        snapshot: RuntimeSnapshot,
        process: ProcessReading | None,
        process_error: str | None,
        gpus: Sequence[GpuReading],
    ) -> dict[str | None, dict[str, Any]]:
        """``{None: fingerprint}`` for a single-model node, ``{model: fingerprint}`` per loaded model of a
        router (a model not loaded, or whose endpoints did not answer, has none)."""
        hardware, reasons = self._hardware(gpus)
        if process is None:
            argv_reason = process_error or REMOTE
        elif process.cmdline is None:
            argv_reason = "the OS does not show the runtime process's command line"
        else:
            argv_reason = ""
        argv = process.cmdline if process is not None else None
        pid = process.pid if process is not None else None
        if not snapshot.router:
            return {None: self._one(snapshot, argv, argv_reason, pid, process_error, hardware, reasons)}
        out: dict[str | None, dict[str, Any]] = {}
        for view in snapshot.models:
            if view.snapshot is not None:
                out[view.name] = self._one(view.snapshot, view.args or argv, argv_reason, pid, process_error,
                                           hardware, reasons)
        return out

    def _one(
        self, snap: RuntimeSnapshot, argv: Sequence[str] | None, argv_reason: str, pid: int | None,
        process_error: str | None, hardware: Mapping[str, Any], hardware_reasons: Mapping[str, str],
    ) -> dict[str, Any]:
        reasons = dict(hardware_reasons)
        props = snap.props
        if props is None:
            source = snap.source("props")
            reasons["props"] = (source.error if source is not None and source.error else "no answer")
        if argv is None or not argv:
            argv, reasons["argv"] = None, argv_reason or "not known"
        path = props.get("model_path") if props is not None else None
        files, why = self._files(path if isinstance(path, str) and path and path != "none" else None, pid,
                                 process_error)
        if why is not None:
            reasons["model.files"] = why
        return node_fingerprint(props=props, argv=argv, hardware=hardware, model_files=files, reasons=reasons)

    def _files(
        self, path: str | None, pid: int | None, process_error: str | None
    ) -> tuple[list[dict[str, Any]] | None, str | None]:
        if path is None:
            return None, "the runtime names no model file (/props model_path)"
        if pid is None:
            where = process_error or REMOTE
            return None, f"the runtime's process is not found on this host ({where}): /props model_path only"
        tried = self._candidates(Path(path), pid)
        if not tried:
            return None, f"the runtime's working directory cannot be read, so its model file {path} is not found"
        for candidate in tried:
            try:
                if not candidate.is_file():
                    continue
                return model_file_facts(candidate, hasher=self.hasher), None
            except OSError as exc:  # another user's /proc/PID/root, a split missing
                return None, f"cannot read the model file {candidate}: {exc.strerror or exc}"
        return None, f"no model file {path} on this host as the runtime sees it (tried {', '.join(map(str, tried))})"

    def _candidates(self, path: Path, pid: int) -> list[Path]:
        if not path.is_absolute():
            cwd = self._process_cwd(pid)
            if cwd is None:
                return []
            path = Path(cwd) / path
        inside = Path(f"/proc/{pid}/root") / path.relative_to(path.anchor)  # the process's own mount view
        return list(dict.fromkeys([path, inside]))

    def _process_cwd(self, pid: int) -> str | None:
        with self._lock:
            if self._cwd is not None and self._cwd[0] == pid:
                return self._cwd[1]
        try:
            cwd: str | None = psutil.Process(pid).cwd()
        except psutil.Error:
            cwd = None
        with self._lock:
            self._cwd = (pid, cwd)
        return cwd

    def _hardware(self, gpus: Sequence[GpuReading]) -> tuple[dict[str, Any], dict[str, str]]:
        reasons: dict[str, str] = {}
        chosen: tuple[str, tuple[GpuDevice, ...]] | None = None
        # the simulator's GPU first: when it is published, the runtime is the simulator and uses it
        ordered = sorted(gpus, key=lambda g: g.source != "simulator")
        for reading in ordered:
            if reading.error is None:
                self._last_gpus[reading.source] = reading.devices
                chosen = (reading.source, reading.devices)
                break
            if reading.source in self._last_gpus:
                chosen = (reading.source, self._last_gpus[reading.source])
                break
        if chosen is None:
            errors = "; ".join(f"{g.source}: {g.error}" for g in gpus if g.error)
            gpu_reason = f"the GPUs cannot be read ({errors})" if errors else "no GPU source is read (--gpu none)"
            facts: dict[str, Any] = dict.fromkeys(("gpu", "gpu_count", "gpu_memory_bytes", "driver"))
            reasons.update({f"hardware.{k}": gpu_reason for k in facts})
        else:
            source, devices = chosen
            facts = gpu_facts([{"name": d.name, "memory_bytes": d.total_bytes, "driver": d.driver} for d in devices])
            if not devices:
                reasons["hardware.gpu"] = f"{source} sees no GPU"
                reasons["hardware.driver"] = f"{source} sees no GPU"
            elif facts["driver"] is None:
                simulated = all(d.simulated for d in devices)
                reasons["hardware.driver"] = ("a simulated GPU (the simulator's /sim/gpu) has no driver" if simulated
                                              else f"{source} gave no driver version")
        cpu, cpu_reason = self._cpu
        if cpu is None:
            reasons["hardware.cpu"] = cpu_reason or "unknown"
        return {**facts, "cpu": cpu}, reasons


def fingerprint_family(fingerprints: Mapping[str | None, Mapping[str, Any]]) -> Metric:
    """``runtime_fingerprint_info`` with one sample per fingerprint (``model`` + ``model_path`` on a router)."""
    family = Metric(FINGERPRINT_SERIES, _DOC, "gauge")
    for model, fp in fingerprints.items():
        labels = info_labels(fp)
        if model is not None:
            labels["model_path"] = labels["model"]
            labels["model"] = model
        family.add_sample(FINGERPRINT_SERIES, labels, 1.0)
    return family
