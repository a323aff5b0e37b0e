"""One runtime connection of the relay, and the exchange it carries: the per-token hot path.

Why a bare protocol: the answer's body bytes go from the runtime's socket to the client's in
``data_received`` with one ``transport.write``, unchanged (chunk framing included), with no stream reader,
no task wake-up and no copy. The same bytes are then fed to ``httptools``' response parser (C), which
finds the head, de-chunks the body for the observer and says where the answer ends; the observer is
loadgen's SSE parser (:class:`core.sse.StreamParser`, mostly ``bytes.count`` per chunk) for a streamed
generation answer, or a copy of the body for a whole one (its JSON read once, at the end).

Until the head is complete, bytes are held; then the client gets the rewritten head
(:func:`exporter.relay_headers.response_head`) and the body bytes after it, and from then on every chunk
as it comes. How an exchange ends (:meth:`Upstream.begin` starts one; exactly one of these ends it):

- the parser's message-complete: conclude ``ok`` (or the status' outcome), hand the connection back to
  the pool when the runtime keeps it alive, and tell the client side it may read the next request;
- connection lost before any answer byte: retried once on a new connection (llama-server closes
  kept-alive connections after a stream), then 502; lost after some head bytes: 502;
- lost mid-body: a close-delimited body ends there (``ok``); otherwise the client's connection is aborted
  (``dropped``, or ``timeout`` when the sweeper cut a silent runtime);
- silent for the read timeout before the head: 504 (:meth:`Upstream.stop_silent`);
- the client left (:meth:`Upstream.client_gone`): the runtime's connection is aborted at once, so it
  cancels the request; ``cancelled`` unless the stream had already ended.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

import httptools

from satbench.core.api import ApiFlavour
from satbench.core.sse import StreamParser
from satbench.exporter.relay_headers import RawHeaders, response_head
from satbench.exporter.relay_observe import RelayTiming, status_outcome, timing_from_body, timing_from_stream

__all__ = ["CLIENT_GONE", "ClientEnd", "Job", "Upstream", "error_answer"]

CLIENT_GONE = 499
_BODY_KEEP = 1 << 22
_HEAD_MAX = 1 << 20
_NO_BODY = (204, 304)
_clock = time.perf_counter_ns


def error_answer(status: int, message: str, request_id: str, close: bool = False) -> bytes:
    """A llama.cpp-style JSON error answer from the relay itself (502, 504, 400, 413)."""
    kind = "unavailable_error" if status == 504 else "server_error"
    body = json.dumps({"error": {"code": status, "message": f"relay: {message}", "type": kind}}).encode()
    reasons = {400: b"Bad Request", 413: b"Payload Too Large", 502: b"Bad Gateway", 504: b"Gateway Timeout"}
    head = [b"HTTP/1.1 %d %s" % (status, reasons.get(status, b"Error")), b"Content-Type: application/json",
            b"Content-Length: %d" % len(body), b"X-Request-ID: " + request_id.encode("latin-1")]
    if close:
        head.append(b"Connection: close")
    return b"\r\n".join(head) + b"\r\n\r\n" + body


class ClientEnd(Protocol):
    """What the upstream side needs of a client connection (``exporter.relay_client.ClientSide``).

    A protocol rather than an import: the client side imports this module for ``Job``, so this module
    names only what it uses and the two modules do not import each other.
    """

    transport: asyncio.Transport | None
    paused: bool
    gone: bool

    def answered(self, job: Job, keep_alive: bool) -> None: ...

    def abort(self) -> None: ...

    def reply_error(self, job: Job, status: int, message: str) -> None: ...


@dataclass(eq=False)
class Job:
    """One request from a client: what to send, how to time it, and whether it has been accounted for."""

    client: ClientEnd
    route: str
    api: ApiFlavour | None
    start_ns: int
    request_id: str
    wire: bytes
    head_only: bool
    keep_alive: bool
    conclude: Callable[[Job, int, str, RelayTiming | None], None]
    attempts: int = 0
    ended: bool = False
    upstream: Upstream | None = field(default=None, repr=False)


class Upstream(asyncio.Protocol):
    """A connection to the runtime. ``pool`` gets it back after a kept-alive answer; ``retry`` reconnects."""

    def __init__(self, pool: list[Upstream], active: set[Upstream], retry: Callable[[Job], None]) -> None:
        self.pool, self.active, self.retry = pool, active, retry
        self.transport: asyncio.Transport | None = None
        self.job: Job | None = None
        self.out: asyncio.Transport | None = None
        self.parser: Any = None
        self.last_ns = 0
        self.silent = False
        self._reset()

    def _reset(self) -> None:
        self.held = bytearray()
        self.head_sent = False
        self.headers_done = False
        self.complete = False
        self.status = 0
        self.reason = b""
        self.raw: RawHeaders = []
        self.keep = False
        self.until_close = False
        self.stream: StreamParser | None = None
        self.feed: Callable[[bytes, int], bool] | None = None
        self.whole: bytearray | None = None
        self.body_ns = 0

    # -- connection ---------------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not subclasses

    def begin(self, job: Job) -> None:
        """Sends ``job``'s request on this (open, idle) connection and starts watching its answer."""
        self._reset()
        self.job, job.upstream = job, self
        self.out = job.client.transport
        self.parser = httptools.HttpResponseParser(self)
        self.silent = False
        self.last_ns = time.perf_counter_ns()
        self.active.add(self)
        transport = self.transport
        assert transport is not None
        if job.client.paused:  # the client's buffer is still full: let the runtime wait
            transport.pause_reading()
        elif not transport.is_reading():
            transport.resume_reading()
        transport.write(job.wire)

    def data_received(self, data: bytes) -> None:
        self.last_ns = _clock()
        if self.head_sent:  # the hot path: forward, then observe
            out = self.out
            if out is not None:
                out.write(data)
            try:
                self.parser.feed_data(data)
            except httptools.HttpParserError:
                self._lost("dropped")
                return
            if self.complete:
                self._finished()
            return
        if self.job is None:  # bytes on an idle connection: not HTTP we can use
            self._close()
            return
        self.held += data
        if len(self.held) > _HEAD_MAX and not self.headers_done:
            self._fail(502, f"runtime sent an answer head over {_HEAD_MAX} bytes")
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(502, f"runtime sent a malformed answer: {exc}")
            return
        if self.headers_done:
            self._send_head()
            if self.complete:
                self._finished()

    def connection_lost(self, exc: Exception | None) -> None:
        self.active.discard(self)
        if self in self.pool:
            self.pool.remove(self)
        self.transport = None
        job = self.job
        if job is None or job.ended:
            return
        if not self.headers_done:
            if not self.held and job.attempts < 2:
                self.job = None
                self.retry(job)
                return
            if not self.held:
                self._fail(502, f"runtime closed the connection without answering: {exc or 'EOF'}")
            else:
                self._fail(502, f"runtime closed the connection mid-head: {exc or 'EOF'}")
            return
        if self.until_close and exc is None and not self.silent:
            self.complete = True
            self._finished()
            return
        self._lost("timeout" if self.silent else "dropped")

    def pause_reading(self) -> None:
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.transport is not None:
            self.transport.resume_reading()

    # -- parser callbacks ----------------------------------------------------------------------------------

    def on_status(self, reason: bytes) -> None:
        self.reason += reason

    def on_header(self, name: bytes, value: bytes) -> None:
        self.raw.append((name, value))

    def on_headers_complete(self) -> None:
        parser, job = self.parser, self.job
        assert job is not None
        self.status = status = parser.get_status_code()
        self.keep = parser.should_keep_alive()
        self.headers_done = True
        self.body_ns = self.last_ns
        names = {n.lower(): v for n, v in self.raw}
        framed = b"content-length" in names or b"chunked" in names.get(b"transfer-encoding", b"").lower()
        no_body = job.head_only or status in _NO_BODY or status < 200
        self.until_close = not framed and not no_body
        if job.head_only:
            self.complete, self.keep = True, False  # the parser would wait for the announced body
        if job.api is not None:
            if names.get(b"content-type", b"").startswith(b"text/event-stream"):
                self.stream = StreamParser(job.api)
                self.feed = self.stream.feed
            else:
                self.whole = bytearray()

    def on_body(self, body: bytes) -> None:
        self.body_ns = self.last_ns  # the e2e end: the last body bytes, not the chunked terminator after them
        feed = self.feed
        if feed is not None:
            if not feed(body, self.last_ns):
                self.feed = None
        elif self.whole is not None and len(self.whole) < _BODY_KEEP:
            self.whole += body

    def on_message_complete(self) -> None:
        self.complete = True
        self.keep = self.keep and self.parser.should_keep_alive()

    # -- endings -------------------------------------------------------------------------------------------

    def _send_head(self) -> None:
        job = self.job
        assert job is not None
        close = self.until_close or not job.keep_alive
        head = response_head(self.status, self.reason, self.raw, job.request_id, close)
        held = bytes(self.held)
        end = held.find(b"\r\n\r\n")
        start = end + 4 if end >= 0 else held.find(b"\n\n") + 2
        self.held = bytearray()
        self.head_sent = True
        if self.out is not None:
            self.out.write(head + held[start:] if not job.head_only else head)

    def _timing(self, lost: str | None) -> tuple[int, str, RelayTiming | None]:
        job = self.job
        assert job is not None
        timing: RelayTiming | None = None
        if self.stream is not None:
            timing = timing_from_stream(self.stream, job.start_ns, self.body_ns, self.status)
        elif self.whole is not None:
            timing = timing_from_body(bytes(self.whole), job.start_ns, self.body_ns, self.status)
        if lost is not None and timing is not None:
            timing = RelayTiming(e2e_s=timing.e2e_s, prompt_tokens=timing.prompt_tokens,
                                 output_tokens=timing.output_tokens, outcome=lost)
        outcome = timing.outcome if timing is not None else lost or status_outcome(self.status)
        return self.status, outcome, timing

    def _detach(self) -> Job:
        job = self.job
        assert job is not None
        self.job, self.out = None, None
        self.head_sent = False  # stray bytes on the idle connection now close it (``data_received``)
        self.active.discard(self)
        job.ended = True
        return job

    def _finished(self) -> None:
        """The whole answer went to the client: account for it, recycle the connection, free the client."""
        code, outcome, timing = self._timing(None)
        keep = self.keep and not self.until_close
        job = self._detach()
        job.conclude(job, code, outcome, timing)
        if keep and self.transport is not None and not self.transport.is_closing():
            self.pool.append(self)
        else:
            self._close()
        job.client.answered(job, job.keep_alive and not self.until_close)

    def _lost(self, outcome: str) -> None:
        """The answer broke mid-body: the client must see a truncated answer, not a clean end."""
        code, outcome, timing = self._timing(outcome)
        job = self._detach()
        self._close()
        job.conclude(job, code, outcome, timing)
        job.client.abort()

    def _fail(self, status: int, message: str) -> None:
        """No usable answer head: the client gets the relay's own error answer."""
        job = self._detach()
        self._close()
        job.conclude(job, status, "timeout" if status == 504 else "refused", None)
        job.client.reply_error(job, status, message)

    def stop_silent(self, read_timeout_s: float) -> None:
        """The runtime said nothing for the read timeout: 504 before the head, else cut (outcome timeout)."""
        if self.job is None or self.job.ended:
            self.active.discard(self)
            return
        if not self.headers_done:
            self._fail(504, f"runtime sent no answer within {read_timeout_s:g} s")
            return
        self.silent = True
        self._lost("timeout")

    def client_gone(self) -> None:
        """The client left: close the runtime's connection now, so the runtime cancels the request."""
        job = self._detach()
        self._close()
        stream = self.stream
        if stream is not None and stream.done:  # it had the whole stream; it just did not wait for the end
            code, outcome, timing = self._timing(None)
            job.conclude(job, code, outcome, timing)
        else:
            job.conclude(job, CLIENT_GONE, "cancelled", None)

    def _close(self) -> None:
        if self in self.pool:
            self.pool.remove(self)
        if self.transport is not None:
            self.transport.abort()
