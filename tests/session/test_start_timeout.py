"""A llama-server lane waits as long as the session's ``start_timeout_s`` says, not a number of its own.

The stand-in server (tests/runtimes/fake_llama_server.py) answers ``/health`` 503 ("Loading model") for a
minute: a server that never becomes ready within the setting. The launcher must give up at the configured
half second (it waited a hard-coded 120 s before), stop the server, and say so in one line that names the
setting to raise.
"""

from __future__ import annotations

import contextlib
import stat
import sys
import time
from pathlib import Path

import psutil
import pytest

from satbench.runtimes.llamacpp import SERVER_ENV
from satbench.runtimes.processes import ProcessSet, StartError
from satbench.session.config import load_session_config
from satbench.session.parts import LAUNCHERS

FAKE = Path(__file__).parent.parent / "runtimes" / "fake_llama_server.py"
TIMEOUT_S = 0.5


@pytest.fixture
def never_ready(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    binary = tmp_path / "llama-server"
    binary.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE}" "$@"\n')
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv(SERVER_ENV, str(binary))
    monkeypatch.setenv("FAKE_LOADING_S", "60")
    models = tmp_path / "models"
    models.mkdir()
    (models / "m.gguf").write_bytes(b"GGUF")
    return models


def test_a_llamacpp_lane_waits_the_configured_start_timeout(never_ready: Path, tmp_path: Path) -> None:
    config = load_session_config(None, {
        "model_dir": str(never_ready), "start_timeout_s": TIMEOUT_S,
        "lanes": [{"name": "dense", "runtime": "llamacpp", "model_file": "m.gguf", "parallel": 1, "ctx_size": 512}],
    })
    lane = config.lanes[0]
    processes = ProcessSet(tmp_path / "logs")
    # children this worker already has (another test's module-scoped Prometheus, say) are not this test's
    before = {child.pid for child in psutil.Process().children(recursive=True)}
    started = time.monotonic()
    try:
        with contextlib.ExitStack() as stack, pytest.raises(StartError) as caught:
            LAUNCHERS["llamacpp"](lane, config, processes, stack)
    finally:
        processes.stop_all()
    waited = time.monotonic() - started
    assert TIMEOUT_S <= waited < TIMEOUT_S + 5.0, waited  # the setting, not the 120 s it once was
    said = str(caught.value)
    assert "\n" not in said, said
    assert said.startswith("lane dense: llama-server at http://127.0.0.1:")
    assert "not ready within start_timeout_s = 0.5 s" in said and "HTTP 503" in said
    assert str(tmp_path / "logs" / "llamacpp-dense.log") in said
    left = [c for c in psutil.Process().children(recursive=True) if c.pid not in before]
    assert not left, f"the server was left running: {left}"
