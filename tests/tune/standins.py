"""Stand-in llama-servers for the tune's tests: a script in ``$SATBENCH_LLAMA_SERVER`` that runs the simulator
with llama-server's command line (``satbench sim`` takes its flags), so the llamacpp launcher runs for real.

``fake_llama_server``: for ``--parallel 4`` it prints llama.cpp's out-of-memory refusal and exits (``refuse``);
with ``ignore_parallel`` it drops ``--parallel N`` (a wrapper that ignores it: the simulator then serves its
profile's 4 slots, and only the read-back can tell); it lists every command line it was started with in
``starts.txt`` beside it (``started``), so a test can tell that a skipped candidate never started.
``tiny_model_dir``: a real tiny GGUF (``satbench.models.tiny``), whose shape gives the KV bytes a token.
"""

from __future__ import annotations

import sys
from pathlib import Path

from satbench.models.tiny import TINY_MODELS, synthetic_vocab, write_tiny_models

__all__ = ["REFUSAL", "fake_llama_server", "started", "tiny_model_dir"]

REFUSAL = "llama_kv_cache: failed to allocate KV cache of 9216.00 MiB: cudaMalloc failed: out of memory"


def fake_llama_server(tmp_path: Path, *, ignore_parallel: bool = False, refuse: bool = True) -> Path:
    """A llama-server that runs the simulator (module docstring); its starts are listed in ``starts.txt``."""
    script = tmp_path / "llama-server"
    refusal = f"""case " $* " in
  *" --parallel 4 "*) echo "{REFUSAL}" >&2; echo "main: error: unable to load model" >&2; exit 1;;
esac
""" if refuse else ""
    drop = """args=""
skip=0
for a in "$@"; do
  if [ $skip = 1 ]; then skip=0; continue; fi
  if [ "$a" = "--parallel" ]; then skip=1; continue; fi
  args="$args $a"
done
set -- $args
""" if ignore_parallel else ""
    script.write_text(f"""#!/bin/sh
echo "$*" >> {tmp_path / "starts.txt"}
{refusal}{drop}exec {sys.executable} -m satbench.cli sim "$@"
""", encoding="utf-8")
    script.chmod(0o755)
    return script


def tiny_model_dir(tmp_path: Path) -> Path:
    models = tmp_path / "models"
    write_tiny_models(models, synthetic_vocab(), [TINY_MODELS["dense"]])
    return models


def started(tmp_path: Path) -> list[str]:
    path = tmp_path / "starts.txt"
    return path.read_text().splitlines() if path.exists() else []
