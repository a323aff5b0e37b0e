"""Relay mode: a streaming reverse proxy in front of the runtime that times every request it forwards.

``satbench exporter --relay 127.0.0.1:8081 --runtime-url http://127.0.0.1:8080`` listens on the relay
address and forwards every request (method, path, query, body, end-to-end headers: see
:mod:`exporter.relay_headers`) to the runtime, and streams the answer back as it arrives (status, reason,
end-to-end headers, body bytes unchanged, chunk framing included; no buffering, so SSE token streams keep
their timing). While forwarding, generation routes are timed (:mod:`exporter.relay_observe`) into the
relay histograms and counters (:mod:`exporter.relay_metrics`), which the exporter serves on ``/metrics``.

Why raw asyncio protocols and ``httptools`` rather than a web framework and an HTTP client: the relay's
cost per token is the budget (goal: under 20 us of CPU per token, near a bare byte pipe). Here a token
costs one ``data_received`` on the runtime's connection, one ``transport.write`` to the client's, one
clock read, the C parser's pass over the bytes and the SSE parser's byte counting
(:mod:`exporter.relay_upstream`); a request costs one parse of its head (:mod:`exporter.relay_client`),
one header rewrite, a ``uuid4`` when the client sent no ``X-Request-ID``, and a runtime connection taken
from the idle pool (a task only when a new one must be opened). ``bench/relay_overhead.py`` measures it.

Failures, so that a client never hangs and never mistakes a broken answer for a whole one:

- runtime unreachable (refused, reset before answering): 502 with a llama.cpp-style JSON error body that
  says so; a disconnect before any answer byte is retried once first (llama-server closes kept-alive
  connections after a stream; loadgen retries the same way);
- runtime silent for ``read_timeout_s`` before its status line, or no connection within
  ``connect_timeout_s``: 504, same body shape (mid-answer: below);
- runtime status >= 400: forwarded as is (status, headers, body);
- runtime connection lost or silent mid-answer: the client's connection is aborted, so the client sees a
  truncated answer, not a clean end (outcome ``dropped`` or ``timeout``);
- client gone: the runtime request's connection is closed at once, so llama-server (and the simulator)
  frees the slot; counted as ``code="499"``, ``outcome="cancelled"``, its timings not observed.

Read silence is watched by one sweeper task (every quarter of the timeout, at most 1 s), not a timer per
read.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from urllib.parse import urlsplit

from satbench.exporter.relay_client import ClientSide, Request
from satbench.exporter.relay_headers import request_head
from satbench.exporter.relay_metrics import RelayMetrics
from satbench.exporter.relay_observe import RelayTiming, route_of
from satbench.exporter.relay_upstream import Job, Upstream

__all__ = ["Observer", "RelayServer", "parse_listen_address"]

_POOL_MAX = 1024

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


def _runtime_address(runtime_url: str) -> tuple[str, int, bytes, bytes]:
    """(host, port, Host header, path prefix) of an ``http://`` runtime URL; ValueError for anything else."""
    parts = urlsplit(runtime_url)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"the relay forwards to http://HOST[:PORT] only, got {runtime_url!r}")
    return parts.hostname, parts.port or 80, parts.netloc.encode("idna"), parts.path.rstrip("/").encode()


