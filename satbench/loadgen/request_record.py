"""One finished request as its record (``core.records.RequestRecord``): the client's token times and the server's
summary turned into TTFT (first token of any kind; the first visible one beside it for a reasoning model), the
gaps between tokens, the queue wait (the server's own where it tells it, else TTFT less its prompt time), the
output tokens (the server's count of a whole answer), and what the request asked beside them. Pure: the step
(``loadgen.step``) decides the phase and writes the record.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

from satbench.core.records import Phase, RequestRecord
from satbench.core.sse import StreamParser, StreamSummary
from satbench.loadgen.client import RawResult
from satbench.loadgen.workload import RequestSpec

__all__ = ["request_record"]

_UNSAID = StreamSummary(None, None, None, None, None)  # a request the server said nothing about


def request_record(res: RawResult, spec: RequestSpec, parser: StreamParser | None, *, run_id: str, lane: str,
                   concurrency: int, user: int, request_id: str, phase: Phase, wall: Callable[[int], float],
                   rate_rps: float | None, intended_ns: int | None) -> RequestRecord:
    """The record of ``res`` (``wall`` maps the monotonic ns of the client's clock to wall seconds)."""
    tok = res.token_ns
    send = res.send_ns
    ttft = (tok[0] - send) / 1e9 if tok else None
    visible = None
    if parser is not None and parser.reasoning_events and parser.first_visible_ns is not None:
        visible = (parser.first_visible_ns - send) / 1e9
    gaps = tuple((b - a) / 1e9 for a, b in itertools.pairwise(tok))
    summary = res.summary
    queue = None
    if summary is not None and ttft is not None:
        if summary.queue_ms is not None:
            queue = max(0.0, summary.queue_ms / 1e3)
        elif summary.prompt_ms is not None:
            queue = max(0.0, ttft - summary.prompt_ms / 1e3)
    output = len(tok)
    if res.outcome == "ok" and summary is not None and summary.output_tokens is not None:
        output = summary.output_tokens
    extra: dict[str, object] = dict(res.extra)
    if parser is not None and parser.reasoning_events:
        extra["reasoning_tokens"] = parser.reasoning_events
    if spec.probe:
        extra["probe"] = True
    extra.update(spec.tags())
    if res.outcome == "ok" and output != spec.max_tokens:
        extra["asked_output_tokens"] = spec.max_tokens
    said = summary or _UNSAID
    return RequestRecord(
        run_id=run_id, lane=lane, concurrency=concurrency, user=user, request_id=request_id,
        phase=phase, sent_at=wall(send), ttft_s=ttft, e2e_s=(res.end_ns - send) / 1e9,
        queue_s=queue, itl_s=gaps,
        prompt_tokens=said.prompt_tokens, output_tokens=output, outcome=res.outcome,  # type: ignore[arg-type]
        status=res.status, error=res.error, retried=res.retried, extra=extra,
        cached_prompt_tokens=said.cached_prompt_tokens, draft_tokens=said.draft_tokens,
        draft_accepted_tokens=said.draft_accepted_tokens, ttft_visible_s=visible, rate_rps=rate_rps,
        intended_at=None if intended_ns is None else wall(intended_ns),
        event_tokens=None if parser is None or len(tok) != len(parser.token_ns) else parser.token_counts(),
    )
