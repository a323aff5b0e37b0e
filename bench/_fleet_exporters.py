"""One exporter per lane of a simulated fleet, all in ONE process: the exporter CPU figure of ``bench/fleet.py``.

A real fleet runs one ``satbench exporter`` per node (its own process, on its own host). A hundred exporter
processes would take some 4 GB on this machine, so this serves every lane's collector from one interpreter:
for each lane of the fleet's URL map (``satbench sim-fleet --urls-file``) the exporter's own collector
(``exporter.server.build_collector``, ``gpu="none"``: the simulated GPU the runtime reports) behind the
exporter's own server (``exporter.server.serve``: a threaded WSGI server on its own loopback port, one thread
per scrape). The process's CPU divided by the scrapes Prometheus made is the exporter's cost per scrape of
one target; the GIL is shared, so the one thing this does not show is how fast a scrape answers when every
exporter has a core of its own.

``--static`` is the floor: each port serves fixed bytes (the text its collector produced once at start,
gzipped once, as Prometheus asks for gzip) through the same WSGI server class, and collects nothing: no
runtime fetch, no parsing, no psutil, no exposition. What the exporter costs above it is the collection.

    .venv/bin/python bench/_fleet_exporters.py --urls-file sim.json --out exporters.json [--static]

writes ``{node: {lane: url}}`` to ``--out`` once every exporter listens, then serves until SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit
from wsgiref.simple_server import WSGIRequestHandler, make_server

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest  # noqa: E402
from prometheus_client.exposition import ThreadingWSGIServer  # noqa: E402

from satbench.exporter.collector import RuntimeCollector  # noqa: E402
from satbench.exporter.server import ExporterConfig, ExporterServer, build_collector, serve  # noqa: E402


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes are not logged (as the exporter's own handler)."""


def body_of(collector: RuntimeCollector) -> bytes:
    """The text exposition one scrape of ``collector`` gives now."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return generate_latest(registry)


def serve_static(body: bytes, host: str = "127.0.0.1") -> ExporterServer:
    """``body`` at every path, gzipped when the client accepts it (computed once), on the exporter's server."""
    packed = gzip.compress(body)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        gz = "gzip" in environ.get("HTTP_ACCEPT_ENCODING", "")
        data = packed if gz else body
        headers = [("Content-Type", CONTENT_TYPE_LATEST), ("Content-Length", str(len(data)))]
        if gz:
            headers.append(("Content-Encoding", "gzip"))
        start_response("200 OK", headers)
        return [data]

    class Server(ThreadingWSGIServer):
        pass

    httpd = make_server(host, 0, app, Server, handler_class=_Quiet)
    thread = threading.Thread(target=httpd.serve_forever, name="static-http", daemon=True)
    thread.start()
    return ExporterServer(httpd, thread, host)


def listening_pids() -> dict[int, int]:
    """``{port: pid}`` of this host's listening TCP sockets, read once: each exporter is then given its
    runtime's PID (``--runtime-pid``) instead of walking the socket table on its first scrape, 100 times at
    once. After that first scrape an exporter that looks its runtime up by port holds the PID too, so the
    steady state measured is the same either way."""
    out: dict[int, int] = {}
    for conn in psutil.net_connections(kind="tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.pid is not None:
            out[conn.laddr.port] = conn.pid
    return out


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)  # the bench never reads half a file


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--urls-file", type=Path, required=True, help="the fleet's {node: {lane: runtime url}}")
    parser.add_argument("--out", type=Path, required=True, help="where to write {node: {lane: exporter url}}")
    parser.add_argument("--static", action="store_true", help="the floor: fixed bytes, no collection")
    parser.add_argument("--part", help="I/N: serve only every N-th lane from the I-th (several processes)")
    args = parser.parse_args()

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    runtimes: dict[str, dict[str, str]] = json.loads(args.urls_file.read_text(encoding="utf-8"))
    if args.part:
        index, _, count = args.part.partition("/")
        flat = [(node, lane, url) for node, lanes in runtimes.items() for lane, url in lanes.items()]
        runtimes = {}
        for node, lane, url in flat[int(index)::int(count)]:
            runtimes.setdefault(node, {})[lane] = url
    owners = listening_pids()
    servers: list[ExporterServer] = []
    collectors: list[RuntimeCollector] = []
    t0 = time.perf_counter()
    try:
        out: dict[str, dict[str, str]] = {}
        for node, lanes in runtimes.items():
            for lane, url in lanes.items():
                pid = owners.get(urlsplit(url).port or 0)
                collector = build_collector(ExporterConfig(runtime_url=url, port=0, gpu="none", runtime_pid=pid))
                try:
                    body = body_of(collector)  # the first scrape: /props read, process found, occupancy primed
                finally:
                    if args.static:
                        collector.close()
                if args.static:
                    server = serve_static(body)
                else:
                    collectors.append(collector)
                    server = serve(collector, host="127.0.0.1", port=0)
                servers.append(server)
                out.setdefault(node, {})[lane] = server.url
                if stop.is_set():
                    return 1
        _write_json(args.out, out)
        kind = "static bodies" if args.static else "collectors"
        print(f"fleet exporters: {len(servers)} {kind} listening in pid {os.getpid()} "
              f"(started in {time.perf_counter() - t0:.2f} s)", flush=True)
        while not stop.wait(1.0):
            pass
    finally:
        # each server's shutdown waits out its poll interval (0.5 s): all at once, not one after the other
        closing = [threading.Thread(target=server.close) for server in servers]
        for thread in closing:
            thread.start()
        for thread in closing:
            thread.join(timeout=10)
        for collector in collectors:
            collector.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
