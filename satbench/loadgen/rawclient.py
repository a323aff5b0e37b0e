"""The plain-HTTP hot path: HTTP/1.1 on non-blocking sockets, each read timed by the kernel.

Why not an HTTP library here: a latency measured when the client's event loop gets round to a socket is
the client's lag plus the server's latency. At 64 streams on a small host the loop is often a few
milliseconds behind, and no Python client can read every socket the instant its bytes land. The kernel can
say when they did: with ``SO_TIMESTAMPNS`` (Linux) each ``recvmsg`` carries the receive time of the newest
segment it returned, taken in the network stack before the process ran. Token arrivals, and so TTFT, ITL
and e2e, are read from that stamp (mapped to ``perf_counter_ns``), so client lag no longer enters them;
how far behind the client was is kept as *read lag* (user-space read time minus kernel arrival), a
self-check figure. The send time is read just before the ``send`` call that hands the request to the
kernel, with no library code between the two.

The rest is what a small client needs and nothing more: ``httptools`` (llhttp, C) parses the answer head
and de-chunks the body; connections are kept alive in a LIFO pool and checked for a peer close (one
``MSG_PEEK``) before reuse; a connection that fails before any answer byte raises :class:`StaleConnection`
so the caller can retry once on a new one. Where the kernel gives no stamp (another OS, a socket option
refused) the read time is used, as any client would.

One limit of the stamps: a read returns every segment that has arrived, stamped with the newest one's
arrival. While the client keeps up (read lag below the gap between tokens) each read is one segment; a
client further behind than that stamps the tokens it reads together with the arrival of the last of them,
so the earlier ones are late by less than the read lag (the self-check reports it), never by more.

Bounds: an answer head of 64 KiB or more, or a non-200 body past what is kept (512 bytes), stops reading; the
event-stream body is bounded by the SSE parser's ``max_event_bytes``.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import sys
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass

import httptools

from satbench.core.sse import StreamParser

__all__ = ["Answer", "RawConnection", "RawHttp", "StaleConnection", "kernel_timestamps"]

# SO_TIMESTAMPNS (== SCM_TIMESTAMPNS) on Linux for x86, arm and most others; Python's socket module lacks it.
_SO_TIMESTAMPNS = 35 if sys.platform.startswith("linux") else None
_ANC_SPACE = socket.CMSG_SPACE(16)
_TIMESPEC = struct.Struct("qq")
_HEAD_MAX = 64 << 10
_ERROR_KEEP = 512
_READ = 1 << 16
# How long a finished stream may take to close its HTTP message (the last chunk) before the connection is
# closed instead of kept for reuse.
_TAIL_S = 1.0
_perf_ns = time.perf_counter_ns
_wall_ns = time.time_ns
_OFFSET_SPAN_NS = 20_000  # a wall/perf pair read further apart than this was preempted: read it again


def _wall_minus_perf_ns() -> int:
    """``CLOCK_REALTIME - perf_counter`` now, read as a wall/perf/wall sandwich (the midpoint of the two wall
    reads against the perf read between them), again while the sandwich is wider than 20 us: a thread
    preempted between two clock reads would otherwise shift every kernel stamp it maps by the preemption,
    earlier than the packet came (a loaded machine preempts for milliseconds)."""
    best = None
    for _ in range(4):
        w1 = _wall_ns()
        p = _perf_ns()
        w2 = _wall_ns()
        span = w2 - w1
        if best is None or span < best[0]:
            best = (span, (w1 + w2) // 2 - p)
        if span <= _OFFSET_SPAN_NS:
            break
    assert best is not None
    return best[1]


class StaleConnection(ConnectionError):
    """The connection failed before any answer byte (a kept-alive connection the server had closed)."""


@dataclass(slots=True)
class Answer:
    """How one exchange ended: status (None if no head), times in ``perf_counter_ns``, and why it stopped."""

    status: int | None
    end_ns: int
    error_body: bytes = b""
    lost: str | None = None
    timed_out: bool = False
    parse_error: str | None = None


def kernel_timestamps(sock: socket.socket) -> bool:
    """Asks the kernel to stamp received data on ``sock``; False where it cannot."""
    if _SO_TIMESTAMPNS is None:
        return False
    try:
        sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
    except OSError:
        return False
    return True


class RawConnection:
    """One open socket to the server; used by one exchange at a time."""

    __slots__ = ("reusable", "sock", "stamped")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.stamped = kernel_timestamps(sock)
        self.reusable = False  # set by the exchange that last used it

    def alive(self) -> bool:
        """False when the peer closed (or sent something unasked) while the connection sat idle."""
        try:
            self.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return True  # nothing to read: still open and quiet
        except OSError:
            return False
        return False  # an end of stream (b"") or bytes nobody asked for: either way not reusable

    def close(self) -> None:
        self.sock.close()


class _Exchange:
    """One request/answer on one connection; the httptools callbacks and the socket reader."""

    __slots__ = (
        "after",
        "body_over",
        "chunked",
        "conn",
        "done",
        "end_ns",
        "error_body",
        "feed",
        "feed_data",
        "got_bytes",
        "head_bytes",
        "header_bytes",
        "http",
        "keep",
        "lag_ns",
        "length",
        "loop",
        "message_done",
        "recvmsg",
        "released",
        "send_ns",
        "sent",
        "status",
        "stream",
        "t_ns",
        "tail",
        "timer",
    )

    def __init__(self, loop: asyncio.AbstractEventLoop, conn: RawConnection, stream: StreamParser,
                 send_ns: int) -> None:
        self.loop, self.conn, self.stream, self.send_ns = loop, conn, stream, send_ns
        self.done: asyncio.Future[Answer] = loop.create_future()
        self.http = httptools.HttpResponseParser(self)
        self.feed = stream.feed
        self.feed_data = self.http.feed_data
        self.recvmsg = conn.sock.recvmsg
        self.t_ns = send_ns
        self.end_ns: int | None = None
        self.status: int | None = None
        self.got_bytes = False
        self.head_bytes = 0  # raw bytes read while the head is incomplete
        self.header_bytes = 0  # header lines parsed: a head that arrives whole in one read is bounded too
        self.body_over = False
        self.message_done = False
        self.keep = False
        self.chunked = False
        self.length = False
        self.error_body = bytearray()
        self.lag_ns = -1
        self.tail: asyncio.TimerHandle | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.after: Callable[[], None] | None = None  # run after each read (a pacer's release point)
        self.sent = 0
        self.released = False

    # -- httptools callbacks ------------------------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        self.header_bytes += len(name) + len(value) + 4
        lname = name.lower()
        if lname == b"transfer-encoding":
            self.chunked = b"chunked" in value.lower()
        elif lname == b"content-length":
            self.length = True

    def on_headers_complete(self) -> None:
        self.status = self.http.get_status_code()
        self.keep = self.http.should_keep_alive()

    def on_body(self, body: bytes) -> None:
        if self.body_over:
            return
        if self.status == 200:
            if not self.feed(body, self.t_ns):
                self.body_over = True
                self.end_ns = self.t_ns
        else:
            room = _ERROR_KEEP - len(self.error_body)
            self.error_body += body[:room]
            if len(self.error_body) >= _ERROR_KEEP:
                self.body_over = True
                self.end_ns = self.t_ns

    def on_message_complete(self) -> None:
        self.message_done = True
        if self.end_ns is None:
            self.end_ns = self.t_ns

    # -- socket reader ------------------------------------------------------------------------------------

    def readable(self) -> None:
        self._read()
        if self.after is not None:
            self.after()

    def _read(self) -> None:
        try:
            data, anc, _flags, _addr = self.recvmsg(_READ, _ANC_SPACE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lost(f"{type(exc).__name__}: {exc}")
            return
        now = _perf_ns()
        t = now
        if anc:
            sec, nsec = _TIMESPEC.unpack_from(anc[0][2])
            # CLOCK_REALTIME stamp onto the perf_counter clock, never later than now nor before the send.
            t = sec * 1_000_000_000 + nsec - _wall_minus_perf_ns()
            if t > now:
                t = now
            elif t < self.send_ns:
                t = self.send_ns
        if not data:
            self._lost("connection closed by the server")
            return
        if self.lag_ns < 0:
            self.lag_ns = now - t
        self.t_ns = t
        self.got_bytes = True
        in_head = self.status is None
        try:
            self.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._end(parse_error="unexpected protocol upgrade")
            return
        except httptools.HttpParserError as exc:
            self._end(parse_error=f"bad HTTP answer: {exc}")
            return
        if in_head:  # this read carried (some of) the head: bounded whether it came in pieces or whole
            if self.status is None:
                self.head_bytes += len(data)
            if self.head_bytes >= _HEAD_MAX or self.header_bytes >= _HEAD_MAX:
                self._end(parse_error=f"answer head over {_HEAD_MAX} bytes")
                return
            if self.status is None:
                return
        if self.message_done:
            self._end(reusable=self.keep)
        elif self.body_over and self.tail is None:
            if self.status == 200 and self.stream.done:
                # The stream ended cleanly; give the HTTP message a moment to end too so the connection can
                # be reused, else close it (the answer is complete either way).
                self.tail = self.loop.call_later(_TAIL_S, self._end)
            else:
                self._end()  # malformed, an error event, or enough of an error body: stop reading now

    def _lost(self, why: str) -> None:
        if self.done.done():
            return
        if not self.got_bytes:
            self.done.set_exception(StaleConnection(why))
            return
        if self.status is not None and not self.chunked and not self.length and not self.message_done:
            self.message_done = True  # a close-delimited body ends with the connection
            if self.end_ns is None:
                self.end_ns = self.t_ns
            self._end()
            return
        if self.body_over or self.message_done:
            self._end()
            return
        self._end(lost=why)

    def _end(self, *, reusable: bool = False, lost: str | None = None, parse_error: str | None = None) -> None:
        if self.done.done():
            return
        self.conn.reusable = reusable
        end = self.end_ns if self.end_ns is not None else (self.t_ns if self.got_bytes else time.perf_counter_ns())
        self.done.set_result(Answer(self.status, end, bytes(self.error_body), lost=lost, parse_error=parse_error))

    def time_out(self) -> None:
        if not self.done.done():
            self.done.set_result(Answer(self.status, time.perf_counter_ns(), bytes(self.error_body),
                                        timed_out=True))


class RawHttp:
    """Kept-alive HTTP/1.1 connections to one ``host:port`` and the exchange on them."""

    def __init__(self, host: str, port: int, *, connect_timeout_s: float, request_timeout_s: float) -> None:
        self.host, self.port = host, port
        self.connect_timeout_s, self.request_timeout_s = connect_timeout_s, request_timeout_s
        self.idle: list[RawConnection] = []
        self.open_conns: set[RawConnection] = set()
        self.read_lag_ns: array[int] = array("q")
        self.stamps_seen = False
        # called after each answer read: a paced send due meanwhile goes out between two reads of one turn of
        # the loop, not after the whole turn (loadgen.pacer)
        self.after_read: Callable[[], None] | None = None

    async def connect(self) -> RawConnection:
        """A new connection (``OSError`` when refused or unreachable, ``TimeoutError`` past the bound)."""
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
        error: OSError | None = None
        for family, kind, proto, _name, addr in infos:
            sock = socket.socket(family, kind, proto)
            sock.setblocking(False)
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                async with asyncio.timeout(self.connect_timeout_s):
                    await loop.sock_connect(sock, addr)
            except (OSError, TimeoutError) as exc:
                sock.close()
                if isinstance(exc, TimeoutError):
                    raise
                error = exc
                continue
            except BaseException:
                sock.close()
                raise
            conn = RawConnection(sock)
            self.stamps_seen = self.stamps_seen or conn.stamped
            self.open_conns.add(conn)
            return conn
        raise error or OSError(f"no address for {self.host}:{self.port}")

    def take(self) -> RawConnection | None:
        """An idle connection the server has not closed, or None."""
        while self.idle:
            conn = self.idle.pop()
            if conn.alive():
                return conn
            self.discard(conn)
        return None

    def discard(self, conn: RawConnection) -> None:
        self.open_conns.discard(conn)
        conn.close()

    async def preopen(self, n: int) -> None:
        """Opens connections until ``n`` are idle (failures are left to the requests to report); idle ones
        the server closed meanwhile (a keep-alive timeout between rungs) are dropped first."""
        alive = []
        for conn in self.idle:
            if conn.alive():
                alive.append(conn)
            else:
                self.discard(conn)
        self.idle = alive
        missing = n - len(self.idle)
        if missing <= 0:
            return
        results = await asyncio.gather(*(self.connect() for _ in range(missing)), return_exceptions=True)
        for res in results:
            if isinstance(res, RawConnection):
                self.idle.append(res)

    def close(self) -> None:
        for conn in list(self.open_conns):
            conn.close()
        self.open_conns.clear()
        self.idle.clear()

    async def exchange(self, conn: RawConnection, request: bytes, stream: StreamParser) -> tuple[int, Answer]:
        """Sends ``request`` on ``conn`` and reads the answer; returns (send time, how it ended).

        Raises :class:`StaleConnection` when ``conn`` fails before any answer byte. The connection goes back
        to the pool when the server keeps it alive and the answer ended cleanly; else it is closed (so a
        cancelled or timed-out request is cancelled on the server too).
        """
        ex = self.prepare(conn, stream)
        self.send_now(ex, request)
        return await self.finish(ex, request)

    def prepare(self, conn: RawConnection, stream: StreamParser) -> _Exchange:
        """An exchange on ``conn`` made ready to send: its answer watched for. ``send_now`` sends it (a paced
        send: inside the pacer's timer callback, all else done before its time); ``release(ex, ok=True)``
        gives the connection back unused."""
        loop = asyncio.get_running_loop()
        ex = _Exchange(loop, conn, stream, 0)
        ex.after = self.after_read
        loop.add_reader(conn.sock.fileno(), ex.readable)
        return ex

    def send_now(self, ex: _Exchange, request: bytes) -> None:
        """Hands the kernel what of ``request`` the socket takes now, the send time read just before;
        ``finish`` sends the rest and reads the answer. A failed send raises :class:`StaleConnection` with
        everything released."""
        send_ns = _perf_ns()
        ex.send_ns = ex.t_ns = send_ns
        try:
            ex.sent = ex.conn.sock.send(request)
        except (BlockingIOError, InterruptedError):
            ex.sent = 0
        except OSError as exc:
            self.release(ex, ok=False)
            raise StaleConnection(f"{type(exc).__name__}: {exc}") from exc

    async def finish(self, ex: _Exchange, request: bytes) -> tuple[int, Answer]:
        """The rest of an exchange ``send_now`` began: the request's remaining bytes, then the answer."""
        ok = False
        if ex.timer is None:
            ex.timer = ex.loop.call_later(self.request_timeout_s - (_perf_ns() - ex.send_ns) / 1e9, ex.time_out)
        try:
            if ex.sent < len(request):
                try:
                    await ex.loop.sock_sendall(ex.conn.sock, memoryview(request)[ex.sent:])
                except OSError as exc:
                    raise StaleConnection(f"{type(exc).__name__}: {exc}") from exc
            answer = await ex.done
            if ex.conn.stamped and ex.lag_ns >= 0:
                self.read_lag_ns.append(ex.lag_ns)
            ok = ex.conn.reusable and answer.lost is None and not answer.timed_out and answer.parse_error is None
            return ex.send_ns, answer
        finally:
            self.release(ex, ok=ok)

    def release(self, ex: _Exchange, *, ok: bool) -> None:
        """Ends the exchange's hold on its connection (once; later calls do nothing): the reader and timers
        go, and the connection returns to the pool (``ok``) or is closed."""
        if ex.released:
            return
        ex.released = True
        if ex.timer is not None:
            ex.timer.cancel()
        if ex.tail is not None:
            ex.tail.cancel()
        ex.loop.remove_reader(ex.conn.sock.fileno())
        # The parser holds the exchange (its callbacks) and the exchange the parser: break the cycle, so
        # the exchange is freed now and not left to the cyclic collector (off while a step runs).
        del ex.http, ex.feed_data
        if ok:
            self.idle.append(ex.conn)
        else:
            self.discard(ex.conn)

    def take_read_lags(self) -> list[int]:
        """Per request, how long after the kernel got its first answer bytes the client read them (ns)."""
        out = self.read_lag_ns.tolist()
        self.read_lag_ns = array("q")
        return out
