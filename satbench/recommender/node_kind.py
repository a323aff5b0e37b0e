"""A node's kind: what its lane's fingerprint says decides capacity, as one short digest.

Two lanes of one model are the same kind of node where the model (its files' sha256, else its path), the
runtime's build, every server setting (slots, batch and micro-batch, context, KV layout, threads...) and the
hardware (the accelerator's name, count and memory, the CPU, which serves what is not offloaded) agree: what
the validity check compares, less the driver (a rolling driver update would split identical nodes) and less
the digest (which also moves when a pending hash completes). ``satbench plan`` counts nodes per kind;
``recommender.aibrix`` writes a profile per kind.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from satbench.core.lane_evidence import FingerprintModel

__all__ = ["KIND_HARDWARE", "kind_id", "model_revision"]

KIND_HARDWARE = ("gpu", "gpu_count", "gpu_memory_bytes", "cpu")  # the driver left out (module docstring)


def model_revision(model: dict[str, Any] | None) -> Any:
    """The model's files' sha256s (sorted), else its path, else None."""
    files = [f for f in (model or {}).get("files") or [] if isinstance(f, dict)]
    hashes = sorted(str(f["sha256"]) for f in files if f.get("sha256"))
    return hashes or (model or {}).get("path")


def kind_id(fingerprint: FingerprintModel) -> str:
    """The first 12 hex digits of the sha256 of what decides capacity (module docstring)."""
    hardware = fingerprint.hardware or {}
    runtime = fingerprint.runtime or {}
    said = {"model": model_revision(fingerprint.model), "build": runtime.get("build") or runtime.get("binary_sha256"),
            "settings": dict(fingerprint.settings or {}), "hardware": [hardware.get(k) for k in KIND_HARDWARE]}
    return hashlib.sha256(json.dumps(said, sort_keys=True, default=str).encode()).hexdigest()[:12]
