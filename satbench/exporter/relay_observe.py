"""What the relay learns about one proxied request, from the bytes it forwards (pure; no I/O).

The relay sits between clients and the runtime, so it sees every request's timing without the client's
help. The definitions are DESIGN.md's, measured at the relay instead of the client (the difference is one
loopback hop each way):

- TTFT: first content token forwarded - request received (streaming requests only: a non-streaming answer
  has no first-token instant on the wire);
- ITL: gaps between successive content-token events (tokens that arrive in one read share an instant, a
  gap of 0, exactly as a client would see them);
- e2e: last byte forwarded - request received;
- queue: the server's own ``queue_ms`` when it sends one, else TTFT - ``prompt_ms`` (clamped at 0); for a
  non-streaming answer, e2e - (``prompt_ms`` + ``predicted_ms``) (clamped at 0);
- prompt and output tokens: the server's own counts (final ``timings``/``usage``, or the answer body);
  a stream without them counts its content events as output tokens;
- outcome: loadgen's vocabulary (``ok``, ``http_error``, ``refused``, ``dropped``, ``malformed``,
  ``timeout``) plus ``cancelled`` (the client left first).

Content tokens are recognised by loadgen's SSE parser (:class:`core.sse.StreamParser`), so relay and
load generator count the same events. Only the generation routes below are observed; every other path is
forwarded and counted as ``route="other"`` (a bounded label set, whatever clients send).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from satbench.core.api import ApiFlavour
from satbench.core.sse import StreamParser

__all__ = [
    "GENERATION_ROUTES",
    "OTHER_ROUTE",
    "OUTCOMES",
    "RelayTiming",
    "route_of",
    "status_outcome",
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
OUTCOMES = ("ok", "http_error", "refused", "dropped", "malformed", "timeout", "cancelled")
_REFUSED_STATUS = (429, 503)


@dataclass(frozen=True)
class RelayTiming:
    """One finished exchange; latencies are observed only when ``outcome == "ok"``."""

    e2e_s: float
    ttft_s: float | None = None
    itl_s: tuple[float, ...] = ()
    queue_s: float | None = None
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    outcome: str = "ok"


def route_of(path: str) -> tuple[str, ApiFlavour | None]:
    """The ``route`` label and the API flavour for a request path (``other`` and None when not generation)."""
    clean = "/" + path.split("?", 1)[0].strip("/")
    api = GENERATION_ROUTES.get(clean)
    return (clean, api) if api is not None else (OTHER_ROUTE, None)


def status_outcome(status: int) -> str:
    """Outcome of an answer judged by its status alone (``refused`` for 429/503, as loadgen counts it)."""
    if status < 400:
        return "ok"
    return "refused" if status in _REFUSED_STATUS else "http_error"


def _seconds(start_ns: int, end_ns: int) -> float:
    return max(0.0, (end_ns - start_ns) / 1e9)


def timing_from_stream(parser: StreamParser, start_ns: int, end_ns: int, status: int = 200) -> RelayTiming:
    """A streamed answer whose content events ``parser`` saw (times in ns, any monotonic base)."""
    tokens = parser.token_ns
    e2e = _seconds(start_ns, end_ns)
    summary = parser.summary()
    output = summary.output_tokens if summary.output_tokens is not None else len(tokens)
    outcome = status_outcome(status)
    if outcome == "ok":
        if parser.malformed or summary.problem:
            outcome = "malformed"
        elif summary.error:
            outcome = "http_error"
        elif not parser.done:
            outcome = "dropped"
    if not tokens:
        return RelayTiming(e2e_s=e2e, prompt_tokens=summary.prompt_tokens, output_tokens=output,
                           outcome=outcome)
    ttft = _seconds(start_ns, tokens[0])
    itl = tuple((b - a) / 1e9 for a, b in pairwise(tokens))
    if summary.queue_ms is not None:
        queue: float | None = max(0.0, summary.queue_ms / 1e3)
    elif summary.prompt_ms is not None:
        queue = max(0.0, ttft - summary.prompt_ms / 1e3)
    else:
        queue = None
    return RelayTiming(e2e_s=e2e, ttft_s=ttft, itl_s=itl, queue_s=queue, prompt_tokens=summary.prompt_tokens,
                       output_tokens=output, outcome=outcome)


def _number(data: Mapping[str, Any], key: str) -> float | None:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        return None
    return float(value)


def _count(value: float | None) -> int | None:
    return None if value is None else int(value)


def _body_tokens(data: Mapping[str, Any], timings: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """(prompt, output) tokens of an answer body: OpenAI ``usage``, else llama.cpp ``timings``/top level."""
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    assert isinstance(usage, dict)
    prompt = _number(usage, "prompt_tokens")
    if prompt is None and _number(timings, "prompt_n") is not None:
        prompt = (_number(timings, "prompt_n") or 0.0) + (_number(timings, "cache_n") or 0.0)
    if prompt is None:
        prompt = _number(data, "tokens_evaluated")
    output = _number(usage, "completion_tokens")
    for source, key in ((timings, "predicted_n"), (data, "tokens_predicted")):
        if output is None:
            output = _number(source, key)
    return _count(prompt), _count(output)


def timing_from_body(body: bytes, start_ns: int, end_ns: int, status: int = 200) -> RelayTiming:
    """A non-streamed answer: e2e always, tokens and queue when the body carries llama.cpp ``timings``."""
    e2e = _seconds(start_ns, end_ns)
    outcome = status_outcome(status)
    try:
        data = json.loads(body)
    except ValueError:
        return RelayTiming(e2e_s=e2e, outcome="malformed" if outcome == "ok" else outcome)
    if not isinstance(data, dict):
        return RelayTiming(e2e_s=e2e, outcome="malformed" if outcome == "ok" else outcome)
    if outcome == "ok" and "error" in data and not data.get("choices"):
        outcome = "http_error"
    timings = data.get("timings") if isinstance(data.get("timings"), dict) else {}
    assert isinstance(timings, dict)
    prompt, output = _body_tokens(data, timings)
    queue_ms = _number(timings, "queue_ms")
    prompt_ms, predicted_ms = _number(timings, "prompt_ms"), _number(timings, "predicted_ms")
    queue: float | None = None
    if queue_ms is not None:
        queue = queue_ms / 1e3
    elif prompt_ms is not None and predicted_ms is not None:
        queue = max(0.0, e2e - (prompt_ms + predicted_ms) / 1e3)
    return RelayTiming(e2e_s=e2e, queue_s=queue, prompt_tokens=prompt, output_tokens=output, outcome=outcome)
