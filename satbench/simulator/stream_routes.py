"""The conversation-stream routes of the simulator's HTTP edge: ``/v1/stream`` and ``/v1/streams/lookup``.

``simulator.streams`` keeps the sessions (their buffers, producers and readers); this module is their
HTTP side: ``ConversationStreams`` starts a session's generation for a streamed request carrying
``X-Conversation-Id``, follows a session's bytes to a client, and answers the resume (``GET``), cancel
(``DELETE``) and lookup routes. ``SimulatorApp`` owns one and delegates to it, so ``simulator.server`` keeps
the generation itself and this module never needs it: what to generate comes in as a callable.

The llama-server wire vocabulary every route module shares (the SSE and JSON headers, the JSON body reader,
the JSON and error responses) lives here too, so that no route module imports ``simulator.server``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from satbench.simulator.payloads import error_body
from satbench.simulator.runtime import Stream
from satbench.simulator.streams import SessionWriter, StreamSession, StreamSessions

__all__ = [
    "JSON_HEADERS",
    "SSE_HEADERS",
    "ConversationStreams",
    "error_response",
    "json_body",
    "json_response",
    "wait_finished",
]

SSE_HEADERS = {
    "Server": "llama.cpp",
    "Access-Control-Allow-Origin": "",
    "X-Accel-Buffering": "no",
    "Content-Type": "text/event-stream",
}
JSON_HEADERS = {"Server": "llama.cpp", "Access-Control-Allow-Origin": ""}


def json_response(obj: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    body = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    return web.Response(
        text=body, status=status, content_type="application/json", headers={**JSON_HEADERS, **(headers or {})}
    )


def error_response(code: int, message: str, kind: str, **extra: Any) -> web.Response:
    return json_response(error_body(code, message, kind, **extra), status=code)


async def json_body(request: web.Request) -> dict[str, Any]:
    """The request's JSON object body; a llama-server-shaped 400 when it is not JSON or not an object."""
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise web.HTTPBadRequest(
            text=json.dumps(error_body(400, f"invalid JSON body: {exc}", "invalid_request_error")),
            content_type="application/json",
        ) from exc
    if not isinstance(body, dict):
        raise web.HTTPBadRequest(
            text=json.dumps(error_body(400, "body must be a JSON object", "invalid_request_error")),
            content_type="application/json",
        )
    return body


async def wait_finished(request: web.Request, stream: Stream, poll_s: float = 0.2) -> bool:
    """Waits for a non-streamed task to finish; False once the client has gone (as llama-server, which
    then cancels the task and frees its slot)."""
    while not stream.finished:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stream.next(), poll_s)
        transport = request.transport
        if not stream.finished and (transport is None or transport.is_closing()):
            return False
    return True


class ConversationStreams:
    """The resumable conversation streams of one ``SimulatorApp``: its sessions and their routes."""

    def __init__(self) -> None:
        self.sessions = StreamSessions()

    async def start(self, request: web.Request, conv_id: str, write: Callable[[SessionWriter], Awaitable[None]],
                    cancel: Callable[[], None], headers: dict[str, str]) -> web.StreamResponse:
        """Generates into session ``conv_id`` (replacing any), whatever becomes of this client, and follows it.

        ``write`` streams the generation to the writer it is given; ``cancel`` frees its tasks once it ends."""
        session = self.sessions.create_or_replace(conv_id)
        session.producer = asyncio.get_running_loop().create_task(self._produce(session, write, cancel))
        return await self._follow(request, session, 0, headers)

    @staticmethod
    async def _produce(session: StreamSession, write: Callable[[SessionWriter], Awaitable[None]],
                       cancel: Callable[[], None]) -> None:
        try:
            await write(SessionWriter(session))
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            cancel()
            session.finish()

    @staticmethod
    async def _follow(request: web.Request, session: StreamSession, offset: int,
                      headers: dict[str, str] | None = None) -> web.StreamResponse:
        """Streams a session's bytes from ``offset`` to this client until the session ends or it leaves."""
        resp = web.StreamResponse(status=200, headers={**SSE_HEADERS, **(headers or {})})
        with contextlib.suppress(ConnectionResetError):
            await resp.prepare(request)
            while True:
                data = await session.read_from(offset)
                if data is None:
                    break
                offset += len(data)
                await resp.write(data)
            await resp.write_eof()
        return resp

    async def stream_get(self, request: web.Request) -> web.StreamResponse:
        conv_id = request.query.get("conv_id", "")
        if not conv_id:
            return error_response(400, "Missing conversation id in path", "invalid_request_error")
        session = self.sessions.get(conv_id)
        if session is None:
            return error_response(404, "Stream not found or expired", "not_found_error")
        try:
            offset = int(request.query.get("from", "0") or "0")
            if offset < 0:
                raise ValueError(offset)
        except ValueError:
            return error_response(400, "Invalid 'from' offset", "invalid_request_error")
        return await self._follow(request, session, offset)

    async def stream_delete(self, request: web.Request) -> web.Response:
        conv_id = request.query.get("conv_id", "")
        if not conv_id:
            return error_response(400, "Missing conversation id in path", "invalid_request_error")
        self.sessions.evict_and_cancel(conv_id)
        return web.Response(status=204, content_type="application/json", headers=JSON_HEADERS)

    async def streams_lookup(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            return json_response({"error": {"message": f"invalid body: {exc}", "type": "invalid_request_error"}},
                                 400)
        raw = body.get("conversation_ids") if isinstance(body, dict) else None
        ids = [v for v in raw if isinstance(v, str) and v] if isinstance(raw, list) else []
        return json_response(self.sessions.lookup(ids))
