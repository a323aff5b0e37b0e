"""What a stream's events say beyond its tokens, decoded off the hot path: the server's own counts in its final
``timings``/``usage`` event (``summarize``, once a request), whether an event is an error and its message, and
an event's content (a kept answer's text). ``core.sse`` finds the events and counts the tokens; this module reads
their JSON.

The server's counts of the last ``timings``/``usage`` event also say what it reused: the prompt tokens its
prompt cache served (``usage.prompt_tokens_details.cached_tokens``, else ``timings.cache_n``; never
``/completion``'s ``tokens_cached``, which is what the slot holds after the request, prompt and answer) and,
with a draft model, the tokens drafted and accepted (``timings.draft_n``, ``draft_n_accepted``). ``None``
where the server said nothing.

Hostile numbers are data, not exceptions: a final event that is not UTF-8 or not JSON, or whose counts are not
finite (``NaN``, ``Infinity``, ``1e400``), negative, absurd (more than ``MAX_COUNT`` tokens, a cache hit larger
than its prompt) or whose times are not finite, gives a summary with a ``problem``, which makes the request
``malformed`` with that reason; it never raises.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from satbench.core.api import ApiFlavour

__all__ = ["MAX_COUNT", "StreamSummary", "content_of", "error_text_of", "is_error_event", "summarize"]

MAX_COUNT = 1 << 30  # tokens: no context, prompt or answer of a real runtime comes near a billion tokens


@dataclass(frozen=True, slots=True)
class StreamSummary:
    """What the server said about a finished stream (its own counts, when it sent them)."""

    prompt_tokens: int | None
    output_tokens: int | None
    prompt_ms: float | None
    queue_ms: float | None
    error: str | None
    problem: str | None = None
    cached_prompt_tokens: int | None = None
    draft_tokens: int | None = None
    draft_accepted_tokens: int | None = None


def summarize(raw: bytes | None, error: str | None) -> StreamSummary:
    """The server's own counts from the stream's last ``timings``/``usage`` event ``raw`` (``None``: it sent
    none), with the stream's ``error`` text; a final event that cannot be read, or hostile numbers in it, give a
    summary with a ``problem`` (module docstring)."""
    meta, problem = _decode_meta(raw)
    timings = meta.get("timings") if isinstance(meta.get("timings"), dict) else {}
    usage = meta.get("usage") if isinstance(meta.get("usage"), dict) else {}
    assert isinstance(timings, dict) and isinstance(usage, dict)
    numbers = {k: v for k, v in {**timings, **usage}.items()
               if isinstance(v, int | float) and not isinstance(v, bool)}
    if "tokens_predicted" in meta and isinstance(meta["tokens_predicted"], int | float):
        numbers["tokens_predicted"] = meta["tokens_predicted"]
    details = usage.get("prompt_tokens_details")
    if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int | float):
        numbers["cached_tokens"] = details["cached_tokens"]
    problem = problem or _number_problem(numbers)
    if problem:
        return StreamSummary(None, None, None, None, error, problem)
    prompt = _int(usage.get("prompt_tokens"))
    if prompt is None and timings.get("prompt_n") is not None:
        prompt = (_int(timings.get("prompt_n")) or 0) + (_int(timings.get("cache_n")) or 0)
    output = _int(usage.get("completion_tokens"))
    if output is None:
        output = _int(timings.get("predicted_n"))
    if output is None:
        output = _int(meta.get("tokens_predicted"))
    cached = _int(numbers.get("cached_tokens"))
    if cached is None:
        cached = _int(timings.get("cache_n"))
    if cached is not None and prompt is not None and cached > prompt:
        return StreamSummary(None, None, None, None, error,
                             f"server counts {cached} cached prompt tokens of a {prompt}-token prompt")
    return StreamSummary(
        prompt_tokens=prompt,
        output_tokens=output,
        prompt_ms=_float(timings.get("prompt_ms")),
        queue_ms=_float(timings.get("queue_ms")),
        error=error,
        cached_prompt_tokens=cached,
        draft_tokens=_int(timings.get("draft_n")),
        draft_accepted_tokens=_int(timings.get("draft_n_accepted")),
    )


def content_of(api: ApiFlavour, event: dict[str, Any]) -> object:
    if api == "llamacpp":
        return event.get("content")
    choices = event.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    if choices[0].get("index", 0) != 0:
        return None
    if api == "openai-completions":
        return choices[0].get("text")
    delta = choices[0].get("delta")
    return delta.get("content") if isinstance(delta, dict) else None


def is_error_event(payload: bytes) -> bool:
    try:
        data = json.loads(payload)
    except ValueError:
        return False
    return isinstance(data, dict) and "error" in data and not data.get("choices")


def error_text_of(payload: bytes) -> str:
    try:
        err = json.loads(payload).get("error")
    except ValueError:
        return "error event"
    if isinstance(err, dict):
        return str(err.get("message") or err)[:200]
    return str(err)[:200]


def _reject_constant(name: str) -> float:
    raise ValueError(f"non-finite number {name}")


def _decode_meta(raw: bytes | None) -> tuple[dict[str, Any], str | None]:
    """The final event as a dict, or why it cannot be read (not UTF-8, not JSON, NaN/Infinity in it)."""
    if raw is None:
        return {}, None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return {}, "the server's final event is not UTF-8"
    try:
        loaded = json.loads(text, parse_constant=_reject_constant)
    except ValueError as exc:
        return {}, f"the server's final event cannot be read: {str(exc)[:80]}"
    return (loaded, None) if isinstance(loaded, dict) else ({}, None)


_TIMES = ("prompt_ms", "queue_ms", "predicted_ms", "prompt_per_token_ms", "predicted_per_token_ms",
          "prompt_per_second", "predicted_per_second")


def _number_problem(numbers: dict[str, int | float]) -> str | None:
    """Why the server's counts cannot be believed: not finite, negative, or absurdly large."""
    bad = sorted(k for k, v in numbers.items() if not math.isfinite(v))
    if bad:
        return f"non-finite server counts: {', '.join(bad)}"
    negative = sorted(k for k, v in numbers.items() if v < 0)
    if negative:
        return f"negative server counts: {', '.join(negative)}"
    huge = sorted(k for k, v in numbers.items() if k not in _TIMES and v > MAX_COUNT)
    if huge:
        return f"absurd server counts (over {MAX_COUNT} tokens): {', '.join(huge)}"
    return None


def _int(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return int(value)


def _float(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)
