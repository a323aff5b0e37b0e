"""Relay mode: a streaming reverse proxy in front of the runtime that times every request it forwards.

``satbench exporter --relay 127.0.0.1:8081 --runtime-url http://127.0.0.1:8080`` listens on the relay
address and forwards every request (method, path, query, body, end-to-end headers: see
:mod:`exporter.relay_headers`) to the runtime, and streams the answer back chunk by chunk as it arrives
(status, reason, headers, body bytes unchanged; no buffering, so SSE token streams keep their timing).
While forwarding, generation routes are timed (:mod:`exporter.relay_observe`) into the relay histograms
and counters (:mod:`exporter.relay_metrics`), which the exporter serves on its ``/metrics``.

The cost per token is one read from the runtime's socket, one write to the client's, one clock read and
the SSE parser's byte counting; per request, one upstream request through aiohttp's client, one header
copy and a ``uuid4`` when the client sent no ``X-Request-ID``. ``bench/relay_overhead.py`` measures it:
on a shared 2-vCPU VM, ~40 us of CPU per token at 6,400 tokens/s and ~1 ms per request, 2-3x what a bare
uvloop byte pipe costs on the same VM (~21-27 us per token); most of the difference is aiohttp's stream
reader and writer. A protocol-level body path (upstream socket to client socket in ``data_received``,
de-chunking only for the parser) is the known way to close it. Read silence is watched by one sweeper
task, not aiohttp's per-read timer (re-armed on every chunk).

Failures, so that a client never hangs and never mistakes a broken answer for a whole one:

- runtime unreachable (refused, reset before answering): 502 with a llama.cpp-style JSON error body that
  says so; a disconnect before any answer byte is retried once first (llama-server closes kept-alive
  connections after a stream; loadgen retries the same way);
- runtime silent for ``read_timeout_s`` before its status line: 504, same body shape (mid-answer: below);
- runtime status >= 400: forwarded as is (status, headers, body);
- runtime connection lost or silent mid-answer: the client's connection is aborted, so the client sees a
  truncated answer, not a clean end (outcome ``dropped`` or ``timeout``);
- client gone (write fails, or aiohttp cancels the handler on disconnect): the runtime request's connection
  is closed at once, so llama-server (and the simulator) frees the slot; counted as ``code="499"``,
  ``outcome="cancelled"``, its timings not observed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web
from yarl import URL

from exporter.relay_headers import downstream_response_headers, upstream_request_headers
from exporter.relay_metrics import RelayMetrics
from exporter.relay_observe import RelayTiming, route_of, status_outcome, timing_from_body, timing_from_stream
from loadgen.config import ApiFlavour
from loadgen.sse import StreamParser

__all__ = ["Observer", "RelayServer", "create_relay_app", "parse_listen_address", "run_relay"]

_CLIENT_GONE = 499
_BODY_KEEP = 1 << 22

Observer = Callable[[str, str, RelayTiming], None]
"""Called once per timed exchange with (route, X-Request-ID, timing): per-request joins in tests, benches."""


def parse_listen_address(text: str) -> tuple[str, int]:
    """``host:port`` (``[::1]:port`` for IPv6; a bare ``port`` means 127.0.0.1). ValueError when malformed."""
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", text
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--relay must be HOST:PORT, got {text!r}")
    return host, int(port)


def _error(status: int, message: str) -> web.Response:
    kind = "unavailable_error" if status == 504 else "server_error"
    body = {"error": {"code": status, "message": f"relay: {message}", "type": kind}}
    return web.Response(status=status, text=json.dumps(body), content_type="application/json")


@dataclass
class _State:
    upstream: str
    metrics: RelayMetrics
    read_timeout_s: float
    observer: Observer | None = None
    session: aiohttp.ClientSession | None = None
    active: set[_Pump] = field(default_factory=set)


@dataclass
class _Exchange:
    """What the handler learnt so far; read in ``finally`` whatever way the exchange ended."""

    code: int = _CLIENT_GONE
    outcome: str = "cancelled"
    timing: RelayTiming | None = None
    request_id: str = ""


_STATE = web.AppKey("relay_state", _State)
_WATCHER = web.AppKey("relay_watcher", asyncio.Task)


async def _relay(request: web.Request) -> web.StreamResponse:
    state = request.app[_STATE]
    route, api = route_of(request.path)
    start_ns = time.perf_counter_ns()
    state.metrics.started(route)
    exchange = _Exchange()
    try:
        return await _forward(request, state, api, start_ns, exchange)
    finally:
        if exchange.timing is not None:
            state.metrics.observe(route, exchange.timing)
            if state.observer is not None:
                state.observer(route, exchange.request_id, exchange.timing)
        state.metrics.finished(route, exchange.code, exchange.outcome)


async def _send(
    request: web.Request, state: _State, exchange: _Exchange
) -> tuple[aiohttp.ClientResponse | None, web.StreamResponse | None, str]:
    """Sends the request upstream: (answer, None, id), or (None, an error answer for the client, id)."""
    headers, skip, request_id = upstream_request_headers(request.headers)
    exchange.request_id = request_id
    body = await request.read()
    session = state.session
    assert session is not None
    url = URL(state.upstream + request.raw_path, encoded=True)  # as sent: no re-quoting of path or query
    for attempt in (1, 2):
        try:
            async with asyncio.timeout(state.read_timeout_s):
                upstream = await session.request(
                    request.method, url, data=body or None, headers=headers,
                    skip_auto_headers=skip, allow_redirects=False, compress=None,
                )
            return upstream, None, request_id
        except aiohttp.ServerDisconnectedError as exc:
            if attempt == 1:
                continue
            exchange.code, exchange.outcome = 502, "refused"
            return None, _error(502, f"runtime closed the connection without answering: {exc}"), request_id
        except (TimeoutError, aiohttp.ServerTimeoutError):
            exchange.code, exchange.outcome = 504, "timeout"
            message = f"runtime sent no answer within {state.read_timeout_s:g} s"
            return None, _error(504, message), request_id
        except (aiohttp.ClientError, OSError) as exc:
            exchange.code, exchange.outcome = 502, "refused"
            return None, _error(502, f"runtime unreachable: {exc or type(exc).__name__}"), request_id
    raise AssertionError("unreachable")


async def _forward(
    request: web.Request, state: _State, api: ApiFlavour | None, start_ns: int, exchange: _Exchange
) -> web.StreamResponse:
    upstream, failure, request_id = await _send(request, state, exchange)
    if upstream is None:
        assert failure is not None
        return failure
    status = upstream.status
    streaming = upstream.headers.get("Content-Type", "").startswith("text/event-stream")
    pump = _Pump(
        upstream,
        StreamParser(api) if api is not None and streaming else None,
        bytearray() if api is not None and not streaming else None,
    )
    state.active.add(pump)
    complete = False
    try:
        headers, length = downstream_response_headers(upstream.headers, request_id)
        response = web.StreamResponse(status=status, reason=upstream.reason, headers=headers)
        if length is not None:
            response.content_length = length
        try:
            await response.prepare(request)
        except ConnectionResetError:
            _conclude(exchange, pump, "cancelled", start_ns, status)
            return response
        lost = await pump.run(request, upstream, response)
        if lost is None:
            complete = True
            with contextlib.suppress(ConnectionResetError):  # it had every byte but the terminator
                await response.write_eof()
        _conclude(exchange, pump, lost, start_ns, status)
        return response
    except asyncio.CancelledError:
        _conclude(exchange, pump, "cancelled", start_ns, status)
        raise
    finally:
        state.active.discard(pump)
        if complete:
            upstream.release()
        else:
            upstream.close()


def _conclude(exchange: _Exchange, pump: _Pump, lost: str | None, start_ns: int, status: int) -> None:
    """Sets the exchange's code, outcome and timing once the answer ended, was lost, or the client left.

    A client that leaves right after the stream's end marker (loadgen stops reading there) got a whole
    answer: that is not a cancellation.
    """
    if lost == "cancelled":
        if pump.parser is None or not pump.parser.done:
            exchange.code, exchange.outcome, exchange.timing = _CLIENT_GONE, "cancelled", None
            return
        lost = None
    end_ns = pump.last_ns
    timing: RelayTiming | None = None
    if pump.parser is not None:
        timing = timing_from_stream(pump.parser, start_ns, end_ns, status)
    elif pump.whole is not None:
        timing = timing_from_body(bytes(pump.whole), start_ns, end_ns, status)
    if lost is not None and timing is not None:
        timing = RelayTiming(e2e_s=timing.e2e_s, prompt_tokens=timing.prompt_tokens,
                             output_tokens=timing.output_tokens, outcome=lost)
    exchange.code = status
    exchange.outcome = timing.outcome if timing is not None else lost or status_outcome(status)
    exchange.timing = timing


class _Pump:
    """Copies the runtime's body to the client as it arrives, feeding the parser (or keeping the body).

    ``last_ns`` is when the last body bytes arrived (the headers, before any): the e2e end, and what
    :func:`_watch_silence` compares with the read timeout. One sweeper for all requests costs less than
    aiohttp's per-read timer, which is re-armed on every chunk.
    """

    __slots__ = ("last_ns", "parser", "silent", "upstream", "whole")

    def __init__(
        self, upstream: aiohttp.ClientResponse, parser: StreamParser | None, whole: bytearray | None
    ) -> None:
        self.upstream = upstream
        self.parser = parser
        self.whole = whole
        self.last_ns = time.perf_counter_ns()
        self.silent = False

    def stop_silent(self) -> None:
        """The runtime said nothing for too long: close its connection (the pending read then fails)."""
        self.silent = True
        self.upstream.close()

    async def run(
        self, request: web.Request, upstream: aiohttp.ClientResponse, response: web.StreamResponse
    ) -> str | None:
        """None when the runtime's answer ended; else the outcome of the loss (``cancelled``: client left)."""
        read = upstream.content.readany
        write = response.write
        clock = time.perf_counter_ns
        feed = self.parser.feed if self.parser is not None else None
        whole = self.whole
        while True:
            try:
                chunk = await read()
            except (TimeoutError, aiohttp.ClientError, OSError):
                _abort(request)
                return "timeout" if self.silent else "dropped"
            if not chunk:
                return None
            self.last_ns = now = clock()
            try:
                await write(chunk)
            except ConnectionResetError:
                return "cancelled"
            if feed is not None:
                if not feed(chunk, now):
                    feed = None
            elif whole is not None and len(whole) < _BODY_KEEP:
                whole.extend(chunk)


