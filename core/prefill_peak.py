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

- ``next_prefill_rung``: double the concurrency (above every rung measured, so the walk always ends) until
  ``patience`` doublings are plateaus with none paying between them; an undecided one does not stop it (more
  load is the evidence that decides), and nothing goes above ``max_concurrency``. Pure.
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

__all__ = ["PATIENCE", "PeakStatus", "PrefillPeak", "PrefillRung", "next_prefill_rung", "peak_prefill"]

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


def _settled_at(decisions: list[str], patience: int) -> int | None:
    """The index of the doubling that makes ``patience`` plateaus with no paying doubling between them (an
    undecided one between them neither counts nor breaks the run), or None."""
    run = 0
    for i, decision in enumerate(decisions):
        run = 0 if decision == "pays" else run + (decision == "plateau")
        if run >= patience:
            return i
    return None


def peak_prefill(rungs: Sequence[PrefillRung], *, min_gain_per_doubling: float, min_requests: int = 10,
                 patience: int = PATIENCE) -> PrefillPeak:
    """The lane's peak prefill throughput from its rungs (module docstring)."""
    usable = _usable(rungs, min_requests)
    if not usable:
        return PrefillPeak("insufficient_data", None, None, None, 0,
                           f"no rung of at least {min_requests} requests with prompt tokens")
    decisions = _decisions(usable, min_gain_per_doubling)
    end = _settled_at(decisions, patience)
    if end is not None:
        high = usable[end + 1].concurrency
        return _peak("settled", usable[: end + 2], f"prompt tokens/s stopped gaining: {patience} doublings up to "
                     f"c={high} below {min_gain_per_doubling:.0%} each, none above it")
    top = usable[-1].concurrency
    if decisions and decisions[-1] == "undecided":
        return _peak("undecided", usable, f"c={usable[-2].concurrency} to c={top}: the gain's interval straddles "
                     f"{min_gain_per_doubling:.0%} per doubling; a higher rung decides it")
    if decisions and decisions[-1] == "plateau":
        return _peak("unsaturated", usable, f"flat from c={usable[-2].concurrency} to c={top}, the top rung, but "
                     f"for one doubling only (a batcher can be flat for one and rise after): a lower bound")
    return _peak("unsaturated", usable, f"still gaining at c={top}, the top rung: a lower bound")


def next_prefill_rung(rungs: Sequence[PrefillRung], *, min_gain_per_doubling: float, max_concurrency: int,
                      min_requests: int = 10, patience: int = PATIENCE) -> int | None:
    """The next concurrency to measure, or None: the peak is settled or the ladder is at its top."""
    if not rungs:
        return 1 if max_concurrency >= 1 else None
    if _settled_at(_decisions(_usable(rungs, min_requests), min_gain_per_doubling), patience) is not None:
        return None
    nxt = 2 * max(r.concurrency for r in rungs)  # above every rung measured, so the walk always ends
    return nxt if nxt <= max_concurrency else None
