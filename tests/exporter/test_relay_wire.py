"""Relay mode at the HTTP/1.1 wire level: framing, keep-alive, pipelining and retries, byte for byte.

The relay parses heads itself (``httptools``) and forwards body bytes unchanged, so these cases are
checked against a raw-socket upstream that answers with scripted bytes (no HTTP library between): a
close-delimited body, a kept-alive runtime connection reused for the next request, a runtime that closes
a kept-alive connection without answering (retried once), pipelined client requests answered in order,
a chunked request body forwarded with a Content-Length, ``HEAD``, and ``Expect: 100-continue``.
"""

from __future__ import annotations

import itertools
import socket
import socketserver
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from satbench.exporter.relay_headers import request_head, response_head
from testkit.net import read_http_request
from tests.exporter.relay_support import RelayThread


def test_request_head_drops_hop_by_hop_and_adds_the_request_id() -> None:
    raw = [(b"Host", b"relay:8081"), (b"Connection", b"keep-alive, X-Hop"), (b"X-Hop", b"1"),
           (b"Transfer-Encoding", b"chunked"), (b"Expect", b"100-continue"), (b"X-Custom", b"a"),
           (b"X-Custom", b"b"), (b"X-Request-ID", b"")]
    head, rid = request_head(b"POST", b"/completion?q=1", raw, b"rt:8080", 5, new_id=lambda: "new")
    assert rid == "new"
    assert head == (b"POST /completion?q=1 HTTP/1.1\r\nHost: rt:8080\r\nX-Custom: a\r\nX-Custom: b\r\n"
                    b"X-Request-ID: new\r\nContent-Length: 5\r\n\r\n")
    head, rid = request_head(b"GET", b"/", [(b"x-request-id", b"mine")], b"rt", None)
    assert rid == "mine" and head == b"GET / HTTP/1.1\r\nHost: rt\r\nx-request-id: mine\r\n\r\n"


def test_response_head_keeps_framing_and_end_to_end_headers() -> None:
    raw = [(b"Content-Type", b"text/event-stream"), (b"Transfer-Encoding", b"chunked"),
           (b"Keep-Alive", b"timeout=5"), (b"Connection", b"keep-alive"), (b"Set-Cookie", b"a=1"),
           (b"Set-Cookie", b"b=2"), (b"Access-Control-Allow-Origin", b"")]
    head = response_head(200, b"OK", raw, "rid", close=False)
    assert head == (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
                    b"Set-Cookie: a=1\r\nSet-Cookie: b=2\r\nAccess-Control-Allow-Origin: \r\n"
                    b"X-Request-ID: rid\r\n\r\n")
    head = response_head(404, b"Not Found", [(b"X-Request-ID", b"up")], "rid", close=True)
    assert head == b"HTTP/1.1 404 Not Found\r\nX-Request-ID: up\r\nConnection: close\r\n\r\n"


Script = Callable[[int, bytes], bytes | None]
"""(connection number, request bytes) -> answer bytes (None: close without answering)."""


