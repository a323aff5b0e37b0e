"""Wire-test helpers for relay mode: the relay in a thread, a deterministic upstream that replays payloads.

``RelayThread`` serves :class:`exporter.relay.RelayServer` on port 0 (the real port is read back) from an
event loop in a daemon thread, with a private registry and a per-request observation list.
``ReplayUpstream`` answers each ``(method, path)`` with a scripted ``Reply``: status, headers (repeats and
empty values allowed) and body chunks written one by one, optionally waiting on a gate before the last one
(to prove the relay does not buffer), or dropping the connection, or hanging. It records every request it
received (method, path with query, raw header list, body) so a test can compare direct and relayed
requests byte for byte.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aiohttp import web
from prometheus_client import CollectorRegistry

from satbench.exporter.relay import RelayServer
from satbench.exporter.relay_metrics import RelayMetrics
from satbench.exporter.relay_observe import RelayTiming
from testkit.process import cancel_pending

__all__ = ["LoopThread", "RelayThread", "ReplayUpstream", "Reply", "Seen"]

T = TypeVar("T")


class LoopThread:
    """An asyncio loop in a daemon thread; ``call(coro)`` runs a coroutine there and returns its result."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def call(self, coro: Coroutine[Any, Any, T], timeout_s: float = 30.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def stop(self) -> None:
        with contextlib.suppress(Exception):  # a loop already gone has nothing pending
            self.call(cancel_pending(), timeout_s=10.0)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()


class RelayThread:
    """``with RelayThread(runtime_url) as relay: httpx.get(relay.url + "/health")``."""

    def __init__(self, runtime_url: str, read_timeout_s: float = 600.0) -> None:
        self.metrics = RelayMetrics()
        self.registry = CollectorRegistry()
        self.registry.register(self.metrics)
        self.seen: list[tuple[str, str, RelayTiming]] = []
        self._runtime_url = runtime_url
        self._read_timeout_s = read_timeout_s
        self._loop: LoopThread | None = None
        self._server: RelayServer | None = None
        self.url = ""

    def _observe(self, route: str, request_id: str, timing: RelayTiming) -> None:
        self.seen.append((route, request_id, timing))

    def __enter__(self) -> RelayThread:
        self._loop = LoopThread()

        async def start() -> str:
            self._server = RelayServer(self._runtime_url, self.metrics, "127.0.0.1", 0,
                                       read_timeout_s=self._read_timeout_s, observer=self._observe)
            return await self._server.start()

        self.url = self._loop.call(start())
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None:
            if self._server is not None:
                self._loop.call(self._server.close())
            self._loop.stop()

    def settle(self, timeout_s: float = 10.0) -> None:
        """Waits until every request was counted (the relay counts just after the client's last byte)."""
        deadline = time.monotonic() + timeout_s
        while self.metrics.in_flight_total() and time.monotonic() < deadline:
            time.sleep(0.005)
        assert self.metrics.in_flight_total() == 0, "relay still has requests in flight"

    def value(self, name: str, labels: dict[str, str] | None = None) -> float | None:
        self.settle()
        return self.registry.get_sample_value(name, labels or {})

    def observation(self, request_id: str) -> tuple[str, RelayTiming]:
        self.settle()
        found = [(route, timing) for route, rid, timing in self.seen if rid == request_id]
        assert len(found) == 1, f"{len(found)} observations of {request_id}"
        return found[0]


@dataclass
class Reply:
    status: int = 200
    headers: list[tuple[str, str]] = field(default_factory=list)
    chunks: list[bytes] = field(default_factory=list)
    gate_last: bool = False
    drop_after: int | None = None
    hang: bool = False


@dataclass(frozen=True)
class Seen:
    method: str
    path_qs: str
    headers: tuple[tuple[str, str], ...]
    body: bytes


class ReplayUpstream:
    """The scripted upstream on a loopback port (its own loop thread); ``replies[(method, path)]``."""

    def __init__(self) -> None:
        self.replies: dict[tuple[str, str], Reply] = {}
        self.seen: list[Seen] = []
        self.cancelled: list[str] = []
        self.gate: asyncio.Event | None = None
        self.url = ""
        self._loop = LoopThread()
        self._runner: web.AppRunner | None = None

    def open_gate(self) -> None:
        gate = self.gate
        assert gate is not None
        self._loop.loop.call_soon_threadsafe(gate.set)

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        raw = tuple((k.decode("latin-1"), v.decode("latin-1")) for k, v in request.raw_headers)
        self.seen.append(Seen(request.method, request.raw_path, raw, body))
        reply = self.replies.get((request.method, request.path))
        if reply is None:
            return web.Response(status=404, text="no reply scripted")
        if reply.hang:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:  # the peer closed the connection (handler_cancellation)
                self.cancelled.append(request.headers.get("X-Request-ID", ""))
                raise
        response = web.StreamResponse(status=reply.status)
        for name, value in reply.headers:
            response.headers.add(name, value)
        await response.prepare(request)
        for i, chunk in enumerate(reply.chunks):
            if reply.drop_after is not None and i == reply.drop_after:
                assert request.transport is not None
                request.transport.abort()
                return response
            if reply.gate_last and i == len(reply.chunks) - 1:
                assert self.gate is not None
                await self.gate.wait()
            await response.write(chunk)
            await asyncio.sleep(0.001)
        await response.write_eof()
        return response

    def __enter__(self) -> ReplayUpstream:
        async def start() -> str:
            self.gate = asyncio.Event()
            app = web.Application()
            app.router.add_route("*", "/{tail:.*}", self._answer)
            self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.5,
                                         handler_cancellation=True)
            await self._runner.setup()
            site = web.TCPSite(self._runner, "127.0.0.1", 0)
            await site.start()
            return f"http://127.0.0.1:{self._runner.addresses[0][1]}"

        self.url = self._loop.call(start())
        return self

    def __exit__(self, *exc: object) -> None:
        if self._runner is not None:
            self._loop.call(self._runner.cleanup())
        self._loop.stop()
