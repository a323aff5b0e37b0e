"""Resumable conversation streams, as llama-server's ``X-Conversation-Id`` sessions.

A streamed generation request carrying ``X-Conversation-Id: ID`` is kept as a session: its SSE bytes go to
a buffer that outlives the client, so a client that drops (a page reload) can resume with ``GET
/v1/stream?conv_id=ID&from=N`` (``N`` a byte offset into the stream; it replays what is buffered, then
follows the live bytes until the generation ends). A dead socket never stops a session's generation, only
``DELETE /v1/stream?conv_id=ID`` does (204, idempotent), which also evicts the buffer. ``POST
/v1/streams/lookup {"conversation_ids": [...]}`` describes the sessions of the ids asked about (an id also
matches ``ID::<model>``). A new request with the same id replaces the session. Finished sessions are kept
until evicted, the oldest going first past ``max_sessions``.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from typing import Any

__all__ = ["SessionWriter", "StreamSession", "StreamSessions"]


class StreamSession:
    """One conversation's buffered SSE bytes, the generation that feeds them, and their readers."""

    def __init__(self, conversation_id: str) -> None:
        self.conversation_id = conversation_id
        self.buffer = bytearray()
        self.done = False
        self.cancelled = False
        self.started_at = int(time.time())
        self.completed_at: int | None = None
        self.producer: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()

    def write(self, data: bytes) -> None:
        if data and not self.cancelled:
            self.buffer += data
            self._wake()

    def finish(self) -> None:
        if not self.done:
            self.done = True
            self.completed_at = int(time.time())
            self._wake()

    def cancel(self) -> None:
        self.cancelled = True
        if self.producer is not None and not self.producer.done():
            self.producer.cancel()
        self.finish()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def read_from(self, offset: int) -> bytes | None:
        """The bytes from ``offset`` once there are some; None once the session ends with nothing new."""
        while True:
            if offset < len(self.buffer):
                return bytes(self.buffer[offset:])
            if self.done:
                return None
            await self._changed.wait()

    def to_json(self) -> dict[str, Any]:
        return {"conversation_id": self.conversation_id, "is_done": self.done, "total_bytes": len(self.buffer),
                "started_at": self.started_at, "completed_at": self.completed_at or 0}  # fmt: skip


class StreamSessions:
    def __init__(self, max_sessions: int = 256) -> None:
        self._sessions: OrderedDict[str, StreamSession] = OrderedDict()
        self.max_sessions = max_sessions

    def create_or_replace(self, conversation_id: str) -> StreamSession:
        old = self._sessions.pop(conversation_id, None)
        if old is not None:
            old.cancel()
        session = StreamSession(conversation_id)
        self._sessions[conversation_id] = session
        while len(self._sessions) > self.max_sessions:
            _, evicted = self._sessions.popitem(last=False)
            evicted.cancel()
        return session

    def get(self, conversation_id: str) -> StreamSession | None:
        return self._sessions.get(conversation_id)

    def evict_and_cancel(self, conversation_id: str) -> bool:
        session = self._sessions.pop(conversation_id, None)
        if session is None:
            return False
        session.cancel()
        return True

    def lookup(self, ids: list[str]) -> list[dict[str, Any]]:
        out = []
        for rid in ids:
            for s in self._sessions.values():
                if s.conversation_id == rid or s.conversation_id.startswith(rid + "::"):
                    out.append(s.to_json())
        return out

    def cancel_all(self) -> None:
        for s in self._sessions.values():
            s.cancel()
        self._sessions.clear()


class SessionWriter:
    """Stands in for the HTTP response while a session's generation writes into its buffer."""

    def __init__(self, session: StreamSession) -> None:
        self.session = session

    async def prepare(self, request: object) -> None:
        return None

    async def write(self, data: bytes) -> None:
        self.session.write(data)

    async def write_eof(self) -> None:
        self.session.finish()
