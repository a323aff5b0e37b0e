"""One rung of the peak-prefill walk as the manifest keeps it, and the prompt length the walk sends.

The walk (``loadgen.prefill_walk``) sends long prompts and one output token each at rising concurrency, so a
request is its prefill. Its rung's figure is the prompt tokens the runtime evaluated per second of the rung's
window. Each request's evaluated tokens (its prompt less what the runtime says its prompt cache served: a
cached token costs no prefill) are credited evenly over its prefill, from when the runtime took it up (sent,
plus the queue time where the runtime reports one) to its first token, and the window's batches
(``core.statistics.batch_rates``, a 32nd of the window each, as the ladder's throughput) sum what fell in
each: conserved, so unbiased over a window as a count by first token is, but without the count's
quantisation (a rung of five long prompts a second would read 0 or 1 prompt per batch, an interval of +-15 %
from a perfectly steady server; credited over its prefill each batch reads what the server did). The
interval is the batch means' with their autocorrelation (``core.statistics.batch_mean_estimate``), the
ladder's own estimator. The peak and its verdict are the judgement's (``core.prefill_peak``), from these
windows, whichever path (records or Prometheus) the rest of the run's figures took: the manifest carries them.

``median_ttft_s``: the rung's median time to first token, which llm-d's calibration record carries beside the
peak (its consumer refuses a record without it).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, FiniteFloat

from satbench.core.figures import StepFigures
from satbench.core.records import RequestRecord
from satbench.core.statistics import batch_mean_estimate

__all__ = ["PREFILL_MARGIN_TOKENS", "PrefillWalk", "PrefillWindow", "prefill_window", "probe_prompt_tokens"]

# a slot holds the prompt, the one token generated, and what a chat template or a tokenizer that splits a word
# in two adds to the prompt the walk asked for
PREFILL_MARGIN_TOKENS = 64


class PrefillWindow(BaseModel):
    """One measured rung of a lane's peak-prefill walk (module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    concurrency: Annotated[int, Field(ge=1)]
    start: FiniteFloat
    end: FiniteFloat
    requests: Annotated[int, Field(ge=0)]
    prompt_tok_s: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    interval: tuple[FiniteFloat, FiniteFloat] | None = None
    median_ttft_s: FiniteFloat | None = None
    prompt_tokens: tuple[int, int] | None = None  # the shortest and longest prompt the runtime counted
    cached_prompt_tokens: int | None = None
    valid: bool = True
    reason: str | None = None


class PrefillWalk(BaseModel):
    """A lane's peak-prefill walk in the manifest: the prompt length it sent and its rungs, in walk order."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prompt_tokens: Annotated[int, Field(ge=1)]
    slot_context: int | None = None  # a slot's context as the runtime said (/props), which bounds the prompt
    tokens_per_word: float | None = None  # the runtime's tokens a word of the walk's text (/tokenize); None: 1
    # the runtime's slots (/props total_slots) and logical batch (-b, where /props says it): where more than one
    # prompt fits a step, the walk settles from twice the slots up (core.prefill_peak.saturating_concurrency)
    slots: int | None = None
    batch: int | None = None
    windows: tuple[PrefillWindow, ...] = ()

    def with_window(self, window: PrefillWindow) -> PrefillWalk:
        return self.model_copy(update={"windows": (*self.windows, window)})


def probe_prompt_tokens(want: int, slot_context: int | None) -> int:
    """The prompt length the walk sends: ``want``, within a slot's context less ``PREFILL_MARGIN_TOKENS``
    (the runtime refuses a prompt its slot cannot hold); at least 1."""
    if slot_context is None or slot_context <= 0:
        return max(1, want)
    return max(1, min(want, slot_context - PREFILL_MARGIN_TOKENS))


BATCHES = 32  # a window's batches, as the ladder's throughput (core.step_figures.START_BATCHES)


def _credits(records: list[RequestRecord], start: float, end: float) -> tuple[list[float], int, list[int]]:
    """Per batch, the prompt tokens/s credited to it (module docstring); the cached tokens of the requests whose
    first token came inside the window, and their prompt lengths."""
    size = (end - start) / BATCHES
    credit = [0.0] * BATCHES
    cached, lengths = 0, []
    for rec in records:
        first = rec.first_token_at
        if not rec.ok or first is None or rec.prompt_tokens is None:
            continue
        if start <= first <= end:
            lengths.append(rec.prompt_tokens)
            cached += rec.cached_prompt_tokens or 0
        taken = min(rec.sent_at + (rec.queue_s or 0.0), first)
        tokens = rec.prompt_tokens - (rec.cached_prompt_tokens or 0)
        if first <= start or taken >= end or tokens <= 0:
            continue
        span = first - taken
        if span <= 0:  # no time to spread over: the tokens count where they ended
            credit[min(int((first - start) / size), BATCHES - 1)] += tokens
            continue
        lo, hi = max(taken, start), min(first, end)
        for b in range(int((lo - start) / size), min(int((hi - start) / size), BATCHES - 1) + 1):
            b0, b1 = start + b * size, start + (b + 1) * size
            credit[b] += tokens * max(0.0, min(hi, b1) - max(lo, b0)) / span
    return [c / size for c in credit], cached, lengths


def prefill_window(records: list[RequestRecord], figures: StepFigures, start: float, end: float,
                   confidence: float = 0.95) -> PrefillWindow:
    """The rung's ``PrefillWindow`` from its records and window (module docstring); ``figures``, the window's
    step figures, say its requests, median TTFT and validity."""
    if end <= start:
        return PrefillWindow(concurrency=figures.concurrency, start=start, end=max(start, end), requests=0,
                             prompt_tok_s=0.0, valid=False, reason="an empty window")
    rates, cached, lengths = _credits(records, start, end)
    estimate = batch_mean_estimate(rates)
    interval = None
    if estimate is not None:
        low, high = estimate.interval(confidence)
        interval = (max(0.0, low), high)
    return PrefillWindow(
        concurrency=figures.concurrency, start=start, end=end, requests=figures.requests,
        prompt_tok_s=sum(rates) / len(rates),
        interval=interval,
        median_ttft_s=figures.ttft_s.p50,
        prompt_tokens=(min(lengths), max(lengths)) if lengths else None,
        cached_prompt_tokens=cached if any(r.cached_prompt_tokens is not None for r in records) else None,
        valid=figures.valid, reason=figures.reason)
