"""The recommender's door for writes: a bearer token, and a body read only up to a bound, before anything else.

What the service serves is what capability reporting sets routers from, so a write (``POST /runs``, any
request that is not a read) that anyone on the network could send is a forged answer: the audit posted a
manifest whose ``created_at`` of 4e9 won every later run forever. Reads stay open; every other method needs
``Authorization: Bearer <write token>`` (compared in constant time), or it is answered 401 before a byte of
its body is read. An authorised body is still read only up to ``max_body_bytes``: a ``Content-Length``
above it is refused at once (413), and a body streamed without one is cut there, so a 100 MB upload costs
the service a bounded read, never 100 MB of memory. This is ASGI middleware, because FastAPI reads a body
whole before any dependency or route runs; the route declares the bearer scheme for OpenAPI and checks the
bounds a body's content sets (steps, lanes, windows).
"""

from __future__ import annotations

import hmac
import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["READ_METHODS", "WriteGuardASGI"]

READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


async def _answer(send: Send, status: int, detail: str, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *(headers or [])]})
    await send({"type": "http.response.body", "body": body})


class WriteGuardASGI:
    """Lets reads through; a write needs the bearer ``token`` and a body of at most ``max_body_bytes``."""

    def __init__(self, app: ASGIApp, token: str, max_body_bytes: int) -> None:
        self.app = app
        self._token = token.encode()
        self.max_body_bytes = max_body_bytes

    def _authorised(self, scope: Scope) -> bool:
        for name, value in scope.get("headers") or ():
            if name == b"authorization":
                scheme, _, given = value.partition(b" ")
                return scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), self._token)
        return False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in READ_METHODS:
            await self.app(scope, receive, send)
            return
        if not self._authorised(scope):
            await _answer(send, 401, "writes need the service's write token: Authorization: Bearer <token> "
                                     "(SATBENCH_RECOMMENDER_WRITE_TOKEN)", [(b"www-authenticate", b"Bearer")])
            return
        length = dict(scope.get("headers") or ()).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_body_bytes):
            await _answer(send, 413, f"a body of {length.decode(errors='replace')} bytes: at most "
                                     f"{self.max_body_bytes} are read (max_body_bytes)")
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                await _answer(send, 413, f"a body over {self.max_body_bytes} bytes: cut (max_body_bytes)")
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)
