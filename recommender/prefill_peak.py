"""Peak prefill throughput of a lane: where prompt tokens per second stop growing with concurrency.

llm-d's router predicts a request's TTFT as the prompt tokens in flight over a ``peakPrefillThroughput``
(tokens/s), today measured by hand as ``CHUNK_SIZE / median TTFT`` of single requests (llm-d-router #2068).
One request at a time leaves the accelerator idle between a prompt's batches, so that figure is a floor of the
lane's prefill capacity, not its peak. Here the peak is read the way the concurrency answer is: long prompts
and one output token each (so a request is its prefill), at rising concurrency, until prompt tokens/s stop
gaining, with the ladder's significance rule.

The rule (``core.statistics``, written once for the ladder): between rungs ``c1 < c2`` the gain per doubling
``(T2/T1) ** (1 / log2(c2/c1)) - 1`` is judged against the policy's ``min_gain_per_doubling`` with its
interval from the rungs' throughput intervals (``gain_interval``, ``doubling_decision``): ``pays`` (the whole
interval at or above it), ``plateau`` (the whole interval below it) or ``undecided``. A rung counts only with
at least ``min_requests`` requests in its window (llm-d's consumer wants at least 10 samples).

- ``next_prefill_rung``: double the concurrency (above every rung measured, so the walk always ends) until
  a doubling is a plateau; an undecided one does not stop it (more load is the evidence that decides), and
  nothing goes above ``max_concurrency``. Pure, as ``loadgen.ladder``'s stepping.
- ``peak_prefill``: ``settled`` at the first plateau, the peak being the highest rung measured up to it (the
  plateau's level; a noisy dip cannot lower it), with that rung's interval; ``unsaturated`` where the last
  doubling paid (the top rung's figure is a lower bound: the ladder ended first); ``undecided`` where it
  straddled the rule; ``insufficient_data`` with no rung of enough requests.

Not enough data is a result with its reason, never an exception. The figure holds for the chunk sizes it was
measured with (``-b``/``-ub``: the lane's fingerprint) and the prompt lengths of the rungs, which the caller
records beside it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Literal

from satbench.core.statistics import doubling_decision, gain_interval, gain_per_doubling

__all__ = ["PrefillPeak", "PrefillRung", "next_prefill_rung", "peak_prefill"]

PeakStatus = Literal["settled", "unsaturated", "undecided", "insufficient_data"]


@dataclass(frozen=True, slots=True)
class PrefillRung:
    """One rung's prompt tokens/s in its window, its interval (None: not known) and the requests behind it."""

    concurrency: int
    prompt_tok_s: float
    interval: tuple[float, float] | None
    requests: int


@dataclass(frozen=True, slots=True)
class PrefillPeak:
    status: PeakStatus
    peak_tok_s: float | None
    interval: tuple[float, float] | None
    concurrency: int | None
    requests: int
    reason: str


def _usable(rungs: Sequence[PrefillRung], min_requests: int) -> list[PrefillRung]:
    return sorted((r for r in rungs if r.requests >= min_requests and r.prompt_tok_s > 0),
                  key=lambda r: r.concurrency)


def _decisions(rungs: list[PrefillRung], min_gain: float) -> list[str]:
    return [doubling_decision(gain_per_doubling(a.concurrency, a.prompt_tok_s, b.concurrency, b.prompt_tok_s),
                              gain_interval(a.concurrency, a.interval, b.concurrency, b.interval), min_gain)
            for a, b in pairwise(rungs)]


def _peak(status: PeakStatus, rungs: list[PrefillRung], reason: str) -> PrefillPeak:
    top = max(rungs, key=lambda r: (r.prompt_tok_s, -r.concurrency))
    return PrefillPeak(status, top.prompt_tok_s, top.interval, top.concurrency, top.requests, reason)


def peak_prefill(rungs: Sequence[PrefillRung], *, min_gain_per_doubling: float,
                 min_requests: int = 10) -> PrefillPeak:
    """The lane's peak prefill throughput from its rungs (module docstring)."""
    usable = _usable(rungs, min_requests)
    if not usable:
        return PrefillPeak("insufficient_data", None, None, None, 0,
                           f"no rung of at least {min_requests} requests with prompt tokens")
    decisions = _decisions(usable, min_gain_per_doubling)
    for i, decision in enumerate(decisions):
        if decision == "plateau":
            low, high = usable[i].concurrency, usable[i + 1].concurrency
            return _peak("settled", usable[: i + 2], f"prompt tokens/s stopped gaining from c={low} to c={high} "
                         f"(less than {min_gain_per_doubling:.0%} per doubling)")
    top = usable[-1].concurrency
    if decisions and decisions[-1] == "undecided":
        return _peak("undecided", usable, f"c={usable[-2].concurrency} to c={top}: the gain's interval straddles "
                     f"{min_gain_per_doubling:.0%} per doubling; a higher rung decides it")
    return _peak("unsaturated", usable, f"still gaining at c={top}, the top rung: a lower bound")


def next_prefill_rung(rungs: Sequence[PrefillRung], *, min_gain_per_doubling: float, max_concurrency: int,
                      min_requests: int = 10) -> int | None:
    """The next concurrency to measure, or None: the peak is settled or the ladder is at its top."""
    if not rungs:
        return 1 if max_concurrency >= 1 else None
    if "plateau" in _decisions(_usable(rungs, min_requests), min_gain_per_doubling):
        return None
    nxt = 2 * max(r.concurrency for r in rungs)  # above every rung measured, so the walk always ends
    return nxt if nxt <= max_concurrency else None
