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

__all__ = ["HOP_BY_HOP", "REQUEST_ID", "downstream_response_headers", "upstream_request_headers"]

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