async def _watch_silence(state: _State) -> None:
    """Every quarter of the read timeout (at most 1 s), stops the answers silent for longer than it."""
    limit_ns = int(state.read_timeout_s * 1e9)
    while True:
        await asyncio.sleep(min(1.0, state.read_timeout_s / 4))
        now = time.perf_counter_ns()
        for pump in [p for p in state.active if now - p.last_ns > limit_ns]:
            pump.stop_silent()


def _abort(request: web.Request) -> None:
    transport = request.transport
    if transport is not None:
        transport.abort()


def create_relay_app(
    runtime_url: str, metrics: RelayMetrics, connect_timeout_s: float = 5.0, read_timeout_s: float = 600.0,
    observer: Observer | None = None,
) -> web.Application:
    """The relay as an aiohttp application (one client session to the runtime, opened on startup)."""
    app = web.Application(client_max_size=64 * 1024 * 1024)
    state = _State(runtime_url.rstrip("/"), metrics, read_timeout_s, observer)
    app[_STATE] = state

    async def open_session(app: web.Application) -> None:
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout_s)
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=30.0)
        state.session = aiohttp.ClientSession(timeout=timeout, connector=connector, auto_decompress=False,
                                              cookie_jar=aiohttp.DummyCookieJar())

        watcher = asyncio.create_task(_watch_silence(state))
        app[_WATCHER] = watcher

    async def close_session(app: web.Application) -> None:
        app[_WATCHER].cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await app[_WATCHER]
        if state.session is not None:
            await state.session.close()

    app.on_startup.append(open_session)
    app.on_cleanup.append(close_session)
    app.router.add_route("*", "/{tail:.*}", _relay)
    return app


