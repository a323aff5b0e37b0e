"""A tight server-sent-events parser for streamed completions, on raw bytes.

Why not a general SSE library: at saturation the client reads ~100,000 events a second, so the per-event
cost is the budget. The complete lines of a chunk are cut before the first "special" line (one that
carries ``timings``, ``usage``, ``error``, ``[DONE]`` or an end marker). When that head holds only
well-formed, non-empty token events (every ``data:`` line is ``{...}`` with the token marker) it is
counted with a handful of ``bytes.count`` calls, at C speed, whatever the number of events in it; all its
tokens arrived at the same instant anyway. The rest, and any head that fails the check, goes line by
line: split on ``b"\\n"``, skip comments (``:ping``) and other fields, and decide "is this a content
token" with one or two byte searches per event, per API flavour:

- ``openai-chat``: ``"content":"`` followed by a non-empty string (the role-only first delta has
  ``"content":null``; the usage chunk has no delta);
- ``openai-completions``: ``"text":"`` followed by a non-empty string;
- ``llamacpp`` (``/completion``): ``"stop":false`` and no ``prompt_progress`` (progress events carry
  ``tokens_predicted: 0``), or a final ``"stop":true`` event that still carries content.

Markers are matched compact first (llama-server, OpenAI); a ``": "`` spacing is accepted on a slower
path. JSON is decoded only for the last event that carries ``timings`` or ``usage`` (the server's own
counts, read once at the end) and for an ``error`` event. Every event must look like a JSON object
(``{...}``) or be ``[DONE]``; anything else, an event with none of the flavour's fields (``stop`` for
``llamacpp``, ``choices`` for the OpenAI flavours, or ``error``), negative server counts, or a line longer
than ``max_event_bytes`` without a newline makes the stream ``malformed`` and stops it: the buffer never
grows past that bound.

Tokens per event: a server may put several tokens in one event (vLLM and SGLang ``--stream-interval``, a
speculative verify step sent as one chunk). Where the runtime says how many, the parser keeps it: llama.cpp's
``/completion`` events carry the cumulative ``tokens_predicted`` (and the event's ``tokens`` ids), an OpenAI
stream asked for ``stream_options.continuous_usage_stats`` (vLLM) carries ``usage.completion_tokens`` in every
chunk. An event's tokens are the cumulative count less the tokens already attributed (so a count that lags by
an event corrects itself at the next), else the length of its ``tokens`` ids; read with one byte search and a
digit parse per event, and per head of the fast path from its last event (its events arrived at one instant,
so only their sum matters). ``token_counts()`` gives them per content event, ``None`` where every event carried
one or the runtime said nothing (``core.step_figures`` then estimates from the final count, and says so).

Reasoning models (``openai-chat`` with llama-server's ``--reasoning-format``, or any server that streams
``delta.reasoning_content``): a thinking delta is a token like any other, so TTFT is the first token of any
kind and the gaps between thinking tokens are gaps; the first *visible* token (``content``) is kept beside it
(``first_visible_ns``) and the thinking deltas are counted (``reasoning_events``).

The events' JSON, decoded off the hot path (the final event's counts, an error event, a kept answer's text),
is ``core.sse_events``'s: hostile numbers there are data, never exceptions.

The answer's text is not kept on the hot path. A parser made with ``keep_text`` (a conversation workload,
whose next request repeats the answer) keeps the stream's bytes and decodes the content once, at the end
(``answer_text``), keeping at most ``max_event_bytes`` of it: a longer answer makes the stream ``malformed``
rather than the client's memory grow with it.
"""

from __future__ import annotations

import json

from satbench.core.api import ApiFlavour
from satbench.core.sse_events import MAX_COUNT, StreamSummary, content_of, error_text_of, is_error_event, summarize

__all__ = ["MAX_COUNT", "StreamParser", "StreamSummary", "parse_stream"]


