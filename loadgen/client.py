"""The hot path: one streamed request over aiohttp, timed with ``perf_counter_ns``, classified by outcome.

Why aiohttp and this shape: plain httpx pooling adds tens of milliseconds of send delay at c=64, aiohttp a
few. One ``ClientSession`` per lane with a ``TCPConnector`` whose limit is at least the rung's concurrency;
``preopen(c)`` opens c connections with concurrent cheap GETs before a rung, so the opening burst does not
pay c TCP handshakes. The body is read with ``readany`` (whatever bytes have arrived) and handed to the
byte-level ``StreamParser``; one clock read per chunk, not per token.

Known real-server behaviour: llama-server sometimes closes a kept-alive connection right after a streamed
response, so the *next* request on it fails before any byte with ``ServerDisconnectedError``. Such a
request is retried once on a fresh connection (a separate session that never reuses connections), keeps
one record, and is marked ``retried``. Any other failure, or a second one, is recorded as it is.

Outcomes: ``refused`` (connection refused, 429/503), ``http_error`` (other status, or an error event),
``timeout``, ``dropped`` (connection lost or stream ended before its end marker), ``malformed``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field

import aiohttp

from loadgen.config import LaneConfig, LoadgenConfig
from loadgen.sse import StreamParser, StreamSummary
from loadgen.workload import endpoint_path

__all__ = ["LaneClient", "RawResult"]

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

    async def open(self, max_concurrency: int) -> None:
        limit = max(max_concurrency, 1) + 4
        connector = aiohttp.TCPConnector(limit=limit, limit_per_host=limit, keepalive_timeout=30.0,
                                         enable_cleanup_closed=False)
        self._session = aiohttp.ClientSession(connector=connector, timeout=self._timeout,
                                              auto_decompress=False)
        self._fresh = aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True, limit=limit),
                                            timeout=self._timeout, auto_decompress=False)

    async def close(self) -> None:
        for session in (self._session, self._fresh):
            if session is not None:
                await session.close()
        self._session = self._fresh = None

    async def preopen(self, n: int, path: str = "/health") -> None:
        """Opens up to n pooled connections with concurrent GETs (any answer will do)."""
        session = self._session
        if session is None:
            return

        async def one() -> None:
            with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError, OSError):
                url = self.lane.url + path
                async with session.get(url, timeout=aiohttp.ClientTimeout(total=5.0)) as resp:
                    await resp.read()

        await asyncio.gather(*(one() for _ in range(n)))

    async def send(self, body: bytes, request_id: str, parser: StreamParser | None = None) -> RawResult:
        """Sends one streamed request and reads it to the end; never raises (except cancellation).

        ``parser`` (fresh) lets the caller watch tokens of the request while it is in flight.
        """
        parser = parser or StreamParser(self.lane.api, self.config.max_event_bytes)
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
        end_ns = time.perf_counter_ns()
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

    @staticmethod
    def _failed(send_ns: int, parser: StreamParser, status: int | None, outcome: str,
                error: str) -> RawResult:
        return RawResult(send_ns, time.perf_counter_ns(), parser.token_ns, outcome, status, error[:200])
