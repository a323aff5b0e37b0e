"""Serving a collector on a private registry over HTTP (prometheus_client's threaded WSGI server).

:func:`build_collector` wires the real sources for one runtime node from an :class:`ExporterConfig`;
:func:`serve` exposes any collector on ``/metrics`` (loopback by default) and returns a handle to stop it.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.registry import Collector

from exporter.adapter import EndpointFetcher, RuntimeAdapter
from exporter.collector import DEFAULT_BUDGET_S, RuntimeCollector
from exporter.gpu import GpuReader, NvmlGpuReader
from exporter.llamacpp import PROPS_TTL_S, LlamaCppAdapter
from exporter.process import ProcessReader, PsutilProcessReader, local_port_of
from exporter.sim_gpu import SimulatedGpuReader

__all__ = ["FLAVOURS", "ExporterConfig", "ExporterServer", "build_collector", "serve"]

FLAVOURS = ("llamacpp", "auto")


@dataclass(frozen=True)
class ExporterConfig:
    """Validated once at the entry point (``ValueError`` with a clear message on bad input)."""

    runtime_url: str
    host: str = "127.0.0.1"
    port: int = 9101
    runtime_pid: int | None = None
    flavour: str = "auto"
    gpu: str = "auto"
    budget_s: float = DEFAULT_BUDGET_S
    props_ttl_s: float = PROPS_TTL_S

    def __post_init__(self) -> None:
        parts = urlsplit(self.runtime_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"--runtime-url must be an http(s) URL with a host, got {self.runtime_url!r}")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"--port must be 0..65535, got {self.port}")
        if self.runtime_pid is not None and self.runtime_pid <= 0:
            raise ValueError(f"--runtime-pid must be positive, got {self.runtime_pid}")
        if self.flavour not in FLAVOURS:
            raise ValueError(f"--flavour must be one of {', '.join(FLAVOURS)}, got {self.flavour!r}")
        if self.gpu not in ("auto", "nvml", "none"):
            raise ValueError(f"--gpu must be auto, nvml or none, got {self.gpu!r}")
        if not 0.01 <= self.budget_s <= 30:
            raise ValueError(f"--budget-s must be within 0.01..30 s, got {self.budget_s}")
        if self.props_ttl_s < 0:
            raise ValueError(f"--props-ttl-s must be >= 0, got {self.props_ttl_s}")


def build_adapter(config: ExporterConfig, fetcher: EndpointFetcher) -> RuntimeAdapter:
    # Only llama.cpp exists so far, and the simulator speaks it: "auto" resolves to it. A new runtime adds
    # its adapter here and a probe of its endpoints under "auto".
    return LlamaCppAdapter(config.runtime_url, props_ttl_s=config.props_ttl_s, fetcher=fetcher)


def build_collector(config: ExporterConfig) -> RuntimeCollector:
    """The real sources of one node; one HTTP fetcher is shared, and closed with the collector."""
    fetcher = EndpointFetcher(config.runtime_url)
    adapter = build_adapter(config, fetcher)
    gpu_readers: list[GpuReader] = []
    if config.gpu in ("auto", "nvml"):
        gpu_readers.append(NvmlGpuReader())
    gpu_readers.append(SimulatedGpuReader(fetcher, timeout_s=config.budget_s))
    process_reader: ProcessReader | None = None
    if config.runtime_pid is not None:
        process_reader = PsutilProcessReader(pid=config.runtime_pid)
    elif (port := local_port_of(config.runtime_url)) is not None:
        process_reader = PsutilProcessReader(port=port)
    return RuntimeCollector(
        adapter, gpu_readers, process_reader, budget_s=config.budget_s,
        simulated_gpu_replaces_real=config.gpu == "auto",
    )


@dataclass
class ExporterServer:
    httpd: WSGIServer
    thread: threading.Thread
    host: str

    @property
    def port(self) -> int:
        return int(self.httpd.server_port)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


def serve(
    collector: Collector, host: str = "127.0.0.1", port: int = 0, also: Sequence[Collector] = ()
) -> ExporterServer:
    """Serves ``collector`` and ``also`` on a private registry at ``http://host:port/metrics`` (0: any)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    for extra in also:
        registry.register(extra)
    httpd, thread = start_http_server(port, addr=host, registry=registry)
    return ExporterServer(httpd, thread, host)