class RelayServer:
    """The relay on ``host:port`` (0: any free port); ``start()`` returns the URL with the real port."""

    def __init__(
        self, runtime_url: str, metrics: RelayMetrics, host: str = "127.0.0.1", port: int = 0, *,
        connect_timeout_s: float = 5.0, read_timeout_s: float = 600.0, observer: Observer | None = None,
        shutdown_timeout_s: float = 2.0,
    ) -> None:
        self.host = host
        self.port = port
        app = create_relay_app(runtime_url, metrics, connect_timeout_s, read_timeout_s, observer)
        # auto_decompress=False: a gzip request body is forwarded as sent, with its Content-Encoding;
        # handler_cancellation: a client that disconnects while the runtime is still silent is noticed.
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, handler_cancellation=True,
                                     auto_decompress=False, shutdown_timeout=shutdown_timeout_s)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def start(self) -> str:
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, backlog=1024)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        return self.url

    async def close(self) -> None:
        await self._runner.cleanup()


async def run_relay(
    runtime_url: str, metrics: RelayMetrics, host: str, port: int, stop: asyncio.Event,
    ready: asyncio.Event | None = None, read_timeout_s: float = 600.0,
) -> int:
    """Serves the relay until ``stop`` is set; returns the bound port (``ready`` is set once listening)."""
    server = RelayServer(runtime_url, metrics, host, port, read_timeout_s=read_timeout_s)
    await server.start()
    if ready is not None:
        ready.set()
    try:
        await stop.wait()
    finally:
        await server.close()
    return server.port
