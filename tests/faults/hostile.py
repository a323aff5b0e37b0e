"""A hostile llama.cpp look-alike on loopback: each path prefix answers ``/completion`` in one bad way.

``/c/<case>/completion`` serves the case (see ``CASES``); ``/health`` and ``/props`` answer normally so a
whole ladder can run against it. ``HostileServer.bytes_sent`` counts what each case managed to write, so a
test can tell that a client stopped reading a never-ending line instead of buffering it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import web

__all__ = ["CASES", "HostileServer", "hostile_server"]

TOKEN = b'data: {"content":"a","stop":false}\n\n'
FINAL_OK = (b'data: {"content":"","stop":true,"tokens_predicted":3,"timings":{"prompt_n":5,"prompt_ms":1.5,'
            b'"predicted_n":3,"predicted_ms":3.0}}\n\n')
HUGE_BYTES = 64 << 20
_CHUNK = b"a" * (64 << 10)

Handler = Callable[[web.Request, "HostileServer"], Awaitable[web.StreamResponse]]


async def _sse(request: web.Request, parts: list[bytes], content_type: str = "text/event-stream"
               ) -> web.StreamResponse:
    resp = web.StreamResponse(status=200, headers={"Content-Type": content_type})
    await resp.prepare(request)
    for part in parts:
        await resp.write(part)
    await resp.write_eof()
    return resp


async def _huge(request: web.Request, server: HostileServer, newline_every: int | None) -> web.StreamResponse:
    resp = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    await resp.write(TOKEN + b'data: {"content":"')
    sent = 0
    with contextlib.suppress(ConnectionError, asyncio.CancelledError):
        while sent < HUGE_BYTES:
            await resp.write(_CHUNK)
            sent += len(_CHUNK)
            server.bytes_sent[request.match_info["case"]] = sent
    return resp


CASES: dict[str, Handler] = {
    "ok": lambda r, s: _sse(r, [TOKEN, TOKEN, TOKEN, FINAL_OK]),
    "non_json": lambda r, s: _sse(r, [TOKEN, b"data: hello, I am not JSON\n\n", FINAL_OK]),
    "html": lambda r, s: _sse(r, [b"<html><body>502 Bad Gateway</body></html>\n"], "text/html"),
    "json_body": lambda r, s: _sse(r, [b'{"content":"abc","stop":true}'], "application/json"),
    "huge_line": lambda r, s: _huge(r, s, None),
    "binary": lambda r, s: _sse(r, [TOKEN, b"data: " + bytes(range(11, 256)) * 4 + b"\n\n"]),
    "missing_fields": lambda r, s: _sse(r, [b'data: {"foo":1}\n\n', b'data: {"bar":[]}\n\n',
                                            b"data: {}\n\n"]),
    "negative_timings": lambda r, s: _sse(r, [TOKEN, TOKEN, TOKEN, (
        b'data: {"content":"","stop":true,"tokens_predicted":3,"timings":{"prompt_n":5,"prompt_ms":-40.0,'
        b'"predicted_n":3,"predicted_ms":-3.0}}\n\n')]),
    "wrong_types": lambda r, s: _sse(r, [TOKEN, (
        b'data: {"content":"","stop":true,"tokens_predicted":"three","timings":"soon"}\n\n')]),
}


class HostileServer:
    def __init__(self) -> None:
        self.url = ""
        self.bytes_sent: dict[str, int] = {}
        self.authorization: set[str] = set()

    async def completion(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        self.authorization.add(request.headers.get("Authorization", ""))
        case = CASES.get(request.match_info["case"])
        if case is None:
            raise web.HTTPNotFound()
        return await case(request, self)


async def _ok(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


@contextlib.asynccontextmanager
async def hostile_server() -> AsyncIterator[HostileServer]:
    server = HostileServer()
    app = web.Application()
    app.router.add_post("/c/{case}/completion", server.completion)
    app.router.add_get("/c/{case}/health", _ok)
    app.router.add_get("/c/{case}/props", _ok)
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield server
    finally:
        await runner.cleanup()