class RelayServer:
    """The relay on ``host:port`` (0: any free port); ``start()`` returns the URL with the real port."""

    def __init__(
        self, runtime_url: str, metrics: RelayMetrics, host: str = "127.0.0.1", port: int = 0, *,
        connect_timeout_s: float = 5.0, read_timeout_s: float = 600.0, observer: Observer | None = None,
        shutdown_timeout_s: float = 2.0,
    ) -> None:
        self.host = host
        self.port = port
        self.metrics = metrics
        self.observer = observer
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self.shutdown_timeout_s = shutdown_timeout_s
        self._rt_host, self._rt_port, self._rt_netloc, self._prefix = _runtime_address(runtime_url.rstrip("/"))
        self._pool: list[Upstream] = []
        self._active: set[Upstream] = set()
        self._clients: set[ClientSide] = set()
        self._connecting: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None
        self._sweeper: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def start(self) -> str:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(self._client_side, self.host, self.port, backlog=1024)
        self.port = int(self._server.sockets[0].getsockname()[1])
        self._sweeper = asyncio.create_task(self._watch_silence())
        return self.url

    async def close(self) -> None:
        """Stops listening, lets answers in flight finish (up to the shutdown timeout), then cuts the rest."""
        if self._server is not None:
            self._server.close()
        deadline = time.monotonic() + self.shutdown_timeout_s
        while self._active and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        for task in list(self._connecting):
            task.cancel()
        for client in list(self._clients):
            if client.transport is not None:
                client.transport.abort()
        for upstream in [*self._pool, *self._active]:
            if upstream.transport is not None:
                upstream.transport.abort()
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        if self._server is not None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)
        await asyncio.sleep(0)  # let the transports' connection_lost callbacks run

    def _client_side(self) -> ClientSide:
        client = _TrackedClient(self._start, self._clients)
        self._clients.add(client)
        return client

    # -- one request ---------------------------------------------------------------------------------------

    def _start(self, client: ClientSide, request: Request) -> Job:
        method, target, raw, body, keep_alive, start_ns = request
        route, api = route_of(target.decode("latin-1"))
        self.metrics.started(route)
        head, request_id = request_head(method, self._prefix + target, raw, self._rt_netloc,
                                        None if body is None else len(body))
        job = Job(client, route, api, start_ns, request_id, head + (body or b""), method == b"HEAD",
                  keep_alive, self._conclude)
        self._send(job)
        return job

    def _send(self, job: Job) -> None:
        """On an idle pooled connection at once; else through a connect task."""
        job.attempts += 1
        job.upstream = None
        while self._pool:
            upstream = self._pool.pop()
            if upstream.transport is not None and not upstream.transport.is_closing():
                upstream.begin(job)
                return
        task = asyncio.get_running_loop().create_task(self._connect(job))
        self._connecting.add(task)
        task.add_done_callback(self._connecting.discard)

    async def _connect(self, job: Job) -> None:
        loop = asyncio.get_running_loop()
        try:
            _, upstream = await asyncio.wait_for(
                loop.create_connection(self._new_upstream, self._rt_host, self._rt_port),
                self.connect_timeout_s,
            )
        except TimeoutError:
            self._refuse(job, 504, f"no connection to the runtime within {self.connect_timeout_s:g} s")
            return
        except OSError as exc:
            where = f"{self._rt_host}:{self._rt_port}"
            self._refuse(job, 502, f"runtime unreachable: cannot connect to {where}: {exc}")
            return
        if job.ended or job.client.gone:  # the client left while connecting
            if upstream.transport is not None:
                upstream.transport.abort()
            return
        upstream.begin(job)

    def _new_upstream(self) -> Upstream:
        return Upstream(self._pool, self._active, self._send)

    def _refuse(self, job: Job, status: int, message: str) -> None:
        if job.ended:
            return
        job.ended = True
        self._conclude(job, status, "timeout" if status == 504 else "refused", None)
        job.client.reply_error(job, status, message)

    def _conclude(self, job: Job, code: int, outcome: str, timing: RelayTiming | None) -> None:
        if timing is not None:
            self.metrics.observe(job.route, timing)
            if self.observer is not None:
                self.observer(job.route, job.request_id, timing)
        self.metrics.finished(job.route, code, outcome)
        if len(self._pool) > _POOL_MAX:
            extra = self._pool.pop(0)
            if extra.transport is not None:
                extra.transport.close()

    async def _watch_silence(self) -> None:
        """Every quarter of the read timeout (at most 1 s), stops the answers silent for longer than it."""
        limit_ns = int(self.read_timeout_s * 1e9)
        while True:
            await asyncio.sleep(min(1.0, self.read_timeout_s / 4))
            now = time.perf_counter_ns()
            for upstream in [u for u in self._active if now - u.last_ns > limit_ns]:
                upstream.stop_silent(self.read_timeout_s)


class _TrackedClient(ClientSide):
    """A client connection the server can cut on close (it forgets itself once the connection is gone)."""

    def __init__(self, start: Callable[[ClientSide, Request], Job | None], clients: set[ClientSide]) -> None:
        super().__init__(start)
        self._clients = clients

    def connection_lost(self, exc: Exception | None) -> None:
        self._clients.discard(self)
        super().connection_lost(exc)
