"""A llama-server stand-in that replays recorded payloads, in-process (httpx.MockTransport) or on loopback.

``FixtureRuntime`` maps each endpoint to (status, body); tests change the mapping between scrapes to
replay a sequence (idle -> load -> after load) or to break one endpoint at a time. ``hang`` makes every
request stall, to prove a scrape still answers within its budget.
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

__all__ = ["FixtureRuntime", "LoopbackRuntime"]


@dataclass
class FixtureRuntime:
    routes: dict[str, tuple[int, str]] = field(default_factory=dict)
    hang_s: float = 0.0
    requests: list[str] = field(default_factory=list)

    @classmethod
    def from_folder(
        cls, folder: Path, metrics: str = "metrics_load.txt", slots: str = "slots_load.json"
    ) -> FixtureRuntime:
        runtime = cls()
        runtime.routes["/health"] = (200, '{"status":"ok"}')
        runtime.routes["/props"] = (200, (folder / "props.json").read_text())
        runtime.set("/metrics", folder / metrics)
        runtime.set("/slots", folder / slots)
        return runtime

    def set(self, path: str, file: Path, status: int = 200) -> None:
        self.routes[path] = (status, file.read_text())

    def answer(self, path: str) -> tuple[int, str]:
        self.requests.append(path)
        if self.hang_s:
            time.sleep(self.hang_s)
        return self.routes.get(path, (404, '{"error":{"code":404,"message":"File Not Found"}}'))

    def transport(self) -> httpx.MockTransport:
        def handler(request: httpx.Request) -> httpx.Response:
            status, body = self.answer(request.url.path)
            return httpx.Response(status, text=body)

        return httpx.MockTransport(handler)


class LoopbackRuntime:
    """Serves a FixtureRuntime on 127.0.0.1 (a real socket, for wire tests and the scrape benchmark)."""

    def __init__(self, runtime: FixtureRuntime) -> None:
        self.runtime = runtime
        fixture = runtime

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                # headers and body go out in two writes: without this, Nagle + delayed ACK add 40 ms
                self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def do_GET(self) -> None:
                status, body = fixture.answer(self.path.split("?")[0])
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                return

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_port}"

    def __enter__(self) -> LoopbackRuntime:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)
