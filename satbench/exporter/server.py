"""Serving a collector on a private registry over HTTP (a threaded WSGI server, prometheus_client's app).

:func:`build_collector` wires the real sources for one runtime node from an :class:`ExporterConfig`;
:func:`serve` exposes any collector on ``/metrics`` (loopback by default) and returns a handle to stop it.

``GET /metrics?model=NAME`` asks the collector for one model of a router node (``for_model``), so
Prometheus can scrape one router exporter once per lane with a ``__param_model`` target label; a
single-model node ignores the parameter (its adapter has one model), as does a collector without
``for_model``. A fresh registry per request is cheap (it only holds references) and keeps concurrent
scrapes of different models apart.

``GET /fingerprint`` answers the live fingerprint as JSON (``core.fingerprint``; the collector's
``fingerprints``, read afresh): a single-model node's fingerprint itself; on a router node
``{"router": true, "models": {NAME: fingerprint}}`` for its loaded models, or with ``?model=NAME`` that
model's fingerprint (404 when it is not loaded).
"""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.registry import Collector

from satbench.exporter.adapter import MAX_BODY_BYTES, EndpointFetcher, RuntimeAdapter
from satbench.exporter.collector import DEFAULT_BUDGET_S, DEFAULT_READ_MAX_AGE_S, RuntimeCollector
from satbench.exporter.cpu_energy import RaplReader
from satbench.exporter.flavours import ADAPTERS, FLAVOURS, AdapterSettings, resolve
from satbench.exporter.gpu import GpuReader, NvmlGpuReader
from satbench.exporter.kvcache import KV_SETTINGS
from satbench.exporter.live_fingerprint import FingerprintSigner, LiveFingerprints
from satbench.exporter.llamacpp import PROPS_TTL_S
from satbench.exporter.process import ProcessReader, PsutilProcessReader, local_port_of
from satbench.exporter.sim_gpu import SimulatedGpuReader

__all__ = ["FLAVOURS", "ROUTER_SETTINGS", "ExporterConfig", "ExporterServer", "build_collector", "serve"]

ROUTER_SETTINGS = ("auto", "yes", "no")


@dataclass(frozen=True)
class ExporterConfig:
    """Validated once at the entry point (``ValueError`` with a clear message on bad input)."""

    runtime_url: str
    host: str = "127.0.0.1"
    port: int = 9101
    runtime_pid: int | None = None
    flavour: str = "auto"
    gpu: str = "auto"
    cpu_energy: str = "auto"
    budget_s: float = DEFAULT_BUDGET_S
    props_ttl_s: float = PROPS_TTL_S
    router: str = "auto"
    model: str | None = None
    kv_unified: str = "auto"
    models_roots: tuple[str, ...] = ()
    max_body_bytes: int = MAX_BODY_BYTES
    fingerprint_key: bytes | None = field(default=None, repr=False)  # the node's key: series are signed
    read_max_age_s: float = DEFAULT_READ_MAX_AGE_S
    runtime_api_key: str | None = field(default=None, repr=False)  # sent with every read of the runtime

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
        if self.cpu_energy not in ("auto", "rapl", "none"):
            raise ValueError(f"--cpu-energy must be auto, rapl or none, got {self.cpu_energy!r}")
        if not 0.01 <= self.budget_s <= 30:
            raise ValueError(f"--budget-s must be within 0.01..30 s, got {self.budget_s}")
        if self.props_ttl_s < 0:
            raise ValueError(f"--props-ttl-s must be >= 0, got {self.props_ttl_s}")
        if self.router not in ROUTER_SETTINGS:
            raise ValueError(f"--router must be one of {', '.join(ROUTER_SETTINGS)}, got {self.router!r}")
        if self.model is not None and (not self.model.strip() or not self.model.isprintable()):
            raise ValueError(f"--model must be a printable, non-empty model name, got {self.model!r}")
        if self.model is not None and self.router == "no":
            raise ValueError("--model names a model of a router node; it cannot go with --router no")
        if self.kv_unified not in KV_SETTINGS:
            raise ValueError(f"--kv-unified must be one of {', '.join(KV_SETTINGS)}, got {self.kv_unified!r}")
        for root in self.models_roots:
            if not root or not os.path.isabs(root):
                raise ValueError(f"--models-root must be an absolute folder, got {root!r}")
        if not 1024 <= self.max_body_bytes <= 1 << 30:
            raise ValueError(f"--max-body-bytes must be within 1024..1073741824, got {self.max_body_bytes}")
        if self.fingerprint_key is not None and len(self.fingerprint_key) < 16:
            raise ValueError("--fingerprint-key-file: a key of at least 16 characters is needed")
        if not 0 <= self.read_max_age_s <= 60:  # NaN fails too
            raise ValueError(f"--read-max-age-s must be within 0..60 s (0: every scrape reads the node), "
                             f"got {self.read_max_age_s}")
        key = self.runtime_api_key
        if key is not None and (not key or not key.isprintable()):
            raise ValueError("--runtime-api-key-file: the key must be one printable, non-empty line")

    @property
    def router_mode(self) -> bool | None:
        """True/False when told (``--model`` implies a router), None to detect it from ``/props``."""
        if self.router == "yes" or self.model is not None:
            return True
        return False if self.router == "no" else None


