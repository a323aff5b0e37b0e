"""Which headers the relay passes on, in each direction (pure; over ``multidict`` only).

A transparent proxy passes every end-to-end header unchanged, repeated ones included (``Set-Cookie``),
with the order and the exact spelling of the name kept. It drops the hop-by-hop ones of RFC 9110 section 7.6.1
(``Connection``, ``Keep-Alive``, ``Transfer-Encoding``, ``Upgrade``, ``TE``, ``Trailer``,
``Proxy-Authenticate``, ``Proxy-Authorization`` and any header the ``Connection`` header names), because
they describe one connection, not the message. ``Host`` and ``Content-Length`` are set again by the HTTP
stack from the target and the body, which the relay forwards unchanged, so their values stay right.

The HTTP client would add ``Accept``, ``Accept-Encoding``, ``User-Agent`` and ``Content-Type`` of its own
when the client sent none; :func:`upstream_request_headers` names those to skip, so the runtime sees the
client's headers and nothing else, except ``X-Request-ID``, added when absent so that a request can be
joined across client records, relay and runtime. The answer gets that same ``X-Request-ID`` when the
runtime did not echo one (llama-server does not), so a client that sent none learns the relay's.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from multidict import CIMultiDict, CIMultiDictProxy

__all__ = [
    "HOP_BY_HOP", "REQUEST_ID", "RawHeaders", "downstream_response_headers", "request_head", "response_head",
    "upstream_request_headers",
]

HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer", "trailers",
    "transfer-encoding", "upgrade",
})
REQUEST_ID = "X-Request-ID"
_RESET_BY_STACK = frozenset({"host", "content-length"})
_CLIENT_AUTO = ("Accept", "Accept-Encoding", "User-Agent", "Content-Type")

Headers = CIMultiDict[str] | CIMultiDictProxy[str]


def _dropped(headers: Headers) -> frozenset[str]:
    named = {t.strip().lower() for v in headers.getall("Connection", []) for t in v.split(",") if t.strip()}
    return HOP_BY_HOP | _RESET_BY_STACK | named


def upstream_request_headers(
    incoming: Headers, new_id: Callable[[], str] = lambda: uuid.uuid4().hex
) -> tuple[CIMultiDict[str], frozenset[str], str]:
    """(headers to send the runtime, client auto-headers to skip, the request's X-Request-ID)."""
    dropped = _dropped(incoming)
    out: CIMultiDict[str] = CIMultiDict()
    for name, value in incoming.items():
        if name.lower() not in dropped:
            out.add(name, value)
    request_id = out.get(REQUEST_ID, "")
    if not request_id:
        request_id = new_id()
        out.popall(REQUEST_ID, None)
        out[REQUEST_ID] = request_id
    skip = frozenset(h for h in _CLIENT_AUTO if h not in incoming)
    return out, skip, request_id


def downstream_response_headers(upstream: Headers, request_id: str) -> tuple[CIMultiDict[str], int | None]:
    """(headers to answer the client with, the runtime's Content-Length when it sent one, unchunked)."""
    dropped = _dropped(upstream)
    out: CIMultiDict[str] = CIMultiDict()
    for name, value in upstream.items():
        if name.lower() not in dropped:
            out.add(name, value)
    if REQUEST_ID not in out:
        out[REQUEST_ID] = request_id
    length: int | None = None
    declared = upstream.get("Content-Length")
    if declared is not None and declared.strip().isdigit() and "chunked" not in upstream.get(
        "Transfer-Encoding", ""
    ).lower():
        length = int(declared.strip())
    return out, length


# The relay's wire path works on the raw header lists of the HTTP parser (bytes, in order, repeats kept);
# the two functions below apply the same policy as the two above, without building a multidict.

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