class RawUpstream:
    """A loopback server answering each request with scripted bytes; it records connections and requests."""

    def __init__(self, script: Script, close_after: bool = False) -> None:
        self.requests: list[bytes] = []
        self.connections = 0
        outer = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                outer.connections += 1
                number = outer.connections
                buffer = b""
                while True:
                    got = read_http_request(self.request, buffer)
                    if got is None:
                        return
                    request, buffer = got
                    outer.requests.append(request)
                    answer = script(number, request)
                    if answer is None:
                        return
                    self.request.sendall(answer)
                    if close_after:
                        return

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> RawUpstream:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def talk(url: str, data: bytes, until: Callable[[bytes], bool], timeout_s: float = 10.0) -> bytes:
    """Sends raw bytes to the relay; reads until ``until(received)`` or the relay closes."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    got = b""
    with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
        sock.sendall(data)
        deadline = time.monotonic() + timeout_s
        while not until(got) and time.monotonic() < deadline:
            chunk = sock.recv(65536)
            if not chunk:
                break
            got += chunk
    return got


OK = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"


@pytest.fixture
def ok_upstream() -> Iterator[RawUpstream]:
    with RawUpstream(lambda n, request: OK) as upstream:
        yield upstream


def test_close_delimited_body_is_forwarded_whole_then_closed() -> None:
    answer = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end"
    with RawUpstream(lambda n, r: answer, close_after=True) as upstream, RelayThread(upstream.url) as relay:
        got = talk(relay.url, b"GET /x HTTP/1.1\r\nHost: r\r\n\r\n", lambda b: False)
    head, _, body = got.partition(b"\r\n\r\n")
    assert body == b"until the end" and b"\r\nConnection: close" in head


def test_runtime_connection_is_kept_alive_across_requests(ok_upstream: RawUpstream) -> None:
    with RelayThread(ok_upstream.url) as relay:
        for _ in range(3):
            got = talk(relay.url, b"GET /health HTTP/1.1\r\nHost: r\r\n\r\n", lambda b: b.endswith(b"{}"))
            assert got.startswith(b"HTTP/1.1 200 OK\r\n") and got.endswith(b"\r\n\r\n{}")
        relay.settle()
    assert ok_upstream.connections == 1 and len(ok_upstream.requests) == 3


def _by_request(closes: Callable[[int], bool]) -> Script:
    """OK to each request of the run, but those whose number (from 1) ``closes``: closed without an answer.
    (Scripted by request, not by connection: whether the relay saw an idle connection close before the next
    request came is a race that a loaded machine decides either way.)"""
    seen = itertools.count(1)
    return lambda number, request: None if closes(next(seen)) else OK


GET = b"GET /health HTTP/1.1\r\nHost: r\r\n\r\n"


def test_kept_alive_connection_closed_without_answer_is_retried_once() -> None:
    # connection 1 is kept alive after the first answer, then closed on the second request without an answer
    # (llama-server after a stream): the relay sends it again on a new connection, which answers
    with RawUpstream(_by_request(lambda n: n == 2)) as upstream, RelayThread(upstream.url) as relay:
        for _ in range(2):
            got = talk(relay.url, GET, lambda b: b.endswith(b"{}"))
            assert got.startswith(b"HTTP/1.1 200 OK\r\n") and got.endswith(b"{}")
        assert relay.value("runtime_relay_requests_total", {"route": "other", "code": "200",
                                                             "outcome": "ok"}) == 2
    assert (upstream.connections, len(upstream.requests)) == (2, 3)


def test_a_request_closed_without_answer_twice_gets_a_502() -> None:
    # once: the retry's connection closes without an answer too, and the client is told, not kept waiting
    with RawUpstream(_by_request(lambda n: n >= 2)) as upstream, RelayThread(upstream.url) as relay:
        assert talk(relay.url, GET, lambda b: b.endswith(b"{}")).endswith(b"{}")
        got = talk(relay.url, GET, lambda b: b"\r\n\r\n" in b)
        assert got.startswith(b"HTTP/1.1 502 "), got
    assert (upstream.connections, len(upstream.requests)) == (2, 3)


def test_pipelined_requests_are_answered_in_order() -> None:
    def script(number: int, request: bytes) -> bytes:
        path = request.split(b" ", 2)[1]
        return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(path), path)

    with RawUpstream(script) as upstream, RelayThread(upstream.url) as relay:
        both = b"GET /one HTTP/1.1\r\nHost: r\r\n\r\nGET /two HTTP/1.1\r\nHost: r\r\n\r\n"
        got = talk(relay.url, both, lambda b: b.endswith(b"/two"))
    assert got.index(b"/one") < got.index(b"/two") and got.count(b"HTTP/1.1 200 OK") == 2


def test_chunked_request_body_goes_upstream_with_a_length(ok_upstream: RawUpstream) -> None:
    with RelayThread(ok_upstream.url) as relay:
        request = (b"POST /completion HTTP/1.1\r\nHost: r\r\nTransfer-Encoding: chunked\r\n"
                   b"Expect: 100-continue\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
        got = talk(relay.url, request, lambda b: b.endswith(b"{}"))
    assert got.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n")
    sent = ok_upstream.requests[-1]
    assert sent.endswith(b"\r\nContent-Length: 5\r\n\r\nabcde")
    assert b"chunked" not in sent.lower() and b"expect" not in sent.lower()


def test_head_request_gets_the_head_only(ok_upstream: RawUpstream) -> None:
    with RelayThread(ok_upstream.url) as relay:
        got = talk(relay.url, b"HEAD /health HTTP/1.1\r\nHost: r\r\n\r\nGET /health HTTP/1.1\r\nHost: r\r\n\r\n",
                   lambda b: b.count(b"HTTP/1.1 200") == 2 and b.endswith(b"{}"))
    first, _, rest = got.partition(b"\r\n\r\n")
    assert b"Content-Length: 2" in first and rest.startswith(b"HTTP/1.1 200 OK")


def test_upgrade_request_is_answered_as_plain_http(ok_upstream: RawUpstream) -> None:
    with RelayThread(ok_upstream.url) as relay:
        h2c = b"GET /a HTTP/1.1\r\nHost: r\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
        h2c += b"HTTP2-Settings: AAA\r\n\r\nGET /b HTTP/1.1\r\nHost: r\r\n\r\n"
        got = talk(relay.url, h2c, lambda b: b.count(b"{}") == 2)
    assert got.count(b"HTTP/1.1 200 OK") == 2
    first = ok_upstream.requests[-2].lower()
    assert b"upgrade" not in first and b"http2-settings" not in first
