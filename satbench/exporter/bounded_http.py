"""HTTP fetches that end by a deadline and read at most a stated number of bytes, whatever the server does.

httpx's timeouts are per operation: a read waits at most ``read`` seconds *for the next bytes*, so a runtime
that trickles a byte every 0.3 s keeps one fetch (and the worker thread doing it) for as long as it likes;
the audit measured a 1 s fetch taking 12 s, and ``close()`` waiting 11 s for it. Reading a body whole before
looking at its size lets a 1 GB ``/slots`` into memory.

So every socket operation of a fetch is clamped to what is left of the fetch's own deadline
(:class:`DeadlineBackend`, an httpcore network backend: connect, TLS, every ``send`` and every ``recv``,
headers included), and the body is streamed and cut at ``max_bytes`` (a ``Content-Length`` above it is
refused before a byte of the body is read). A slow or hostile runtime therefore costs one fetch of at most
its deadline, and the thread that ran it is free again at the deadline, so the fetcher's ``close()`` is
prompt. The deadline travels in a thread-local (:func:`deadline`), set by the one thread that runs the
fetch, because httpcore passes a backend nothing but its per-operation timeout.
"""

from __future__ import annotations

import contextlib
import ssl
import threading
import time
import typing
from collections.abc import Iterator

import httpcore
import httpx

__all__ = ["DeadlineBackend", "DeadlineExceeded", "TooLarge", "bounded_transport", "deadline", "read_bounded"]

_local = threading.local()


class DeadlineExceeded(httpcore.TimeoutException):
    """The fetch's total deadline passed (raised by a socket operation; httpx maps it to a timeout)."""


class TooLarge(Exception):
    """The body is larger than the fetch may read."""


@contextlib.contextmanager
def deadline(at: float) -> Iterator[None]:
    """Every socket operation this thread performs inside the block ends by ``at`` (``time.monotonic``)."""
    before = getattr(_local, "at", None)
    _local.at = at
    try:
        yield
    finally:
        _local.at = before


def _clamp(timeout: float | None) -> float | None:
    at: float | None = getattr(_local, "at", None)
    if at is None:
        return timeout
    left = at - time.monotonic()
    if left <= 0:
        raise DeadlineExceeded("the fetch's deadline passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _clamp(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _clamp(timeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        return _DeadlineStream(self._inner.start_tls(ssl_context, server_hostname, _clamp(timeout)))

    def get_extra_info(self, info: str) -> typing.Any:
        return self._inner.get_extra_info(info)


class DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's socket backend with every operation clamped to the thread's :func:`deadline`."""

    def __init__(self) -> None:
        self._inner = httpcore.SyncBackend()

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: typing.Iterable[typing.Any] | None = None) -> httpcore.NetworkStream:
        return _DeadlineStream(self._inner.connect_tcp(host, port, _clamp(timeout), local_address, socket_options))

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: typing.Iterable[typing.Any] | None = None) -> httpcore.NetworkStream:
        return _DeadlineStream(self._inner.connect_unix_socket(path, _clamp(timeout), socket_options))

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, min(seconds, _clamp(seconds) or 0.0)))


def bounded_transport() -> httpx.HTTPTransport:
    """httpx's transport over :class:`DeadlineBackend` (its keep-alive pool kept)."""
    transport = httpx.HTTPTransport()
    transport._pool = httpcore.ConnectionPool(ssl_context=httpx.create_ssl_context(),
                                              network_backend=DeadlineBackend())
    return transport


def read_bounded(response: httpx.Response, max_bytes: int) -> bytes:
    """The body of a streamed ``response``, refused (:class:`TooLarge`) past ``max_bytes``."""
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        raise TooLarge(f"a {encoding}-encoded body, which was not asked for (its size unpacked is not known)")
    length = response.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > max_bytes:
        raise TooLarge(f"a {int(length)}-byte body, more than the {max_bytes} bytes read")
    if response.is_stream_consumed:  # a transport that read the body already (an in-process mock)
        if len(response.content) > max_bytes:
            raise TooLarge(f"a body over {max_bytes} bytes: cut")
        return response.content
    body = bytearray()
    for chunk in response.iter_raw():
        body += chunk
        if len(body) > max_bytes:
            raise TooLarge(f"a body over {max_bytes} bytes: cut")
    return bytes(body)
