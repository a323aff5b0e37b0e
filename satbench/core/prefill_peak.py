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

Why ``patience`` (two) flat doublings in a row, where the concurrency ladder stops at one: a batcher's prefill
throughput is at its peak only once every step it runs is full, which takes a queue that always holds a
step's worth of prompt tokens. Below that it can be flat over a doubling and then rise: llama-server starts a
step as soon as a request arrives, so two closed-loop users whose requests end together are sent again a
moment apart and land in alternate steps, never one; at c=2 each step holds one prompt, as at c=1, and only
from c=4 on do the waiting prompts fill the steps (the simulator's engine, a memory-bound profile: 21.2k
prompt tok/s at c=1, 22.5k at c=2, 32.9k at its peak). One flat doubling answered 68 % of that peak; a
second flat doubling is what tells the shoulder from the plateau.

Why not below twice the slots where more than one prompt fits a step (``P < -b``, both known: the runtime's
slots, ``/props`` ``total_slots``, and its logical batch): the shoulder can then span two doublings. A step
that finishes ``m`` prompts frees ``m`` slots, and the next step starts at once with what is waiting: the
users of the ``m`` prompts are still turning round, so only the ``c - slots`` requests already queued can fill
them. Every step is the full one the peak is made of only when that queue can refill every slot a step may
free, ``c - slots >= slots``; below ``2 x slots`` the steps run short of prompts, and the throughput can be flat
over two doublings and rise after (an engine of the accuracy bench, ``bench/prefill_accuracy.py``: 3 slots,
``-b`` 2048, 732-token prompts: 22.9k, 24.1k, 24.1k prompt tok/s at 1, 2, 4 users, settled at 83 % of the
28.9k it runs at from 6). There ``patience`` flat doublings settle the peak only once the walk has measured a
rung at ``saturating_concurrency`` (``2 x slots``) or more; above it more users only queue. Where a prompt is
at least a step (chunked), the tokens one prompt has left fill a step and a step finishes at most one or two,
so the steps are full from a few users and the two flat doublings suffice; rungs far above them only thin out
(at 8 slots, 6,144-token prompts and ``-b`` 2048, c=32 left seven requests in a five-second window).

- ``next_prefill_rung``: double the concurrency (above every rung measured, so the walk always ends) until
  ``patience`` doublings are plateaus with none paying between them, up to a rung at ``saturating`` or above;
  an undecided one does not stop it (more load is the evidence that decides), and nothing goes above
  ``max_concurrency``. Pure.
- ``peak_prefill``: ``settled`` at the first such run of ``patience`` plateaus, the peak being the highest rung
  measured up to its end (the plateau's level; a noisy dip cannot lower it), with that rung's interval;
  ``unsaturated`` where the walk ended still gaining or with fewer flat doublings (the figure is a lower
  bound: the ladder ended first); ``undecided`` where its last doubling straddled the rule;
  ``insufficient_data`` with no rung of enough requests.

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

__all__ = ["PATIENCE", "PeakStatus", "PrefillPeak", "PrefillRung", "next_prefill_rung", "peak_prefill",
           "saturating_concurrency"]

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


PATIENCE = 2  # flat doublings in a row that settle the peak (module docstring)


def saturating_concurrency(slots: int | None, batch: int | None, prompt_tokens: int | None) -> int:
    """The least concurrency from which the walk's plateau can settle (module docstring): twice the ``slots``
    where more than one prompt fits a step of ``batch`` tokens, else 1 (any); 1 where any of them is unknown."""
    if slots is None or batch is None or prompt_tokens is None or min(slots, batch, prompt_tokens) <= 0:
        return 1
    return 2 * slots if prompt_tokens < batch else 1


def _settled_at(rungs: list[PrefillRung], decisions: list[str], patience: int, saturating: int) -> int | None:
    """The index of the doubling that makes ``patience`` plateaus with no paying doubling between them (an
    undecided one between them neither counts nor breaks the run), up to a rung at ``saturating`` or above, or
    None."""
    run = 0
    for i, decision in enumerate(decisions):
        run = 0 if decision == "pays" else run + (decision == "plateau")
        if run >= patience and rungs[i + 1].concurrency >= saturating:
            return i
    return None


def peak_prefill(rungs: Sequence[PrefillRung], *, min_gain_per_doubling: float, min_requests: int = 10,
                 patience: int = PATIENCE, saturating: int = 1) -> PrefillPeak:
    """The lane's peak prefill throughput from its rungs; ``saturating``, ``saturating_concurrency`` of the
    lane (module docstring)."""
    usable = _usable(rungs, min_requests)
    if not usable:
        return PrefillPeak("insufficient_data", None, None, None, 0,
                           f"no rung of at least {min_requests} requests with prompt tokens")
    decisions = _decisions(usable, min_gain_per_doubling)
    end = _settled_at(usable, decisions, patience, saturating)
    if end is not None:
        high = usable[end + 1].concurrency
        return _peak("settled", usable[: end + 2], f"prompt tokens/s stopped gaining: {patience} doublings up to "
                     f"c={high} below {min_gain_per_doubling:.0%} each, none above it")
    top = usable[-1].concurrency
    if decisions and decisions[-1] == "undecided":
        return _peak("undecided", usable, f"c={usable[-2].concurrency} to c={top}: the gain's interval straddles "
                     f"{min_gain_per_doubling:.0%} per doubling; a higher rung decides it")
    if decisions and decisions[-1] == "plateau" and top < saturating and \
            _settled_at(usable, decisions, patience, 1) is not None:
        return _peak("unsaturated", usable, f"flat up to c={top}, the top rung, but below c={saturating}, twice "
                     f"the slots, where the queue refills every slot a step frees: a lower bound")
    if decisions and decisions[-1] == "plateau":
        return _peak("unsaturated", usable, f"flat from c={usable[-2].concurrency} to c={top}, the top rung, but "
                     f"for one doubling only (a batcher can be flat for one and rise after): a lower bound")
    return _peak("unsaturated", usable, f"still gaining at c={top}, the top rung: a lower bound")


def next_prefill_rung(rungs: Sequence[PrefillRung], *, min_gain_per_doubling: float, max_concurrency: int,
                      min_requests: int = 10, patience: int = PATIENCE, saturating: int = 1) -> int | None:
    """The next concurrency to measure, or None: the peak is settled or the ladder is at its top."""
    if not rungs:
        return 1 if max_concurrency >= 1 else None
    usable = _usable(rungs, min_requests)
    if _settled_at(usable, _decisions(usable, min_gain_per_doubling), patience, saturating) is not None:
        return None
    nxt = 2 * max(r.concurrency for r in rungs)  # above every rung measured, so the walk always ends
    return nxt if nxt <= max_concurrency else None
