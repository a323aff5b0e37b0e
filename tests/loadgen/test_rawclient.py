"""The kernel-timed socket client against a hand-written HTTP server in another thread.

The server runs outside the client's event loop on purpose: a test can then block that loop (as a busy
client does at high concurrency) while the server goes on sending, and check that token times are the
kernel's arrival times, not the moment the client got round to reading. It also writes HTTP by hand, so
framings aiohttp's server never produces (close-delimited bodies, heads split over segments, garbage) are
covered.
"""

from __future__ import annotations

import asyncio
import gc
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from satbench.loadgen.client import LaneClient, RawResult
from satbench.loadgen.config import LaneConfig, LoadgenConfig
from satbench.loadgen.rawclient import kernel_timestamps
from testkit.net import read_http_request

TOKEN = b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n'
DONE = b'data: {"choices":[],"usage":{"completion_tokens":2,"prompt_tokens":5}}\n\ndata: [DONE]\n\n'
SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"

Script = Callable[[socket.socket, bytes, int], bool]  # (conn, request, n) -> keep the connection open


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class ThreadServer:
    """Accepts connections on loopback; each request is answered by ``script``. Counts connections."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.requests: list[bytes] = []
        self.eof_seen = threading.Event()
        self._stop = False
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        self.sock.settimeout(0.2)
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            self.connections += 1
            threading.Thread(target=self._conn, args=(conn,), daemon=True).start()

    def _conn(self, conn: socket.socket) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with conn:
            while True:
                try:
                    got = read_http_request(conn)  # the client sends one request at a time
                except OSError:
                    return
                if got is None:
                    self.eof_seen.set()
                    return
                req = got[0]
                self.requests.append(req)
                try:
                    if not self.script(conn, req, len(self.requests)):
                        return
                except OSError:
                    self.eof_seen.set()
                    return

    @contextmanager
    def running(self) -> Iterator[str]:
        self._thread.start()
        try:
            yield f"http://127.0.0.1:{self.port}"
        finally:
            self._stop = True
            self._thread.join(timeout=5)
            self.sock.close()


def send_all(url: str, n: int = 1, *, during: Callable[[], Any] | None = None,
             server: ThreadServer | None = None, pause_s: float = 0.0, **cfg: Any) -> list[RawResult]:
    """Sends n requests one after the other (``pause_s`` apart); ``during`` runs, blocking the loop, once
    each request has reached ``server``."""
    lane = LaneConfig(name="x", url=url, api="openai-chat")
    config = LoadgenConfig.model_validate({"lanes": [lane.model_dump()], **cfg})

    async def go() -> list[RawResult]:
        client = LaneClient(lane, config)
        await client.open(1)
        await client.preopen(1)
        try:
            out = []
            for i in range(n):
                task = asyncio.create_task(client.send(b'{"x":1}', f"rid-{i}"))
                if during is not None:
                    assert server is not None, "during needs the server, to know the request is there"
                    rid = f"X-Request-ID: rid-{i}".encode()
                    for _ in range(1000):  # let the request reach the server first (bounded: 2 s)
                        if any(rid in r for r in server.requests):
                            break
                        await asyncio.sleep(0.002)
                    during()
                out.append(await task)
                await asyncio.sleep(pause_s)
            return out
        finally:
            await client.close()

    return asyncio.run(go())


def sse_chunked(conn: socket.socket, req: bytes, n: int, gap_s: float = 0.0) -> bool:
    conn.sendall(SSE_HEAD + b"Transfer-Encoding: chunked\r\n\r\n")
    for part in (TOKEN, TOKEN, DONE):
        if gap_s:
            time.sleep(gap_s)
        conn.sendall(chunk(part))
    conn.sendall(b"0\r\n\r\n")
    return True


def test_kernel_is_asked_for_receive_stamps() -> None:
    with socket.socket() as s:
        assert kernel_timestamps(s) is True  # Linux: the default tests run there


def test_token_times_are_kernel_arrivals_while_the_client_loop_is_blocked() -> None:
    server = ThreadServer(lambda c, r, n: sse_chunked(c, r, n, gap_s=0.05))
    with server.running() as url:
        # The loop is blocked for 0.4 s right after the request went out: the whole answer lands meanwhile
        # (tokens at ~0.05 and ~0.10 s, the end at ~0.15 s) and is read in one go at ~0.4 s.
        (res,) = send_all(url, during=lambda: time.sleep(0.4), server=server)
    assert res.outcome == "ok" and len(res.token_ns) == 2
    ttft = (res.token_ns[0] - res.send_ns) / 1e9
    e2e = (res.end_ns - res.send_ns) / 1e9
    # One read returns every segment that arrived meanwhile, stamped with the newest one's arrival: the
    # answer's end, not the read.
    assert 0.14 < e2e < 0.3, e2e
    assert 0.045 < ttft <= e2e, ttft


def test_aiohttp_transport_sees_the_blocked_loop_instead() -> None:
    server = ThreadServer(lambda c, r, n: sse_chunked(c, r, n, gap_s=0.05))
    with server.running() as url:
        (res,) = send_all(url, during=lambda: time.sleep(0.4), server=server, http_client="aiohttp")
    assert res.outcome == "ok"
    assert (res.token_ns[0] - res.send_ns) / 1e9 > 0.35  # the contrast that motivates kernel stamps


def test_kept_alive_connection_is_reused_and_the_head_is_exact() -> None:
    server = ThreadServer(sse_chunked)
    with server.running() as url:
        results = send_all(url, n=3)
    assert [r.outcome for r in results] == ["ok"] * 3 and not any(r.retried for r in results)
    assert server.connections == 1
    head = server.requests[0].split(b"\r\n\r\n")[0].split(b"\r\n")
    assert head[0] == b"POST /v1/chat/completions HTTP/1.1"
    assert f"Host: 127.0.0.1:{server.port}".encode() in head and b"X-Request-ID: rid-0" in head
    assert b"Content-Length: 7" in head and server.requests[0].endswith(b'{"x":1}')


def test_a_close_delimited_stream_ends_with_the_connection() -> None:
    def script(conn: socket.socket, req: bytes, n: int) -> bool:
        conn.sendall(SSE_HEAD + b"Connection: close\r\n\r\n" + TOKEN)
        conn.sendall(TOKEN + DONE)
        return False

    server = ThreadServer(script)
    with server.running() as url:
        results = send_all(url, n=2)
    assert [r.outcome for r in results] == ["ok", "ok"] and not any(r.retried for r in results)
    assert server.connections == 2


def test_an_idle_connection_the_server_closed_is_not_used_again() -> None:
    def script(conn: socket.socket, req: bytes, n: int) -> bool:
        body = TOKEN + TOKEN + DONE
        conn.sendall(SSE_HEAD + b"Content-Length: %d\r\n\r\n" % len(body) + body)
        return False  # closes after answering, without saying so

    server = ThreadServer(script)
    with server.running() as url:
        results = send_all(url, n=3, pause_s=0.1)
    assert [r.outcome for r in results] == ["ok"] * 3
    assert not any(r.retried for r in results)  # the close was seen before sending, not by failing
    assert server.connections == 3


def test_head_split_over_segments() -> None:
    def script(conn: socket.socket, req: bytes, n: int) -> bool:
        whole = SSE_HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + chunk(TOKEN) + chunk(TOKEN + DONE) + b"0\r\n\r\n"
        for i in range(0, len(whole), 7):
            conn.sendall(whole[i:i + 7])
            time.sleep(0.0005)
        return True

    server = ThreadServer(script)
    with server.running() as url:
        (res,) = send_all(url)
    assert res.outcome == "ok" and len(res.token_ns) == 2 and res.summary is not None
    assert res.summary.output_tokens == 2


@pytest.mark.parametrize(("answer", "error"), [
    (b"SPDY/9 garbage\r\n\r\n", "bad HTTP answer"),
    (b"HTTP/1.1 200 OK\r\nX-Big: " + b"y" * (80 << 10) + b"\r\n\r\n", "head over"),
])
def test_what_is_not_http_is_malformed(answer: bytes, error: str) -> None:
    def script(conn: socket.socket, req: bytes, n: int) -> bool:
        conn.sendall(answer)
        time.sleep(0.2)
        return False

    server = ThreadServer(script)
    with server.running() as url:
        (res,) = send_all(url)
    assert res.outcome == "malformed" and error in (res.error or ""), res


def test_a_head_over_the_bound_is_malformed_when_its_last_piece_completes_it() -> None:
    head = b"HTTP/1.1 200 OK\r\nX-Big: " + b"y" * (80 << 10) + b"\r\n\r\n"

    def script(conn: socket.socket, req: bytes, n: int) -> bool:
        conn.sendall(head[: 40 << 10])  # under the bound: the head is not complete yet
        time.sleep(0.1)
        conn.sendall(head[40 << 10:])  # this read completes a head of 80 KiB
        time.sleep(0.2)
        return False

    server = ThreadServer(script)
    with server.running() as url:
        (res,) = send_all(url)
    assert res.outcome == "malformed" and "head over" in (res.error or ""), res


def test_error_status_keeps_a_bounded_piece_of_the_body() -> None:
    def script(conn: socket.socket, req: bytes, n: int) -> bool:
        body = b'{"error":"overloaded"}' + b" " * 100_000
        conn.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        return True

    server = ThreadServer(script)
    with server.running() as url:
        (res,) = send_all(url)
    assert res.outcome == "refused" and res.status == 503 and "overloaded" in (res.error or "")
    assert len(res.error or "") < 200


def test_timeout_closes_the_connection_so_the_server_sees_the_client_go() -> None:
    def script(conn: socket.socket, req: bytes, n: int) -> bool:
        conn.sendall(SSE_HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + chunk(TOKEN))
        conn.settimeout(5.0)
        if conn.recv(1) == b"":  # waits for the client to close
            server.eof_seen.set()
        return False

    server = ThreadServer(script)
    with server.running() as url:
        (res,) = send_all(url, request_timeout_s=0.3)
        assert server.eof_seen.wait(3.0)
    assert res.outcome == "timeout" and len(res.token_ns) == 1


def test_unreachable_port_is_refused_with_the_reason() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connect is refused
        (res,) = send_all(f"http://127.0.0.1:{port}")
    assert res.outcome == "refused" and res.status is None and "connect failed" in (res.error or "")


def test_a_request_larger_than_the_socket_buffer_is_sent_whole() -> None:
    """A long prompt (a prefill probe of many thousand tokens) does not fit one ``send``."""
    body = b'{"prompt":"' + b"word " * 400_000 + b'"}'
    server = ThreadServer(sse_chunked)
    lane = LaneConfig(name="x", url="http://127.0.0.1:0", api="openai-chat")

    async def go(url: str) -> RawResult:
        client = LaneClient(lane.model_copy(update={"url": url}), LoadgenConfig(lanes=[lane]))
        await client.open(1)
        try:
            return await client.send(body, "rid-big")
        finally:
            await client.close()

    with server.running() as url:
        res = asyncio.run(go(url))
    assert res.outcome == "ok" and len(res.token_ns) == 2
    assert server.requests[0].endswith(body) and b"Content-Length: %d" % len(body) in server.requests[0]


@pytest.mark.slow
def test_an_exchange_leaves_no_reference_cycle() -> None:
    """Steps run with the cyclic collector off, so each request must be freed by reference counting alone."""
    server = ThreadServer(sse_chunked)
    with server.running() as url:
        send_all(url, n=3)  # warm: imports, pools, first-use caches
        gc.collect()
        gc.disable()
        try:
            results = send_all(url, n=40)
            found = gc.collect()
        finally:
            gc.enable()
    assert all(r.outcome == "ok" for r in results)
    assert found < 40, f"{found} objects in reference cycles after 40 requests"
