"""What the relay learns about one proxied request, from the bytes it forwards (pure; no I/O).

The relay sits between clients and the runtime, so it sees every request's timing without the client's
help. The definitions are DESIGN.md's, measured at the relay instead of the client (the difference is one
loopback hop):

- TTFT: first content token forwarded - request received (streaming requests only: a non-streaming answer
  has no first-token instant on the wire);
- ITL: gaps between successive content-token events (tokens that arrive in one read share an instant, a
  gap of 0, exactly as a client would see them);
- e2e: last byte forwarded - request received;
- queue: the server's own ``queue_ms`` when it sends one, else TTFT - ``prompt_ms`` (clamped at 0); for a
  non-streaming answer, e2e - (``prompt_ms`` + ``predicted_ms``) (clamped at 0).

Content tokens are recognised by loadgen's SSE parser (:class:`loadgen.sse.StreamParser`), so relay and
load generator count the same events. Only the generation routes below are observed; every other path is
forwarded and counted as ``route="other"`` (a bounded label set, whatever clients send).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from loadgen.config import ApiFlavour
from loadgen.sse import StreamParser

__all__ = [
    "GENERATION_ROUTES",
    "OTHER_ROUTE",
    "RelayTiming",
    "route_of",
    "timing_from_body",
    "timing_from_stream",
]

GENERATION_ROUTES: dict[str, ApiFlavour] = {
    "/completion": "llamacpp",
    "/completions": "llamacpp",
    "/v1/completions": "openai-completions",
    "/v1/chat/completions": "openai-chat",
    "/chat/completions": "openai-chat",
}
OTHER_ROUTE = "other"


@dataclass(frozen=True)
class RelayTiming:
    e2e_s: float
    ttft_s: float | None = None
    itl_s: tuple[float, ...] = ()
    queue_s: float | None = None


def route_of(path: str) -> tuple[str, ApiFlavour | None]:
    """The ``route`` label and the API flavour for a request path (``other`` and None when not generation)."""
    clean = "/" + path.split("?", 1)[0].strip("/")
    api = GENERATION_ROUTES.get(clean)
    return (clean, api) if api is not None else (OTHER_ROUTE, None)


def timing_from_stream(parser: StreamParser, start_ns: int, end_ns: int) -> RelayTiming:
    """Timing of a streamed answer whose content events ``parser`` saw (times in ns, any monotonic base)."""
    tokens = parser.token_ns
    e2e = max(0.0, (end_ns - start_ns) / 1e9)
    if not tokens:
        return RelayTiming(e2e_s=e2e)
    ttft = max(0.0, (tokens[0] - start_ns) / 1e9)
    itl = tuple((b - a) / 1e9 for a, b in pairwise(tokens))
    summary = parser.summary()
    if summary.queue_ms is not None:
        queue: float | None = max(0.0, summary.queue_ms / 1e3)
    elif summary.prompt_ms is not None:
        queue = max(0.0, ttft - summary.prompt_ms / 1e3)
    else:
        queue = None
    return RelayTiming(e2e_s=e2e, ttft_s=ttft, itl_s=itl, queue_s=queue)


def _number(data: Mapping[str, Any], key: str) -> float | None:
    value = data.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def timing_from_body(body: bytes, start_ns: int, end_ns: int) -> RelayTiming:
    """Timing of a non-streamed answer: e2e always, queue when the body carries llama.cpp ``timings``."""
    e2e = max(0.0, (end_ns - start_ns) / 1e9)
    try:
        data = json.loads(body)
    except ValueError:
        return RelayTiming(e2e_s=e2e)
    timings = data.get("timings") if isinstance(data, dict) else None
    if not isinstance(timings, dict):
        return RelayTiming(e2e_s=e2e)
    queue_ms = _number(timings, "queue_ms")
    if queue_ms is not None:
        return RelayTiming(e2e_s=e2e, queue_s=max(0.0, queue_ms / 1e3))
    prompt_ms, predicted_ms = _number(timings, "prompt_ms"), _number(timings, "predicted_ms")
    if prompt_ms is None or predicted_ms is None:
        return RelayTiming(e2e_s=e2e)
    return RelayTiming(e2e_s=e2e, queue_s=max(0.0, e2e - (prompt_ms + predicted_ms) / 1e3))
