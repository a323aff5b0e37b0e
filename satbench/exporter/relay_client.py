"""The client's side of the relay: one protocol per client connection, parsing requests with ``httptools``.

Why not a web framework: the relay needs the request's method, target, raw headers (order, spelling and
repeats kept) and body, and nothing else; ``httptools`` (the C parser uvicorn uses) gives exactly that
through callbacks, with no per-request task, handler or header multidict.

Requests are answered one at a time, in order (HTTP/1.1 pipelining is allowed but rare): a request that
completes while another is being answered waits in ``queue``; ``answered`` starts the next. A request
body is read whole before it is sent (llama.cpp requests are small JSON; up to ``MAX_BODY``), answering
``100 Continue`` first when the client asked for it. The connection is watched for the whole exchange, so
a client that leaves while the runtime is still silent is noticed at once (``connection_lost``), and the
runtime's connection is closed (:meth:`exporter.relay_upstream.Upstream.client_gone`). The client's write
buffer filling up pauses reading from the runtime (and draining resumes it): a slow client slows its
own runtime connection, never the relay's memory.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from typing import Any, cast

import httptools

from satbench.exporter.relay_headers import RawHeaders
from satbench.exporter.relay_upstream import CLIENT_GONE, Job, error_answer

__all__ = ["MAX_BODY", "ClientSide", "Request"]

MAX_BODY = 64 * 1024 * 1024

Request = tuple[bytes, bytes, RawHeaders, bytes | None, bool, int]
"""(method, target, raw headers, body or None, keep-alive, arrival ns): one parsed client request."""


class ClientSide(asyncio.Protocol):
    """``start(client, request)`` sends a request on (it answers through ``answered``/``reply_error``)."""

    def __init__(self, start: Callable[[ClientSide, Request], Job | None]) -> None:
        self.start = start
        self.transport: asyncio.Transport | None = None
        self.parser: Any = httptools.HttpRequestParser(self)
        self.queue: deque[Request] = deque()
        self.job: Job | None = None
        self.gone = False
        self.paused = False
        self._target = b""
        self._raw: RawHeaders = []
        self._body: list[bytes] = []
        self._size = 0
        self._begin_ns = 0
        self._too_big = False
        self._whole = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not subclasses

    def data_received(self, data: bytes) -> None:
        while True:
            try:
                self.parser.feed_data(data)
                return
            except httptools.HttpParserUpgrade as exc:
                # An ``Upgrade`` (h2c, websocket) is not relayed: the request is answered as plain HTTP/1.1
                # (no 101), and the connection goes on as HTTP/1.1 with a fresh parser after it.
                if not self._whole:
                    self._refuse(400, "protocol upgrades are not relayed")
                    return
                self.parser = httptools.HttpRequestParser(self)
                data = data[int(exc.args[0]):]
                if not data:
                    return
            except httptools.HttpParserError as exc:
                self._refuse(400, f"malformed request: {exc}")
                return

    def connection_lost(self, exc: Exception | None) -> None:
        self.gone = True
        self.transport = None
        self.queue.clear()
        job = self.job
        self.job = None
        if job is not None and not job.ended:
            if job.upstream is not None:
                job.upstream.client_gone()
            else:  # still connecting: the connect task sees ``job.ended`` and drops its connection
                job.ended = True
                job.conclude(job, CLIENT_GONE, "cancelled", None)

    def pause_writing(self) -> None:
        self.paused = True
        if self.job is not None and self.job.upstream is not None:
            self.job.upstream.pause_reading()

    def resume_writing(self) -> None:
        self.paused = False
        if self.job is not None and self.job.upstream is not None:
            self.job.upstream.resume_reading()

    # -- parser callbacks ----------------------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._begin_ns = time.perf_counter_ns()
        self._whole = False
        self._target, self._raw, self._body, self._size, self._too_big = b"", [], [], 0, False

    def on_url(self, url: bytes) -> None:
        self._target += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._raw.append((name, value))

    def on_headers_complete(self) -> None:
        if self.transport is not None and any(
            n.lower() == b"expect" and v.lower() == b"100-continue" for n, v in self._raw
        ):
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        self._size += len(body)
        if self._size > MAX_BODY:
            self._too_big = True
        else:
            self._body.append(body)

    def on_message_complete(self) -> None:
        self._whole = True
        parser = self.parser
        method = parser.get_method()
        body: bytes | None = b"".join(self._body)
        framed = any(n.lower() in (b"content-length", b"transfer-encoding") for n, _ in self._raw)
        if not body and not framed and method not in (b"POST", b"PUT", b"PATCH"):
            body = None
        keep = parser.should_keep_alive() and not self._too_big
        if self._too_big:
            self._refuse(413, f"request body over {MAX_BODY} bytes")
            return
        self.queue.append((method, self._target, self._raw, body, keep, self._begin_ns))
        if self.job is None:
            self._next()

    # -- answers -------------------------------------------------------------------------------------------

    def _next(self) -> None:
        while self.queue and self.job is None and not self.gone:
            self.job = self.start(self, self.queue.popleft())

    def answered(self, job: Job, keep_alive: bool) -> None:
        """The answer to ``job`` is fully written: close, or go on with the next request."""
        if self.job is job:
            self.job = None
        if self.transport is None:
            return
        if not keep_alive:
            self.queue.clear()
            self.transport.close()
            return
        self._next()

    def reply_error(self, job: Job, status: int, message: str) -> None:
        if self.transport is not None:
            self.transport.write(error_answer(status, message, job.request_id, not job.keep_alive))
        self.answered(job, job.keep_alive)

    def abort(self) -> None:
        """The answer broke: cut the connection, so the client cannot take it for a whole one."""
        self.job = None
        if self.transport is not None:
            self.transport.abort()

    def _refuse(self, status: int, message: str) -> None:
        if self.transport is not None and self.job is None:
            self.transport.write(error_answer(status, message, "", close=True))
            self.transport.close()
        elif self.transport is not None:
            self.transport.abort()
        self.gone = True
