"""The lane's peak prefill throughput answer: its walk's windows (``core.prefill``, the manifest's ``prefill``)
judged by ``core.prefill_peak`` against the policy's ``min_gain_per_doubling``, with what the figure holds for.

A peak prefill figure is a property of the prompt lengths it was measured with and of the chunk the runtime
processes a prompt in: llama-server's logical batch (``-b``, the most prompt tokens one step takes) and its
micro-batch (``-ub``). The answer says them: the prompt lengths the runtime counted, and the batch and
micro-batch of the lane's fingerprint (None where no fingerprint was taken). llm-d's record
(``recommender.consumer_records``) is filled from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, Field

from satbench.answer.policy import Policy
from satbench.core.prefill import PrefillWalk
from satbench.core.prefill_peak import PeakStatus, PrefillRung, peak_prefill, saturating_concurrency

__all__ = ["PrefillModel", "PrefillRungModel", "prefill_answer"]


class PrefillRungModel(BaseModel):
    """One rung of the peak-prefill walk."""

    concurrency: int
    prompt_tok_s: float = Field(description="prompt tokens the runtime evaluated per second of the window")
    interval: list[float] | None = Field(description="its interval (batch means over the window, 95 %)")
    requests: int
    median_ttft_s: float | None
    valid: bool
    reason: str | None = None


class PrefillModel(BaseModel):
    """The lane's peak prefill throughput: long prompts, one output token, rising concurrency, until prompt
    tokens/s stop gaining (``core.prefill_peak``); absent where the run walked none."""

    status: PeakStatus = Field(description="settled (a doubling stopped paying), unsaturated (still gaining at "
                                           "the walk's top: a lower bound), undecided, insufficient_data")
    reason: str
    peak_prompt_tok_s: float | None = Field(description="the peak: the highest rung up to the plateau")
    interval: list[float] | None = Field(description="the peak rung's interval")
    concurrency: int | None = Field(description="the rung the peak was read at")
    requests: int = Field(description="requests in the peak rung's window")
    median_ttft_s: float | None = Field(description="the peak rung's median time to first token")
    prompt_tokens: list[int] | None = Field(description="the shortest and longest prompt the runtime counted")
    prompt_tokens_asked: int = Field(description="the prompt length the walk sent (within a slot's context)")
    batch_tokens: int | None = Field(description="the logical batch (-b) a step takes prompt tokens in, from the "
                                                 "fingerprint: the chunk the figure holds for")
    ubatch_tokens: int | None = Field(description="the micro-batch (-ub), from the fingerprint")
    rungs: list[PrefillRungModel]


def _setting(settings: Mapping[str, Any], name: str) -> int | None:
    value = settings.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def prefill_answer(walk: PrefillWalk, policy: Policy, settings: Mapping[str, Any] | None = None) -> PrefillModel:
    """The answer of one lane's walk; ``settings``, its fingerprint's server settings (module docstring)."""
    rungs = [PrefillRung(w.concurrency, w.prompt_tok_s, w.interval, w.requests if w.valid else 0)
             for w in walk.windows]
    batch = walk.batch or _setting(settings or {}, "batch")
    peak = peak_prefill(rungs, min_gain_per_doubling=policy.min_gain_per_doubling,
                        saturating=saturating_concurrency(walk.slots, batch, walk.prompt_tokens))
    at = next((w for w in walk.windows if w.valid and w.concurrency == peak.concurrency), None)
    lengths = [w.prompt_tokens for w in walk.windows if w.valid and w.prompt_tokens is not None]
    return PrefillModel(
        status=peak.status, reason=peak.reason, peak_prompt_tok_s=peak.peak_tok_s,
        interval=None if peak.interval is None else list(peak.interval), concurrency=peak.concurrency,
        requests=peak.requests, median_ttft_s=None if at is None else at.median_ttft_s,
        prompt_tokens=[min(a for a, _ in lengths), max(b for _, b in lengths)] if lengths else None,
        prompt_tokens_asked=walk.prompt_tokens,
        batch_tokens=_setting(settings or {}, "batch"), ubatch_tokens=_setting(settings or {}, "ubatch"),
        rungs=[PrefillRungModel(concurrency=w.concurrency, prompt_tok_s=w.prompt_tok_s,
                                interval=None if w.interval is None else list(w.interval), requests=w.requests,
                                median_ttft_s=w.median_ttft_s, valid=w.valid, reason=w.reason)
               for w in walk.windows])