_DATA = b"data:"
_DONE = b"[DONE]"
_COMMON = (b'"timings"', b'"error"', b"[DONE]")
_SPECIAL: dict[str, tuple[bytes, ...]] = {
    "openai-chat": (*_COMMON, b'"usage"'),
    "openai-completions": (*_COMMON, b'"usage"'),
    "llamacpp": (*_COMMON, b'"stop":true', b'"stop": ', b'"prompt_progress"'),
}


class StreamParser:
    """Feeds chunks as they arrive; keeps one arrival time (ns) per content event."""

    __slots__ = ("_extra", "_extra_total", "_kept", "_kept_bytes", "_marker", "_meta", "_mlen", "_rest", "api",
                 "counted", "done", "error_text", "events", "first_visible_ns", "keep_text", "malformed",
                 "max_event_bytes", "reasoning_events", "saw_bytes", "token_ns")

    def __init__(self, api: ApiFlavour, max_event_bytes: int = 1 << 20, keep_text: bool = False) -> None:
        self.api = api
        self.max_event_bytes = max_event_bytes
        self.keep_text = keep_text
        self._kept: list[bytes] = []
        self._kept_bytes = 0
        self.token_ns: list[int] = []
        self._extra: dict[int, int] = {}  # content event index -> tokens it carried beyond one
        self._extra_total = 0
        self.counted = False  # the runtime said how many tokens some event carried
        self.first_visible_ns: int | None = None
        self.reasoning_events = 0
        self.done = False
        self.malformed: str | None = None
        self.error_text: str | None = None
        self.events = 0
        self.saw_bytes = False
        self._rest = b""
        self._meta: bytes | None = None
        self._marker = b'"text":"' if api == "openai-completions" else b'"content":"'
        self._mlen = len(self._marker)

    def reset(self) -> None:
        """Forgets everything (a retried request starts a new stream)."""
        self.__init__(self.api, self.max_event_bytes, self.keep_text)  # type: ignore[misc]

    def feed(self, chunk: bytes, t_ns: int) -> bool:
        """Parses a chunk received at ``t_ns``. Returns False once the stream is finished or malformed."""
        if self.done or self.malformed:
            return False
        data = self._rest + chunk if self._rest else chunk
        self.saw_bytes = True
        if self.keep_text:
            self._kept_bytes += len(chunk)
            if self._kept_bytes > self.max_event_bytes:
                self.malformed = f"answer over {self.max_event_bytes} bytes kept for the conversation"
                return False
            self._kept.append(chunk)
        if data is chunk and chunk.endswith(b"\n\n") and chunk.find(b"\n") == len(chunk) - 2 \
                and chunk.startswith(_DATA) and len(chunk) - 2 <= self.max_event_bytes:
            # One whole event and its blank line, what a paced server writes per token: straight to the
            # line-by-line reading of that one event, without cutting and counting a head of several.
            return self._event(chunk[:-2], t_ns)
        last = data.rfind(b"\n")
        self._rest = b""
        if last >= 0 and not self._body(data[:last + 1] if last + 1 < len(data) else data, t_ns):
            return False
        rest = data[last + 1:]
        if len(rest) > self.max_event_bytes:
            self.malformed = f"line over {self.max_event_bytes} bytes"
            return False
        self._rest = rest
        return True

    def _body(self, body: bytes, t_ns: int) -> bool:
        """Complete lines: the head before the first special line by counting, the rest line by line."""
        end = len(body)
        for special in _SPECIAL[self.api]:
            i = body.find(special, 0, end)
            if i >= 0:
                end = i
        head_end = end if end == len(body) else body.rfind(b"\n", 0, end) + 1
        if head_end > 0:
            head = body if head_end == len(body) else body[:head_end]
            fast = head_end <= self.max_event_bytes and self._plain_tokens(head, t_ns)
            if not fast and not self._lines(head, t_ns):
                return False
        if head_end < len(body):
            return self._lines(body[head_end:], t_ns)
        return True

    def _plain_tokens(self, body: bytes, t_ns: int) -> bool:
        """Counts lines that are all non-empty token events (no special line: ``_body`` cut them off).

        Every ``data:`` line must be ``{...}`` and carry the flavour's non-empty token marker; a role-only
        delta, an empty token or a spaced-JSON server fails the count check and goes line by line.
        """
        count = body.count
        n_data = count(b"data:")
        if not n_data or n_data != count(b"data: {") or n_data != count(b"}\n") + count(b"}\r\n"):
            return False
        if self.api == "llamacpp":
            n = count(b'"stop":false')
        else:
            n = count(self._marker) - count(self._marker + b'"')
        if n != n_data:
            return False
        total = None
        if self.api == "llamacpp":
            at = body.rfind(b'"tokens_predicted":')
            if at >= 0:
                total = _digits(body, at + 19)
            elif b'"tokens":[' in body:
                return False  # ids without a count: line by line, where each event's ids are counted
        if self.first_visible_ns is None:
            self.first_visible_ns = t_ns
        self.token_ns.extend([t_ns] * n)
        self.events += n
        if total is not None:
            self._attribute(total)
        return True

    def _attribute(self, total: int) -> None:
        """The runtime's cumulative count after the last content event: what it holds beyond the tokens
        already attributed is that event's."""
        self.counted = True
        extra = total - len(self.token_ns) - self._extra_total
        if extra > 0 and self.token_ns:
            last = len(self.token_ns) - 1
            self._extra[last] = self._extra.get(last, 0) + extra
            self._extra_total += extra

    def _count_event(self, payload: bytes, marker: bytes) -> None:
        """After a content event: its tokens from the cumulative count under ``marker``, else its ids."""
        at = payload.find(marker)  # a spaced ``"key": 5`` matches too: the digits skip spaces
        if at >= 0:
            total = _digits(payload, at + len(marker))
            if total is not None:
                self._attribute(total)
                return
        at = payload.find(b'"tokens":[')
        if at >= 0:
            close = payload.find(b"]", at)
            inner = payload[at + 10:close].strip() if close > 0 else b""
            if inner:
                self.counted = True
                extra = inner.count(b",")
                if extra:
                    last = len(self.token_ns) - 1
                    self._extra[last] = self._extra.get(last, 0) + extra
                    self._extra_total += extra

    def token_counts(self) -> tuple[int, ...] | None:
        """Tokens per content event as the runtime counted them (module docstring), ``None`` where every
        event carried one or the runtime said nothing."""
        if not self.counted or not self._extra:
            return None
        extra = self._extra
        return tuple(1 + extra.get(i, 0) for i in range(len(self.token_ns)))

    def _lines(self, body: bytes, t_ns: int) -> bool:
        start = 0
        find = body.find
        while True:
            i = find(b"\n", start)
            if i < 0:
                return True
            line = body[start:i]
            start = i + 1
            if not line.startswith(_DATA):
                continue
            if len(line) > self.max_event_bytes:
                self.malformed = f"line over {self.max_event_bytes} bytes"
                return False
            if not self._event(line, t_ns):
                return False

    def _event(self, line: bytes, t_ns: int) -> bool:
        payload = line[5:].strip()
        if not payload.startswith(b"{") or not payload.endswith(b"}"):
            if payload == _DONE:
                self.done = True
                return False
            if not payload:
                return True
            self.malformed = f"non-JSON event: {payload[:60]!r}"
            return False
        self.events += 1
        if self.api == "llamacpp":
            if b'"stop":false' in payload or b'"stop": false' in payload:
                if b'"prompt_progress"' not in payload:
                    self._visible(t_ns)
                    self._count_event(payload, b'"tokens_predicted":')
                if b'"timings"' in payload:
                    self._meta = payload
                return True
            if b'"stop":true' in payload or b'"stop": true' in payload:
                if self._has_content(payload):
                    self._visible(t_ns)
                    self._count_event(payload, b'"tokens_predicted":')
                self._meta = payload
                self.done = True
                return False
            known = False
        else:
            tokens_before = len(self.token_ns)
            m = payload.find(self._marker)
            if m >= 0 and payload[m - 1] != 0x5F:  # not the tail of "reasoning_content"
                if payload[m + self._mlen] != 0x22:
                    self._visible(t_ns)
                elif self._has_reasoning(payload):
                    self._reasoning(t_ns)
            elif self._has_content(payload):
                self._visible(t_ns)
            elif self._has_reasoning(payload):
                self._reasoning(t_ns)
            if b'"timings"' in payload or b'"usage"' in payload:
                self._meta = payload
                if tokens_before < len(self.token_ns):
                    self._count_event(payload, b'"completion_tokens":')
            known = b'"choices"' in payload
        if b'"error"' in payload and is_error_event(payload):
            self.error_text = error_text_of(payload)
            return False
        if not known:
            self.malformed = f"event without a known field: {payload[:60]!r}"
            return False
        return True

    def _visible(self, t_ns: int) -> None:
        self.token_ns.append(t_ns)
        if self.first_visible_ns is None:
            self.first_visible_ns = t_ns

    def _reasoning(self, t_ns: int) -> None:
        self.token_ns.append(t_ns)
        self.reasoning_events += 1

    def _has_content(self, payload: bytes) -> bool:
        """Slow path: the content marker compact or with a space after the colon, non-empty (and not the tail
        of a ``reasoning_content`` key)."""
        for marker in (self._marker, self._marker.replace(b":", b": ", 1)):
            m = payload.find(marker)
            while m > 0 and payload[m - 1] == 0x5F:
                m = payload.find(marker, m + 1)
            if m >= 0:
                return payload[m + len(marker)] != 0x22
        return False

    def _has_reasoning(self, payload: bytes) -> bool:
        """A chat delta carrying a non-empty ``reasoning_content`` (a thinking token)."""
        if self.api != "openai-chat":
            return False
        for marker in (b'"reasoning_content":"', b'"reasoning_content": "'):
            m = payload.find(marker)
            if m >= 0:
                return payload[m + len(marker)] != 0x22
        return False

    def summary(self) -> StreamSummary:
        """The server's own counts from the last ``timings``/``usage`` event (decoded once, here); a final event
        that cannot be read, or hostile numbers in it, give a summary with a ``problem`` (``core.sse_events``)."""
        return summarize(self._meta, self.error_text)

    def answer_text(self) -> str:
        """The content the stream carried, in order (``keep_text`` parsers only; empty otherwise): the chat
        deltas' ``content``, the completions' ``text``, or ``/completion``'s ``content``, of choice 0."""
        out: list[str] = []
        for line in b"".join(self._kept).split(b"\n"):
            payload = line.strip()
            if not payload.startswith(_DATA):
                continue
            payload = payload[5:].strip()
            if not payload.startswith(b"{"):
                continue
            try:
                event = json.loads(payload)
            except ValueError:
                continue
            piece = content_of(self.api, event) if isinstance(event, dict) else None
            if isinstance(piece, str):
                out.append(piece)
        return "".join(out)


def _digits(data: bytes, at: int) -> int | None:
    """The non-negative integer written at ``at`` (spaces skipped), or ``None``."""
    end = len(data)
    while at < end and data[at] == 0x20:
        at += 1
    start = at
    while at < end and 0x30 <= data[at] <= 0x39 and at - start < 10:
        at += 1
    return int(data[start:at]) if at > start else None


def parse_stream(api: ApiFlavour, data: bytes, chunk: int = 4096) -> tuple[StreamParser, StreamSummary]:
    """Parses a whole recorded stream (tests, offline checks): feeds it in ``chunk``-byte pieces."""
    parser = StreamParser(api)
    for i in range(0, len(data), chunk):
        if not parser.feed(data[i:i + chunk], i):
            break
    return parser, parser.summary()
