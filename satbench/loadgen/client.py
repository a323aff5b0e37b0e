"""The hot path: one streamed request, timed on the wire, classified by outcome.

Two transports behind one ``LaneClient``:

- ``http://`` lanes (the default): :mod:`loadgen.rawclient`, HTTP/1.1 on non-blocking sockets with token
  arrivals stamped by the kernel (``SO_TIMESTAMPNS``), so the client's own event-loop lag does not enter
  TTFT, ITL or e2e. ``preopen(c)`` opens c kept-alive connections before a rung, so the opening burst does
  not pay c TCP handshakes.
- ``https://`` lanes, or ``http_client = "aiohttp"``: aiohttp, one ``ClientSession`` per lane, the body read
  with ``readany`` and timed when read (TLS records hide segment arrivals, and a TLS stack is not worth
  writing here). Plain httpx was rejected: its pooling adds tens of milliseconds of send delay at c=64.

Either way the body goes to the byte-level ``StreamParser``; one clock reading per read, not per token.

Known real-server behaviour: llama-server sometimes closes a kept-alive connection right after a streamed
response, so the *next* request on it fails before any byte. Such a request is retried once on a fresh
connection, keeps one record, and is marked ``retried``. Any other failure, or a second one, is recorded as
it is.

Outcomes: ``refused`` (connection refused or timed out, 429/503), ``http_error`` (other status, or an error
event), ``timeout``, ``dropped`` (connection lost or stream ended before its end marker), ``malformed``
(not an event stream, not HTTP, or over a bound).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import aiohttp

from satbench.core.api import endpoint_path
from satbench.core.sse import StreamParser, StreamSummary
from satbench.loadgen.config import LaneConfig, LoadgenConfig
from satbench.loadgen.rawclient import Answer, RawHttp, StaleConnection, _Exchange

__all__ = ["Begun", "LaneClient", "RawResult"]

_REFUSED_STATUS = (429, 503)


@dataclass(slots=True)
class RawResult:
    """One request as timed on the wire (monotonic ns); the runner turns it into a ``RequestRecord``."""

    send_ns: int
    end_ns: int
    token_ns: list[int]
    outcome: str
    status: int | None = None
    error: str | None = None
    retried: bool = False
    summary: StreamSummary | None = None
    extra: dict[str, object] = field(default_factory=dict)


class _RetryFresh(Exception):
    pass


@dataclass(slots=True)
class Begun:
    """A request ``LaneClient.prepare`` made ready on an idle kept-alive connection: ``go()`` hands it to the
    kernel (synchronously, the send time read just before), ``LaneClient.send`` reads its answer, and
    ``abandon()`` lets go of the connection where that never happens (a wait cancelled; a task cancelled
    before it ran): back to the pool if nothing was sent, closed otherwise."""

    raw: RawHttp
    request: bytes
    exchange: _Exchange
    error: str | None = None
    sent: bool = False

    @property
    def send_ns(self) -> int:
        return self.exchange.send_ns

    def go(self) -> None:
        self.sent = True
        try:
            self.raw.send_now(self.exchange, self.request)
        except StaleConnection as exc:
            self.error = repr(exc)

    def abandon(self) -> None:
        self.raw.release(self.exchange, ok=not self.sent)


class LaneClient:
    """Sends the requests of one lane; ``open(max_c)`` before use, ``close()`` after."""

    def __init__(self, lane: LaneConfig, config: LoadgenConfig) -> None:
        self.lane = lane
        self.config = config
        self.url = lane.url + endpoint_path(lane.api)
        self._session: aiohttp.ClientSession | None = None
        self._fresh: aiohttp.ClientSession | None = None
        self._timeout = aiohttp.ClientTimeout(total=config.request_timeout_s,
                                              sock_connect=config.connect_timeout_s)
        key = lane.api_key()
        self._base_headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if key:
            self._base_headers["Authorization"] = f"Bearer {key}"
        parts = urlsplit(self.url)
        self._raw: RawHttp | None = None
        self._head = b""
        if parts.scheme == "http" and config.http_client == "auto":
            host = parts.hostname or "127.0.0.1"
            self._raw = RawHttp(host, parts.port or 80, connect_timeout_s=config.connect_timeout_s,
                                request_timeout_s=config.request_timeout_s)
            lines = [f"POST {parts.path or '/'} HTTP/1.1", f"Host: {parts.netloc.rpartition('@')[2]}",
                     *(f"{k}: {v}" for k, v in self._base_headers.items())]
            self._head = ("\r\n".join(lines) + "\r\n").encode("latin-1")

    @property
    def kernel_timed(self) -> bool:
        """True when token arrivals come from kernel receive stamps (plain-HTTP lanes on Linux)."""
        return self._raw is not None and self._raw.stamps_seen

    def release_points(self, hook: Callable[[], None] | None) -> None:
        """Runs ``hook`` after each answer read (a pacer's ``poll``), or no more with ``None``: the plain-HTTP
        transport only."""
        if self._raw is not None:
            self._raw.after_read = hook

    def take_read_lags(self) -> list[int]:
        """Per request since the last call: how long after the kernel had its first answer bytes the client
        read them (ns); empty for the aiohttp transport, which cannot tell."""
        return self._raw.take_read_lags() if self._raw is not None else []

    async def open(self, max_concurrency: int) -> None:
        if self._raw is not None:
            return
        limit = max(max_concurrency, 1) + 4
        connector = aiohttp.TCPConnector(limit=limit, limit_per_host=limit, keepalive_timeout=30.0,
                                         enable_cleanup_closed=False)
        self._session = aiohttp.ClientSession(connector=connector, timeout=self._timeout,
                                              auto_decompress=False)
        self._fresh = aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True, limit=limit),
                                            timeout=self._timeout, auto_decompress=False)

    async def close(self) -> None:
        if self._raw is not None:
            self._raw.close()
        for session in (self._session, self._fresh):
            if session is not None:
                await session.close()
        self._session = self._fresh = None

    async def preopen(self, n: int, path: str = "/health") -> None:
        """Opens up to n pooled connections (plain TCP connects, or concurrent GETs for aiohttp)."""
        if self._raw is not None:
            await self._raw.preopen(n)
            return
        session = self._session
        if session is None:
            return

        async def one() -> None:
            with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError, OSError):
                url = self.lane.url + path
                async with session.get(url, timeout=aiohttp.ClientTimeout(total=5.0)) as resp:
                    await resp.read()

        await asyncio.gather(*(one() for _ in range(n)))

    def prepare(self, body: bytes, request_id: str, parser: StreamParser) -> Begun | None:
        """One request made ready to be handed to the kernel by ``Begun.go()`` (a paced send: everything but
        the send is done before its time), where the transport can: the plain-HTTP transport with a
        kept-alive connection idle. ``None`` otherwise: ``send`` then connects and sends as usual. A send
        that fails on the idle connection is retried by ``send`` on a fresh one, as any stale connection is."""
        raw = self._raw
        if raw is None:
            return None
        conn = raw.take()
        if conn is None:
            return None
        return Begun(raw, self._request_bytes(body, request_id), raw.prepare(conn, parser))

    def _request_bytes(self, body: bytes, request_id: str) -> bytes:
        return b"".join((self._head, b"X-Request-ID: ", request_id.encode("latin-1", "replace"),
                         b"\r\nContent-Length: %d\r\n\r\n" % len(body), body))

    async def send(self, body: bytes, request_id: str, parser: StreamParser | None = None,
                   begun: Begun | None = None) -> RawResult:
        """Sends one streamed request and reads it to the end; never raises (except cancellation).

        ``parser`` (fresh) lets the caller watch tokens of the request while it is in flight; ``begun``: the
        request ``prepare`` made ready (with that parser) and ``go()`` sent.
        """
        parser = parser or StreamParser(self.lane.api, self.config.max_event_bytes)
        if self._raw is not None:
            return await self._send_raw(self._raw, body, request_id, parser, begun)
        assert self._session is not None and self._fresh is not None, "LaneClient.open() first"
        headers = dict(self._base_headers)
        headers["X-Request-ID"] = request_id
        send_ns = time.perf_counter_ns()
        try:
            return await self._attempt(self._session, parser, body, headers, send_ns, first=True)
        except _RetryFresh as first_error:
            parser.reset()
            retry_ns = time.perf_counter_ns()
            result = await self._attempt(self._fresh, parser, body, headers, retry_ns, first=False)
            result.retried = True
            result.extra["first_attempt_error"] = str(first_error)[:120]
            return result

    async def _attempt(self, session: aiohttp.ClientSession, parser: StreamParser, body: bytes,
                       headers: dict[str, str], send_ns: int, *, first: bool) -> RawResult:
        status: int | None = None
        try:
            async with session.post(self.url, data=body, headers=headers) as resp:
                status = resp.status
                if status != 200:
                    text = (await resp.content.read(512)).decode("utf-8", "replace")
                    outcome = "refused" if status in _REFUSED_STATUS else "http_error"
                    return RawResult(send_ns, time.perf_counter_ns(), [], outcome, status,
                                     f"HTTP {status}: {text[:160]}")
                read = resp.content.readany
                feed = parser.feed
                clock = time.perf_counter_ns
                while True:
                    chunk = await read()
                    if not chunk:
                        break
                    if not feed(chunk, clock()):
                        break
        except aiohttp.ServerDisconnectedError as exc:
            if status is None and first:
                raise _RetryFresh(repr(exc)) from exc
            return self._failed(send_ns, parser, status, "dropped", f"server disconnected: {exc!r}")
        except aiohttp.ClientConnectorError as exc:
            return self._failed(send_ns, parser, status, "refused", f"connect failed: {exc}")
        except (TimeoutError, aiohttp.ServerTimeoutError):
            return self._failed(send_ns, parser, status, "timeout",
                                f"no end after {self.config.request_timeout_s}s")
        except (aiohttp.ClientPayloadError, aiohttp.ClientOSError, ConnectionError) as exc:
            if status is None and first and isinstance(exc, aiohttp.ClientOSError | ConnectionError):
                raise _RetryFresh(repr(exc)) from exc
            return self._failed(send_ns, parser, status, "dropped", f"connection lost: {type(exc).__name__}")
        except aiohttp.ClientError as exc:
            return self._failed(send_ns, parser, status, "http_error", f"{type(exc).__name__}: {exc}"[:200])
        return _conclude(send_ns, time.perf_counter_ns(), parser, status)

    async def _send_raw(self, raw: RawHttp, body: bytes, request_id: str, parser: StreamParser,
                        begun: Begun | None) -> RawResult:
        request = begun.request if begun is not None else self._request_bytes(body, request_id)
        first_error: str | None = None
        for attempt in (0, 1):
            extra: dict[str, object] = {}
            if attempt == 0 and begun is not None:
                if begun.error is not None:  # the kernel refused the send on the idle connection: a fresh one
                    first_error = begun.error
                    parser.reset()
                    continue
                try:
                    send_ns, answer = await raw.finish(begun.exchange, request)
                except StaleConnection as exc:
                    first_error = repr(exc)
                    parser.reset()
                    continue
                return _retried(_answer_result(send_ns, answer, parser, self.config.request_timeout_s), first_error)
            conn = raw.take() if attempt == 0 else None
            if conn is None:
                t0 = time.perf_counter_ns()
                try:
                    conn = await raw.connect()
                except TimeoutError:
                    return _retried(RawResult(t0, time.perf_counter_ns(), [], "refused", None,
                                              f"connect timed out after {self.config.connect_timeout_s}s"),
                                    first_error)
                except OSError as exc:
                    return _retried(RawResult(t0, time.perf_counter_ns(), [], "refused", None,
                                              f"connect failed: {exc}"[:200]), first_error)
                extra["connect_ms"] = round((time.perf_counter_ns() - t0) / 1e6, 3)
            try:
                send_ns, answer = await raw.exchange(conn, request, parser)
            except StaleConnection as exc:
                if attempt == 0:
                    first_error = repr(exc)
                    parser.reset()
                    continue
                now = time.perf_counter_ns()
                return _retried(RawResult(now, now, [], "dropped", None, f"server disconnected: {exc}"[:200]),
                                first_error)
            result = _answer_result(send_ns, answer, parser, self.config.request_timeout_s)
            result.extra.update(extra)
            return _retried(result, first_error)
        raise AssertionError("unreachable")  # pragma: no cover

    @staticmethod
    def _failed(send_ns: int, parser: StreamParser, status: int | None, outcome: str,
                error: str) -> RawResult:
        return RawResult(send_ns, time.perf_counter_ns(), parser.token_ns, outcome, status, error[:200])


def _retried(result: RawResult, first_error: str | None) -> RawResult:
    if first_error is not None:
        result.retried = True
        result.extra["first_attempt_error"] = first_error[:120]
    return result


def _answer_result(send_ns: int, answer: Answer, parser: StreamParser, timeout_s: float) -> RawResult:
    """A raw-transport exchange as a result: transport failures first, then what the stream said."""
    status, end = answer.status, answer.end_ns
    if answer.timed_out:
        return RawResult(send_ns, end, parser.token_ns, "timeout", status, f"no end after {timeout_s}s")
    if answer.parse_error:
        return RawResult(send_ns, end, parser.token_ns, "malformed", status, answer.parse_error[:200])
    if status is None:
        return RawResult(send_ns, end, [], "dropped", None, f"connection lost before the answer head: "
                                                              f"{answer.lost}"[:200])
    if status != 200:
        text = answer.error_body.decode("utf-8", "replace")
        outcome = "refused" if status in _REFUSED_STATUS else "http_error"
        return RawResult(send_ns, end, [], outcome, status, f"HTTP {status}: {text[:160]}")
    if answer.lost is not None and not parser.done and not parser.malformed and parser.error_text is None:
        return RawResult(send_ns, end, parser.token_ns, "dropped", status,
                         f"connection lost: {answer.lost}"[:200])
    return _conclude(send_ns, end, parser, status)


def _conclude(send_ns: int, end_ns: int, parser: StreamParser, status: int | None) -> RawResult:
    """What a stream read to its end (or to where it stopped) was: ok, malformed, an error, or cut short."""
    if parser.malformed:
        return RawResult(send_ns, end_ns, parser.token_ns, "malformed", status, parser.malformed)
    summary = parser.summary()
    if summary.problem:
        return RawResult(send_ns, end_ns, parser.token_ns, "malformed", status, summary.problem,
                         summary=summary)
    if summary.error:
        return RawResult(send_ns, end_ns, parser.token_ns, "http_error", status, summary.error,
                         summary=summary)
    if not parser.done and parser.events == 0 and not parser.token_ns and parser.saw_bytes:
        return RawResult(send_ns, end_ns, [], "malformed", status, "response is not an event stream")
    if not parser.done:
        return RawResult(send_ns, end_ns, parser.token_ns, "dropped", status,
                         "stream ended before its end marker", summary=summary)
    return RawResult(send_ns, end_ns, parser.token_ns, "ok", status, summary=summary)
