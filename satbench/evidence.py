"""Evidence for the run manifest: versions, hardware, network round-trips, runtime build and model files.

A reader of ``runs/<run_id>/manifest.json`` must be able to tell what produced the numbers without asking
anyone: which satbench (version and git commit), on which machine (CPU model, cores, RAM; GPU name, driver and
VRAM from NVML, or ``null`` with the reason it is absent), against which endpoints (URL and the median
round-trip of a few ``GET /health``), which runtime build (``/props``) and which model files (path, size and
sha256 of every split of a GGUF model).

Every source is injectable (``GpuReader``, an ``httpx.Client``, a clock) so tests run on fixtures;
collecting a piece never raises: a failure becomes ``{"error": "..."}`` in that piece, because missing
evidence must not stop a benchmark. API keys and other secrets are redacted from the config before
it is written.
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import httpx
import psutil

from satbench.core import __version__

__all__ = [
    "REDACTED",
    "REFUSED_MODEL_ROOTS",
    "GpuReader",
    "ModelDirError",
    "NvmlGpuReader",
    "collect_hardware",
    "collect_versions",
    "cpu_model",
    "describe_model_files",
    "git_commit",
    "measure_round_trip",
    "redact_secrets",
    "refuse_home_path",
    "runtime_props",
    "secret_values",
    "sha256_file",
]

REDACTED = "***"
# Keys whose value is a secret, matched exactly (case and - or _ aside), never as a substring: a config's
# ``prompt_tokens`` or ``prefill_probe_tokens`` is the workload, and the evidence must show it.
SECRET_KEYS = frozenset({"api_key", "apikey", "x_api_key", "authorization", "password", "passwd", "secret",
                         "client_secret", "token", "access_token", "bearer_token", "hf_token"})
# Command-line flags whose next argument (or ``=value``) is a secret (llama-server's among them).
SECRET_FLAGS = frozenset({"--api-key", "--hf-token", "-hft", "--password", "--token"})


def _secret_key(key: object, more: frozenset[str] = frozenset()) -> bool:
    name = str(key).lower().replace("-", "_")
    return name in SECRET_KEYS or name in more


def _names(keys: Iterable[str]) -> frozenset[str]:
    return frozenset(k.lower().replace("-", "_") for k in keys)


def secret_values(value: Any, env_names: Iterable[str] = ()) -> set[str]:
    """Every secret in ``value``: under a secret key, after a secret flag, and the named variables' values.

    ``env_names`` are the environment variables that hold secrets (a lane's ``api_key_env``): their values
    are read now, so that a key pasted anywhere else (a server argument, a URL) is scrubbed too, and a key
    of that name is a secret key.
    """
    env_names = list(env_names)
    more = _names(env_names)
    found = {os.environ[name] for name in env_names if os.environ.get(name)}

    def walk(item: Any) -> None:
        if isinstance(item, Mapping):
            for key, sub in item.items():
                if _secret_key(key, more) and isinstance(sub, str) and sub:
                    found.add(sub)
                walk(sub)
        elif isinstance(item, list | tuple):
            for i, sub in enumerate(item):
                if isinstance(sub, str):
                    flag, eq, rest = sub.partition("=")
                    if flag in SECRET_FLAGS and eq and rest:
                        found.add(rest)
                    elif sub in SECRET_FLAGS and i + 1 < len(item) and isinstance(item[i + 1], str):
                        found.add(item[i + 1])
                walk(sub)

    walk(value)
    return {s for s in found if len(s) >= 4}  # a 1-3 character "secret" would scrub ordinary words


def redact_secrets(value: Any, secrets: Iterable[str] = (), keys: Iterable[str] = ()) -> Any:
    """A deep copy of ``value`` with every secret replaced by ``***``.

    Secrets are the values of exact secret keys (``SECRET_KEYS`` and ``keys``, e.g. the names lanes
    declare as ``api_key_env``), the arguments of secret flags (``SECRET_FLAGS``) and every string in
    ``secrets``, wherever such a string appears, inside a longer string too (a URL, a joined command line).
    """
    keys = list(keys)
    more = _names(keys)
    known = sorted(set(secrets) | secret_values(value, keys), key=len, reverse=True)

    def scrub(text: str) -> str:
        for secret in known:
            text = text.replace(secret, REDACTED)
        return text

    def walk(item: Any) -> Any:
        if isinstance(item, Mapping):
            return {str(k): REDACTED if _secret_key(k, more) and item[k] not in (None, "") else walk(v)
                    for k, v in item.items()}
        if isinstance(item, list | tuple):
            return [walk(v) for v in item]
        if isinstance(item, str):
            return scrub(item)
        return item

    return walk(value)


def git_commit(repo_dir: Path | None = None) -> str | None:
    """The commit of the checkout satbench runs from (``+dirty`` when the tree has changes), or None."""
    where = repo_dir or Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(
            ["git", "-C", str(where), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(where), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{head}+dirty" if dirty else head or None


def collect_versions() -> dict[str, Any]:
    return {
        "satbench": __version__,
        "git_commit": git_commit(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
    }


def cpu_model(cpuinfo: str | None = None) -> str | None:
    """The CPU's model name from ``/proc/cpuinfo`` text (``model name`` on x86, ``Model`` on some ARM)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return platform.processor() or None
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, _, val = line.partition(":")
        fields.setdefault(key.strip().lower(), val.strip())
    for key in ("model name", "hardware", "cpu model", "processor"):
        if fields.get(key) and not fields[key].isdigit():
            return fields[key]
    return platform.processor() or None


class GpuReader(Protocol):
    def gpus(self) -> list[dict[str, Any]]:
        """One dict per GPU: name, driver, memory_total_bytes; raises when no GPU can be read."""
        ...


class NvmlGpuReader:
    """Reads GPUs through NVML (``pynvml``); raises when the library or the driver is absent."""

    def gpus(self) -> list[dict[str, Any]]:
        import pynvml

        pynvml.nvmlInit()
        try:
            driver = pynvml.nvmlSystemGetDriverVersion()
            out = []
            for index in range(pynvml.nvmlDeviceGetCount()):
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
                name = pynvml.nvmlDeviceGetName(handle)
                out.append(
                    {
                        "index": index,
                        "name": name.decode() if isinstance(name, bytes) else str(name),
                        "driver": driver.decode() if isinstance(driver, bytes) else str(driver),
                        "memory_total_bytes": int(mem.total),
                    }
                )
            return out
        finally:
            pynvml.nvmlShutdown()


def collect_hardware(gpu_reader: GpuReader | None = None, cpuinfo: str | None = None) -> dict[str, Any]:
    """CPU model, logical/physical cores, RAM; ``gpu`` is a list, or None with ``gpu_reason``."""
    hardware: dict[str, Any] = {
        "cpu_model": cpu_model(cpuinfo),
        "cpu_cores_logical": psutil.cpu_count(logical=True),
        "cpu_cores_physical": psutil.cpu_count(logical=False),
        "ram_bytes": int(psutil.virtual_memory().total),
        "machine": platform.machine(),
    }
    reader = gpu_reader or NvmlGpuReader()
    try:
        gpus = reader.gpus()
    except Exception as exc:  # NVML raises its own error tree, ImportError, OSError...
        hardware["gpu"] = None
        hardware["gpu_reason"] = f"NVML unavailable: {type(exc).__name__}: {exc}".strip()
    else:
        hardware["gpu"] = gpus or None
        if not gpus:
            hardware["gpu_reason"] = "NVML reports no GPU"
    return hardware


def measure_round_trip(
    client: httpx.Client,
    url: str,
    *,
    path: str = "/health",
    samples: int = 5,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, Any]:
    """Median round-trip of ``samples`` GETs of ``url + path``; non-2xx answers still count as a trip."""
    target = url.rstrip("/") + path
    trips: list[float] = []
    error: str | None = None
    for _ in range(max(1, samples)):
        started = clock()
        try:
            client.get(target)
        except httpx.HTTPError as exc:
            error = f"{type(exc).__name__}: {exc}"
            continue
        trips.append(clock() - started)
    result: dict[str, Any] = {
        "url": url,
        "probe": target,
        "samples": len(trips),
        "rtt_median_s": statistics.median(trips) if trips else None,
        "rtt_min_s": min(trips) if trips else None,
        "rtt_max_s": max(trips) if trips else None,
    }
    if error is not None:
        result["error"] = error
    return result


def runtime_props(client: httpx.Client, url: str, model: str | None = None,
                  api_key: str | None = None) -> dict[str, Any]:
    """The runtime's build evidence from ``GET /props`` (llama.cpp): build info, model path, slot count;
    ``model`` asks a router-mode node about that model (``?model=``) rather than about the router;
    ``api_key``: the key a runtime started with ``--api-key`` wants for ``/props`` (sent as a bearer)."""
    try:
        resp = client.get(url.rstrip("/") + "/props", params={"model": model} if model else None,
                          headers={"Authorization": f"Bearer {api_key}"} if api_key else None)
        resp.raise_for_status()
        props = resp.json()
    except (httpx.HTTPError, ValueError) as exc:
        return {"error": f"GET /props failed: {type(exc).__name__}: {exc}"}
    if not isinstance(props, dict):
        return {"error": "GET /props did not return a JSON object"}
    keep = ("build_info", "model_path", "total_slots", "chat_template", "modalities")
    out = {k: props[k] for k in keep if k in props and k != "chat_template"}
    settings = props.get("default_generation_settings")
    if isinstance(settings, dict):
        out["n_ctx"] = settings.get("n_ctx")
    if "chat_template" in props:
        out["chat_template_sha256"] = hashlib.sha256(str(props["chat_template"]).encode()).hexdigest()
    return out


REFUSED_MODEL_ROOTS: tuple[str, ...] = ("/home",)


class ModelDirError(ValueError):
    """The model directory is not acceptable (under a refused root such as /home)."""


def refuse_home_path(path: Path | str, refused_roots: Sequence[str] = REFUSED_MODEL_ROOTS) -> Path:
    """The resolved model directory; raises :class:`ModelDirError` for one under a refused root (``/home``):
    model files live in a configured model directory on mounted storage, never in a user's home."""
    resolved = Path(path).expanduser().resolve()
    for root in refused_roots:
        root_path = Path(root)
        if resolved == root_path or root_path in resolved.parents:
            raise ModelDirError(
                f"model directory {resolved} is under {root}: model files must live in a configured model "
                f"directory on mounted storage, not under {root}"
            )
    return resolved


_SPLIT_RE = re.compile(r"^(?P<stem>.+)-(?P<index>\d{5})-of-(?P<count>\d{5})\.gguf$")


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def _splits(path: Path) -> list[Path]:
    match = _SPLIT_RE.match(path.name)
    if match is None:
        return [path]
    count = int(match["count"])
    return [path.with_name(f"{match['stem']}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1)]


def describe_model_files(paths: Iterable[Path | str]) -> list[dict[str, Any]]:
    """Path, size and sha256 of every model file; a split model lists all its ``-NNNNN-of-MMMMM`` parts.

    Never raises for a bad path: a missing or unreadable file is listed with an ``error`` instead, so a
    manifest is written even when a model went away.
    """
    described: list[dict[str, Any]] = []
    seen: set[Path] = set()
    for given in paths:
        for part in _splits(Path(given).expanduser().absolute()):
            if part in seen:
                continue
            seen.add(part)
            entry: dict[str, Any] = {"path": str(part), "name": part.name}
            match = _SPLIT_RE.match(part.name)
            entry["split"] = f"{int(match['index'])}/{int(match['count'])}" if match else None
            try:
                entry["size_bytes"] = part.stat().st_size
                entry["sha256"] = sha256_file(part)
            except OSError as exc:
                error = f"{type(exc).__name__}: {exc.strerror or exc}"
                entry.update(size_bytes=None, sha256=None, error=error)
            described.append(entry)
    return described
