"""Which headers the relay passes on, in each direction (pure; over the HTTP parser's raw header lists).

A transparent proxy passes every end-to-end header unchanged, repeated ones included (``Set-Cookie``),
with the order and the exact spelling of the name kept. It drops the hop-by-hop ones of RFC 9110 section 7.6.1
(``Connection``, ``Keep-Alive``, ``Transfer-Encoding``, ``Upgrade``, ``TE``, ``Trailer``,
``Proxy-Authenticate``, ``Proxy-Authorization`` and any header the ``Connection`` header names), because
they describe one connection, not the message. Two exceptions, because the relay forwards the answer's
body bytes as the runtime framed them: the answer keeps ``Transfer-Encoding`` and ``Content-Length`` as
sent. The request's body is read whole and sent with a ``Content-Length`` of its own; ``Host`` names the
runtime.

The relay adds nothing of its own (no ``User-Agent``, ``Accept`` ...), so the runtime sees the client's
headers and nothing else, except ``X-Request-ID``, added when absent so that a request can be joined
across client records, relay and runtime. The answer gets that same ``X-Request-ID`` when the runtime did
not echo one (llama-server does not), so a client that sent none learns the relay's.

Headers are the parser's ``(name, value)`` byte pairs, in order: no multidict is built per request.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

__all__ = ["HOP_BY_HOP", "REQUEST_ID", "RawHeaders", "request_head", "response_head"]

HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer", "trailers",
    "transfer-encoding", "upgrade",
})
REQUEST_ID = "X-Request-ID"

RawHeaders = list[tuple[bytes, bytes]]
_HOP_BYTES = frozenset(h.encode() for h in HOP_BY_HOP)
_REQUEST_DROP = _HOP_BYTES | {b"host", b"content-length", b"expect"}
_RESPONSE_FRAMING = frozenset({b"transfer-encoding", b"content-length"})
_ID_BYTES = REQUEST_ID.lower().encode()


def _named_by_connection(raw: RawHeaders) -> set[bytes]:
    return {t.strip().lower() for n, v in raw if n.lower() == b"connection" for t in v.split(b",") if t.strip()}


def request_head(
    method: bytes, target: bytes, raw: RawHeaders, host: bytes, body_length: int | None,
    new_id: Callable[[], str] = lambda: uuid.uuid4().hex,
) -> tuple[bytes, str]:
    """(the request head to send the runtime, the request's X-Request-ID); ``body_length`` None: no body.

    The body was read whole (de-chunked), so it always goes with a Content-Length of its own; ``Host``
    names the runtime; ``Expect`` is dropped (the relay already answered ``100 Continue`` itself).
    """
    dropped = _REQUEST_DROP | _named_by_connection(raw)
    lines = [method + b" " + target + b" HTTP/1.1", b"Host: " + host]
    request_id = ""
    for name, value in raw:
        low = name.lower()
        if low in dropped:
            continue
        if low == _ID_BYTES:
            if not value or request_id:
                continue
            request_id = value.decode("latin-1")
        lines.append(name + b": " + value)
    if not request_id:
        request_id = new_id()
        lines.append(REQUEST_ID.encode() + b": " + request_id.encode("latin-1"))
    if body_length is not None:
        lines.append(b"Content-Length: %d" % body_length)
    return b"\r\n".join(lines) + b"\r\n\r\n", request_id


def response_head(status: int, reason: bytes, raw: RawHeaders, request_id: str, close: bool) -> bytes:
    """The answer's head for the client: the runtime's end-to-end headers, its framing, the request ID.

    The body is forwarded byte for byte as the runtime framed it, so ``Transfer-Encoding`` and
    ``Content-Length`` are kept as sent (they describe those bytes); ``close`` adds ``Connection: close``
    (a body delimited by the runtime closing, or a client that asked for it).
    """
    dropped = (_HOP_BYTES - _RESPONSE_FRAMING) | (_named_by_connection(raw) - _RESPONSE_FRAMING)
    lines = [b"HTTP/1.1 %d " % status + reason]
    has_id = False
    for name, value in raw:
        low = name.lower()
        if low in dropped:
            continue
        has_id = has_id or low == _ID_BYTES
        lines.append(name + b": " + value)
    if not has_id:
        lines.append(REQUEST_ID.encode() + b": " + request_id.encode("latin-1"))
    if close:
        lines.append(b"Connection: close")
    return b"\r\n".join(lines) + b"\r\n\r\n"
