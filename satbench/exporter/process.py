"""Host memory of the runtime process: found by its PID, or by the local TCP port the runtime listens on.

Looking a port up walks the host's socket table (``psutil.net_connections``), which is slow and may need
privileges for other users' processes, so the PID found is kept and only re-resolved when that process is
gone (checked by PID and creation time, so a recycled PID is not mistaken for the runtime). A runtime on
another host has no local process: the reader then raises :class:`ProcessUnavailable` and
``runtime_process_up`` is 0.

The process's command line and the ``LLAMA_ARG_*`` variables of its environment (``/proc/PID/environ``:
how the official images configure llama-server) are read once per process found (``cmdline``, ``environ``;
None, with ``environ_error``, when the OS refuses them; only the names ``core.llama_argv.ENV_NAMES`` are
kept, since an environment holds keys and tokens): they tell the settings of the fingerprint and how the
runtime lays its KV cache out (:mod:`exporter.kvcache`).
"""

from __future__ import annotations

import ipaddress
import socket
import threading
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

import psutil

from satbench.core.llama_argv import ENV_NAMES

__all__ = [
    "FakeProcessReader",
    "ProcessReader",
    "ProcessReading",
    "ProcessUnavailable",
    "PsutilProcessReader",
    "local_port_of",
]


class ProcessUnavailable(Exception):
    """The runtime process cannot be found or read."""


@dataclass(frozen=True)
class ProcessReading:
    pid: int
    rss_bytes: float
    cmdline: tuple[str, ...] | None = None
    environ: tuple[tuple[str, str], ...] | None = None  # the LLAMA_ARG_* variables, sorted
    environ_error: str | None = None


class ProcessReader(Protocol):
    def read(self) -> ProcessReading: ...


class FakeProcessReader:
    def __init__(self, reading: ProcessReading | None = None) -> None:
        self.reading = reading

    def read(self) -> ProcessReading:
        if self.reading is None:
            raise ProcessUnavailable("fake: no process")
        return self.reading


def local_port_of(url: str) -> int | None:
    """The port of ``url`` when its host is this machine (loopback or one of its addresses), else None."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    if host in ("localhost", "", socket.gethostname()):
        return port
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    if address.is_loopback or address.is_unspecified:
        return port
    local = {a.address.split("%")[0] for addrs in psutil.net_if_addrs().values() for a in addrs}
    return port if host in local else None


class PsutilProcessReader:
    """RSS of the process with ``pid``, or of the process listening on TCP ``port`` of this host."""

    def __init__(self, pid: int | None = None, port: int | None = None) -> None:
        if pid is None and port is None:
            raise ValueError("PsutilProcessReader needs a pid or a port")
        self._pid = pid
        self._port = port
        self._found: psutil.Process | None = None
        self._cmdline: tuple[str, ...] | None = None
        self._environ: tuple[tuple[str, str], ...] | None = None
        self._environ_error: str | None = None
        self._lock = threading.Lock()

    def _find(self) -> psutil.Process:
        if self._found is not None and self._found.is_running():
            return self._found
        self._found = None
        self._cmdline = None
        self._environ, self._environ_error = None, None
        if self._pid is not None:
            try:
                self._found = psutil.Process(self._pid)
            except psutil.Error as exc:
                raise ProcessUnavailable(f"no process {self._pid}: {exc}") from exc
            return self._found
        try:
            connections = psutil.net_connections(kind="tcp")
        except psutil.Error as exc:
            raise ProcessUnavailable(f"cannot list sockets: {exc}") from exc
        for conn in connections:
            if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == self._port:
                if conn.pid is None:
                    raise ProcessUnavailable(f"port {self._port}: owner not visible (permissions)")
                try:
                    self._found = psutil.Process(conn.pid)
                except psutil.Error as exc:
                    raise ProcessUnavailable(f"port {self._port}: {exc}") from exc
                return self._found
        raise ProcessUnavailable(f"no process listens on port {self._port}")

    def read(self) -> ProcessReading:
        with self._lock:
            process = self._find()
            try:
                rss = process.memory_info().rss
            except psutil.Error as exc:
                self._found = None
                raise ProcessUnavailable(f"process {process.pid}: {exc}") from exc
            if self._cmdline is None:
                try:
                    self._cmdline = tuple(process.cmdline())
                except psutil.Error:
                    self._cmdline = None
                try:
                    env = process.environ()
                    self._environ = tuple(sorted((k, v) for k, v in env.items() if k in ENV_NAMES))
                except psutil.Error as exc:
                    self._environ_error = f"the OS does not show process {process.pid}'s environment ({exc})"
            return ProcessReading(pid=process.pid, rss_bytes=float(rss), cmdline=self._cmdline,
                                  environ=self._environ, environ_error=self._environ_error)
