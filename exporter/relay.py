"""Relay mode: a streaming reverse proxy in front of the runtime that times every request it forwards.

``satbench exporter --relay 127.0.0.1:8081 --runtime-url http://127.0.0.1:8080`` listens on the relay
address and forwards every request (method, path, query, body, end-to-end headers) to the runtime,
streaming the answer back chunk by chunk as it arrives, so SSE token streams keep their timing. While
forwarding, generation routes are timed (:mod:`exporter.relay_observe`) into the relay histograms
(:mod:`exporter.relay_metrics`), which the exporter serves on its ``/metrics`` next to ``runtime_*``.

A runtime that cannot be reached gets the client a 502 with a llama.cpp-style error body; a client that
goes away mid-stream closes the upstream request too (llama-server then frees the slot). Timings of such
aborted requests are not observed; their count is, with ``code="499"``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping

import aiohttp
from aiohttp import web

from exporter.relay_metrics import RelayMetrics
from exporter.relay_observe import RelayTiming, route_of, timing_from_body, timing_from_stream
from loadgen.sse import StreamParser

__all__ = ["create_relay_app", "parse_listen_address", "run_relay"]

_HOP_BY_HOP = {
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers",
    "transfer-encoding", "upgrade", "host", "content-length",
}
_UPSTREAM = web.AppKey("upstream", str)
_METRICS = web.AppKey("metrics", RelayMetrics)
_SESSION = web.AppKey("session", aiohttp.ClientSession)
_CLIENT_GONE = 499


def parse_listen_address(text: str) -> tuple[str, int]:
    """``host:port`` (``[::1]:port`` for IPv6; a bare ``port`` means 127.0.0.1). ValueError when malformed."""
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", text
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--relay must be HOST:PORT, got {text!r}")
    return host, int(port)


def _forward_headers(headers: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k.lower() not in _HOP_BY_HOP}


def _bad_gateway(message: str) -> web.Response:
    error = {"code": 502, "message": f"relay: runtime unreachable: {message}", "type": "server_error"}
    body = {"error": error}
    return web.Response(status=502, text=json.dumps(body), content_type="application/json")


async def _relay(request: web.Request) -> web.StreamResponse:
    metrics = request.app[_METRICS]
    route, api = route_of(request.path)
    start_ns = time.monotonic_ns()
    metrics.started(route)
    code = _CLIENT_GONE
    try:
        response, code, timing = await _forward(request, api, start_ns)
        if timing is not None:
            metrics.observe(route, timing)
        return response
    finally:
        metrics.finished(route, code)


async def _forward(
    request: web.Request, api: str | None, start_ns: int
) -> tuple[web.StreamResponse, int, RelayTiming | None]:
    body = await request.read()
    url = request.app[_UPSTREAM] + request.rel_url.path_qs
    session = request.app[_SESSION]
    try:
        upstream = await session.request(
            request.method, url, data=body or None, headers=_forward_headers(request.headers),
            allow_redirects=False,
        )
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        return _bad_gateway(str(exc) or type(exc).__name__), 502, None
    async with upstream:
        streaming = upstream.headers.get("Content-Type", "").startswith("text/event-stream")
        response = web.StreamResponse(status=upstream.status, headers=_forward_headers(upstream.headers))
        await response.prepare(request)
        parser = StreamParser(api) if api is not None and streaming else None  # type: ignore[arg-type]
        parsing = parser is not None
        whole = bytearray() if api is not None and not streaming else None
        async for chunk in upstream.content.iter_any():
            now = time.monotonic_ns()
            await response.write(chunk)
            if parsing and parser is not None:
                parsing = parser.feed(chunk, now)
            elif whole is not None and len(whole) < (1 << 22):
                whole.extend(chunk)
        await response.write_eof()
    end_ns = time.monotonic_ns()
    timing: RelayTiming | None = None
    if upstream.status == 200 and parser is not None:
        timing = timing_from_stream(parser, start_ns, end_ns)
    elif upstream.status == 200 and whole is not None:
        timing = timing_from_body(bytes(whole), start_ns, end_ns)
    return response, upstream.status, timing


def create_relay_app(
    runtime_url: str, metrics: RelayMetrics, connect_timeout_s: float = 5.0
) -> web.Application:
    """The relay as an aiohttp application (one client session to the runtime, opened on startup)."""
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app[_UPSTREAM] = runtime_url.rstrip("/")
    app[_METRICS] = metrics

    async def open_session(app: web.Application) -> None:
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout_s)
        connector = aiohttp.TCPConnector(limit=0)
        app[_SESSION] = aiohttp.ClientSession(timeout=timeout, connector=connector, auto_decompress=False)

    async def close_session(app: web.Application) -> None:
        await app[_SESSION].close()

    app.on_startup.append(open_session)
    app.on_cleanup.append(close_session)
    app.router.add_route("*", "/{tail:.*}", _relay)
    return app


async def run_relay(
    runtime_url: str, metrics: RelayMetrics, host: str, port: int, stop: asyncio.Event,
    ready: asyncio.Event | None = None,
) -> int:
    """Serves the relay until ``stop`` is set; returns the bound port (``ready`` is set once listening)."""
    runner = web.AppRunner(create_relay_app(runtime_url, metrics), access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=1024)
    await site.start()
    bound = int(runner.addresses[0][1])
    if ready is not None:
        ready.set()
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
    return bound
