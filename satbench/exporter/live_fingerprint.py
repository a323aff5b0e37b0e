"""The live fingerprint of a runtime node: what its answers would be measured on right now.

:mod:`core.fingerprint` defines the fingerprint and :mod:`core.fingerprint_compare` weighs two of them; this
module gathers the live one from what the exporter already reads each scrape, so publishing it adds no
request to the runtime:

- ``/props`` and ``/v1/models`` (the adapter's, cached ``--props-ttl-s``): build, model path and what the
  runtime says of its model, slot count, context per slot, and whatever settings ``/props`` reports. A
  runtime that does not answer (``/health`` refused: ``down``; 503: ``loading`` its model) has no
  runtime-side field, and the fingerprint says which it is, so an answer checked against it is ``unknown``;
- the runtime process (``exporter.process``; in router mode the child's argv from ``/v1/models``): its
  command line and ``LLAMA_ARG_*`` environment, read by llama-server's own rules; its executable, mapped
  libraries and the package that shipped them (``exporter.runtime_files``: the build identity);
- the model files named by ``model_path``, read through the runtime process's own view (relative to its
  working directory, else under ``/proc/PID/root``), and only where ``core.model_files.permitted`` allows:
  under a configured models root (``--models-root``), or one of the files the runtime itself has open or
  mapped. Sized every scrape, told apart at once by ``sample_sha256`` and hashed whole after, on the
  hasher's low-priority thread, which holds off while the runtime has a busy slot (and ``busy_hold_s``
  after): no hashing during a measurement;
- the hardware of the node, only where the exporter runs beside the runtime (its process is on this host):
  the GPUs the collector publishes (a source that fails this scrape keeps its last good facts) and this
  host's CPU. A remote runtime's hardware is unknown, with that reason: a manually run exporter on another
  host must not publish its own GPUs and CPU as the node's. The simulator's modelled GPU (``/sim/gpu``,
  read from the runtime itself) is the node's wherever the exporter runs.

The series is ``runtime_fingerprint_info{<core.fingerprint_labels.INFO_LABELS>} 1``; on a router node one per
loaded model, whose ``model`` label is the model id (as on every per-model series) and ``model_path`` the
path. ``GET /fingerprint`` waits up to ``sample_wait_s`` for pending sample hashes, so the fingerprint the
session takes when its walk begins already tells a model swapped in place.

With a fingerprint key (``--fingerprint-key-file``: the node's key, ``satbench fingerprint-key --node N``) each
series also carries ``fingerprint_since`` (when this exporter first published that exact fingerprint) and
``fingerprint_mac``, its signature (``FingerprintSigner``; ``core.fingerprint_signature`` says why), so a
recommender holding the fleet key takes no fingerprint that this exporter did not publish.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
from prometheus_client.metrics_core import Metric

from satbench.core.fingerprint import cpu_facts, gpu_facts, node_fingerprint
from satbench.core.fingerprint_labels import info_labels
from satbench.core.fingerprint_signature import MAC_LABEL, SINCE_LABEL, sign
from satbench.core.llama_argv import is_llama_server_argv
from satbench.core.model_files import ModelHasher, model_file_facts, permitted
from satbench.exporter.gpu import GpuDevice
from satbench.exporter.process import ProcessReading
from satbench.exporter.runtime_files import binary_facts, merge_reasons, open_files
from satbench.exporter.snapshot import RuntimeSnapshot

__all__ = ["FINGERPRINT_SERIES", "FingerprintSigner", "GpuReading", "LiveFingerprints", "fingerprint_family",
           "read_cpu", "runtime_state"]

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


def runtime_state(snapshot: RuntimeSnapshot) -> tuple[str, str | None]:
    """``up``, ``loading`` (``/health`` 503: llama-server loads its model) or ``down``, and why not up."""
    if snapshot.up:
        return "up", None
    health = snapshot.source("health")
    if health is not None and health.http_status == 503:
        return "loading", health.error or "/health answered 503"
    return "down", (health.error if health is not None and health.error else "/health did not answer")


class LiveFingerprints:
    """Builds the fingerprint of each runtime (model) of a scrape; owns the background hasher."""

    def __init__(self, hasher: ModelHasher | None = None, cpu: tuple[str | None, str | None] | None = None, *,
                 models_roots: Sequence[Path] = (), busy_hold_s: float = 5.0, sample_wait_s: float = 3.0,
                 clock: Any = time.monotonic, signer: FingerprintSigner | None = None) -> None:
        self.signer = signer
        self.hasher = hasher if hasher is not None else ModelHasher()
        self.hasher.set_busy(self._busy)
        self._cpu = cpu if cpu is not None else read_cpu()
        self.models_roots = tuple(models_roots)
        self.busy_hold_s = busy_hold_s
        self.sample_wait_s = sample_wait_s
        self._clock = clock
        self._busy_until = float("-inf")
        self._last_gpus: dict[str, tuple[GpuDevice, ...]] = {}
        self._cwd: tuple[int, str | None] | None = None
        self._lock = threading.Lock()

    def close(self) -> None:
        self.hasher.close()

    # -- no hashing during a measurement -------------------------------------------------------------
    def note(self, snapshot: RuntimeSnapshot) -> None:
        """Each scrape: a runtime with a busy slot (or a request in flight) holds the hasher off for
        ``busy_hold_s`` more seconds."""
        views = [snapshot, *(v.snapshot for v in snapshot.models if v.snapshot is not None)]
        if any((v.busy_slots or 0) > 0 or (v.requests_processing or 0) > 0 for v in views):
            self._busy_until = self._clock() + self.busy_hold_s

    def _busy(self) -> bool:
        return self._clock() < self._busy_until

    # -- the fingerprint -----------------------------------------------------------------------------
    def build(
        self,
        snapshot: RuntimeSnapshot,
        process: ProcessReading | None,
        process_error: str | None,
        gpus: Sequence[GpuReading],
        *,
        wait_s: float = 0.0,
    ) -> dict[str | None, dict[str, Any]]:
        """``{None: fingerprint}`` for a single-model node, ``{model: fingerprint}`` per loaded model of a
        router (a model not loaded, or whose endpoints did not answer, has none). ``wait_s``: how long to
        wait for pending sample hashes before answering (``GET /fingerprint``)."""
        out = self._build(snapshot, process, process_error, gpus)
        if wait_s > 0 and any(self._pending_sample(fp) for fp in out.values()):
            self.hasher.wait(wait_s, samples_only=True)
            out = self._build(snapshot, process, process_error, gpus)
        return out

    @staticmethod
    def _pending_sample(fp: Mapping[str, Any]) -> bool:
        return any(f.get("sample_sha256") is None for f in (fp.get("model") or {}).get("files") or ())

    def _build(self, snapshot: RuntimeSnapshot, process: ProcessReading | None, process_error: str | None,
               gpus: Sequence[GpuReading]) -> dict[str | None, dict[str, Any]]:
        local = process is not None
        hardware, reasons = self._hardware(gpus, local, process_error)
        if process is None:
            argv_reason = process_error or REMOTE
        elif process.cmdline is None:
            argv_reason = "the OS does not show the runtime process's command line"
        else:
            argv_reason = ""
        argv = process.cmdline if process is not None else None
        environ = dict(process.environ) if process is not None and process.environ is not None else None
        if process is None:
            reasons["environ"] = f"its environment cannot be read: {argv_reason}"
        elif environ is None:
            reasons["environ"] = process.environ_error or "the OS does not show the runtime's environment"
        runtime, runtime_why = self._binary(process, argv)
        reasons.update(runtime_why)
        state, why_down = runtime_state(snapshot)
        if why_down is not None:
            reasons["runtime"] = why_down
        common = {"environ": environ, "runtime": runtime, "hardware": hardware, "state": state}
        pid = process.pid if process is not None else None
        if not snapshot.router:
            return {None: self._one(snapshot, argv, argv_reason, pid, process_error, reasons, common)}
        out: dict[str | None, dict[str, Any]] = {}
        for view in snapshot.models:
            if view.snapshot is not None:
                out[view.name] = self._one(view.snapshot, view.args or argv, argv_reason, pid, process_error,
                                           reasons, common)
        return out

    def _binary(self, process: ProcessReading | None,
                argv: Sequence[str] | None) -> tuple[dict[str, Any] | None, dict[str, str]]:
        if process is None:
            return None, {"binary": "the exporter cannot see the runtime's files (" + REMOTE + ")"}
        if argv is not None and not is_llama_server_argv(argv):
            program = argv[0].rsplit("/", 1)[-1] if argv else "?"
            return None, {"binary": f"the process serving the runtime is not llama-server ({program})"}
        facts, why = binary_facts(process.pid, self.hasher)
        return facts, merge_reasons(facts, why)

    def _one(
        self, snap: RuntimeSnapshot, argv: Sequence[str] | None, argv_reason: str, pid: int | None,
        process_error: str | None, common_reasons: Mapping[str, str], common: Mapping[str, Any],
    ) -> dict[str, Any]:
        reasons = dict(common_reasons)
        props = snap.props if common["state"] == "up" else None  # a /props beside a failing /health is not trusted
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
        return node_fingerprint(props=props, argv=argv, model_files=files, reasons=reasons,
                                model_meta=snap.model_meta if props is not None else None, **common)

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
        held: set[str] | None = None
        for candidate in tried:
            try:
                if not candidate.is_file():
                    continue
                if held is None:
                    held = open_files(pid)
                refused = permitted(candidate, self.models_roots, held)
                if refused is not None:
                    return None, refused
                return model_file_facts(candidate, hasher=self.hasher), None
            except ValueError as exc:  # a split count no model has
                return None, f"not read: {exc}"
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

    def _hardware(self, gpus: Sequence[GpuReading], local: bool,
                  process_error: str | None) -> tuple[dict[str, Any], dict[str, str]]:
        reasons: dict[str, str] = {}
        chosen: tuple[str, tuple[GpuDevice, ...]] | None = None
        # the simulator's GPU first: when it is published, the runtime is the simulator and uses it; it is
        # read from the runtime itself, so it is the node's wherever this exporter runs
        ordered = sorted((g for g in gpus if local or g.source == "simulator"), key=lambda g: g.source != "simulator")
        for reading in ordered:
            if reading.error is None:
                self._last_gpus[reading.source] = reading.devices
                chosen = (reading.source, reading.devices)
                break
            if reading.source in self._last_gpus:
                chosen = (reading.source, self._last_gpus[reading.source])
                break
        remote = f"{process_error or REMOTE}: this host's hardware is not the node's"
        if chosen is None:
            errors = "; ".join(f"{g.source}: {g.error}" for g in gpus if g.error)
            if not local:
                gpu_reason = remote
            else:
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
        cpu, cpu_reason = self._cpu if local else (None, remote)
        if cpu is None:
            reasons["hardware.cpu"] = cpu_reason or "unknown"
        return {**facts, "cpu": cpu}, reasons


class FingerprintSigner:
    """Signs each fingerprint series with the node's key: ``fingerprint_since`` (Unix seconds, from ``clock``:
    when this exact label set was first published, per model) and ``fingerprint_mac`` over both."""

    def __init__(self, key: bytes, clock: Any = time.time) -> None:
        if len(key) < 16:
            raise ValueError("the fingerprint key must be at least 16 bytes")
        self._key = key
        self._clock = clock
        self._since: dict[str | None, tuple[tuple[tuple[str, str], ...], str]] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return "FingerprintSigner(key=<hidden>)"

    def signed(self, model: str | None, labels: Mapping[str, str]) -> dict[str, str]:
        """``labels`` with ``fingerprint_since`` and ``fingerprint_mac`` added."""
        identity = tuple(sorted(labels.items()))
        with self._lock:
            known = self._since.get(model)
            if known is None or known[0] != identity:
                known = self._since[model] = (identity, f"{self._clock():.3f}")
        out = {**labels, SINCE_LABEL: known[1]}
        out[MAC_LABEL] = sign(out, self._key)
        return out


def fingerprint_family(fingerprints: Mapping[str | None, Mapping[str, Any]],
                       signer: FingerprintSigner | None = None) -> Metric:
    """``runtime_fingerprint_info`` with one sample per fingerprint (``model`` + ``model_path`` on a router),
    signed where a ``signer`` is given."""
    family = Metric(FINGERPRINT_SERIES, _DOC, "gauge")
    for model, fp in fingerprints.items():
        labels = info_labels(fp)
        if model is not None:
            labels["model_path"] = labels["model"]
            labels["model"] = model
        family.add_sample(FINGERPRINT_SERIES, labels if signer is None else signer.signed(model, labels), 1.0)
    return family