def build_adapter(config: ExporterConfig, fetcher: EndpointFetcher) -> RuntimeAdapter:
    """The adapter of ``config.flavour`` (``exporter.flavours.ADAPTERS``; ``auto`` resolved there)."""
    settings = AdapterSettings(config.runtime_url, props_ttl_s=config.props_ttl_s, router=config.router_mode,
                               model=config.model)
    return ADAPTERS[resolve(config.flavour)](settings, fetcher)


def build_collector(config: ExporterConfig) -> RuntimeCollector:
    """The real sources of one node; one HTTP fetcher is shared, and closed with the collector. With ``--gpu
    auto`` a runtime on another host (no ``--runtime-pid``, a URL that is not this host's) gets no NVML
    reader: this host's GPUs are not the node's; nor, with ``--cpu-energy auto``, a CPU package energy reader."""
    fetcher = EndpointFetcher(config.runtime_url, max_body_bytes=config.max_body_bytes,
                              api_key=config.runtime_api_key)
    adapter = build_adapter(config, fetcher)
    process_reader: ProcessReader | None = None
    if config.runtime_pid is not None:
        process_reader = PsutilProcessReader(pid=config.runtime_pid)
    elif (port := local_port_of(config.runtime_url)) is not None:
        process_reader = PsutilProcessReader(port=port)
    gpu_readers: list[GpuReader] = []
    if config.gpu == "nvml" or (config.gpu == "auto" and process_reader is not None):
        gpu_readers.append(NvmlGpuReader())
    gpu_readers.append(SimulatedGpuReader(fetcher, timeout_s=config.budget_s))
    cpu_energy = config.cpu_energy == "rapl" or (config.cpu_energy == "auto" and process_reader is not None)
    return RuntimeCollector(
        adapter, gpu_readers, process_reader, budget_s=config.budget_s,
        simulated_gpu_replaces_real=config.gpu == "auto", kv_unified=config.kv_unified,
        fingerprints=LiveFingerprints(models_roots=[Path(r) for r in config.models_roots],
                                      signer=None if config.fingerprint_key is None
                                      else FingerprintSigner(config.fingerprint_key)),
        read_max_age_s=config.read_max_age_s,
        cpu_energy_reader=RaplReader() if cpu_energy else None,
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


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes are not logged."""


WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def metrics_app(collector: Collector, also: Sequence[Collector] = ()) -> WsgiApp:
    """The WSGI app of ``/metrics``: ``?model=NAME`` narrows ``collector`` to that model when it can."""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        model = (parse_qs(environ.get("QUERY_STRING", "")).get("model") or [""])[0]
        if environ.get("PATH_INFO") == "/fingerprint":
            return fingerprint_answer(collector, model or None, start_response)
        for_model = getattr(collector, "for_model", None)
        registry = CollectorRegistry(auto_describe=False)
        registry.register(for_model(model) if model and for_model is not None else collector)
        for extra in also:
            registry.register(extra)
        result: Iterable[bytes] = make_wsgi_app(registry)(environ, start_response)
        return result

    return app


def fingerprint_answer(
    collector: Collector, model: str | None, start_response: Callable[..., Any]
) -> Iterable[bytes]:
    """The body of ``GET /fingerprint[?model=NAME]`` (see the module's docstring)."""
    read = getattr(collector, "fingerprints", None)
    status = "404 Not Found"
    doc: Any = {"error": "this exporter publishes no fingerprint"}
    if read is not None:
        try:
            found: dict[str | None, Any] = read(model)
        except Exception as exc:  # an answer, never a traceback
            status, doc = "500 Internal Server Error", {"error": f"{type(exc).__name__}: {exc}"}
        else:
            if None in found:
                status, doc = "200 OK", found[None]
            elif model is None:
                status, doc = "200 OK", {"router": True, "models": found}
            elif model in found:
                status, doc = "200 OK", found[model]
            else:
                status, doc = "404 Not Found", {"error": f"model {model!r} is not loaded on this router"}
    body = json.dumps(doc, indent=1, sort_keys=True).encode()
    start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]


def serve(
    collector: Collector, host: str = "127.0.0.1", port: int = 0, also: Sequence[Collector] = ()
) -> ExporterServer:
    """Serves ``collector`` and ``also`` at ``http://host:port/metrics`` (0: any port), ``?model=`` too."""

    class Server(ThreadingWSGIServer):
        request_queue_size = 128  # socketserver's 5 drops connects when a dozen scrapers come at once

    family, _, _, _, sockaddr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    Server.address_family = family
    httpd = make_server(str(sockaddr[0]), port, metrics_app(collector, also), Server, handler_class=_QuietHandler)
    thread = threading.Thread(target=httpd.serve_forever, name="exporter-http", daemon=True)
    thread.start()
    return ExporterServer(httpd, thread, host)
