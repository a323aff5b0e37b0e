"""Exact per-step figures from raw request records: the offline source of truth for one step window.

``compute_step_figures(records, window)`` is pure: the load generator calls it to write ``steps.json``, and
the recommender's records source calls the same function, so both agree to the last digit.

What counts (DESIGN.md "Metric definitions"):

- throughput: output tokens whose *arrival time* lies inside ``[start, end]``, over the window length. Each
  content event is one arrival; when the server's own count is larger than the events seen (several tokens
  merged into one event), the remainder is credited to the request's last arrival.
- requests/s: successful requests that *ended* inside the window. Errors: failed requests that ended (or,
  without an end, were sent) inside the window, per outcome.
- latency quantiles (e2e, TTFT, TPOT, queue): successful requests *sent* inside the window. ITL: every gap
  whose later token arrived inside the window. Quantiles are exact (linear interpolation between order
  statistics, numpy's default).
- fairness: Jain's index ``(sum x)^2 / (n sum x^2)`` over per-user output tokens in the window, users
  ``0..c-1`` (a user that got nothing counts as 0); ``max_min_share`` is max/min of those counts (``None``
  when some user got nothing: Jain then shows the starvation).
- decode stall: the longest gap between two tokens of one request during which *another* request was in
  prefill: from its admission (sent + the server-reported queue time, when known; else sent) to its first
  token. Time a request spent queued for a slot is not prefill, and a gap then is not a stall. A request
  that never got a token is in prefill until it ended,
  in seconds and as a ratio to the step's ITL p50. Found by scanning gaps longest-first against the prefill
  intervals sorted by start with a running maximum of their ends (overlap: ``start < b and end > a``).
- prefill wait max: the longest TTFT of a request sent in the window (a request with no first token counts
  with the time it waited, its e2e).
- throughput confidence interval: batch means over ``k = floor(W / batch_s)`` batches (default
  ``batch_s = W / 32``), merged pairwise until their lag-1 autocorrelation is insignificant, then
  ``mean +- t(0.975, k-1) * sd / sqrt(k)`` (``core.statistics.uncorrelated_batch_ci``, which says why).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence

from core.figures import StepFigures
from core.manifest import StepWindow
from core.records import RequestRecord
from core.statistics import batch_rates, jain_index, max_min_share, quantiles, uncorrelated_batch_ci

__all__ = ["compute_step_figures", "longest_stalled_gap", "throughput_ci", "token_arrivals", "window_validity"]

def token_arrivals(record: RequestRecord) -> list[tuple[float, int]]:
    """(arrival time, tokens) per content event; the last event carries any tokens the server merged."""
    times = record.token_times()
    if not times:
        return []
    out = [(t, 1) for t in times]
    extra = record.output_tokens - len(times)
    if extra > 0:
        out[-1] = (times[-1], 1 + extra)
    return out


START_BATCHES = 32


def throughput_ci(arrivals: Sequence[tuple[float, int]], start: float, end: float,
                  batch_s: float | None = None, confidence: float = 0.95) -> tuple[float, float] | None:
    """Interval of tokens/s over ``[start, end]``: batch means over batches of ``batch_s`` (else a 32nd of
    the window), merged until uncorrelated (``core.statistics.uncorrelated_batch_ci``)."""
    length = end - start
    if length <= 0:
        return None
    size = batch_s if batch_s and batch_s > 0 else length / START_BATCHES
    return uncorrelated_batch_ci(batch_rates(arrivals, start, end, size), confidence)


def longest_stalled_gap(gaps: Iterable[tuple[float, float]],
                        prefills: Sequence[tuple[float, float]]) -> float | None:
    """Length of the longest gap (a, b) that overlaps some prefill interval (s, e): s < b and e > a.

    Only a gap longer than the best so far is tested (a bisect into the intervals sorted by start, against
    the running maximum of their ends), so the usual case costs one comparison per gap.
    """
    if not prefills:
        return None
    prefills = sorted(prefills)
    starts = [s for s, _ in prefills]
    run_max: list[float] = []
    top = -math.inf
    for _, e in prefills:
        top = max(top, e)
        run_max.append(top)
    find = bisect.bisect_left
    best = 0.0
    for a, b in gaps:
        if b - a > best:
            i = find(starts, b)
            if i > 0 and run_max[i - 1] > a:
                best = b - a
    return best if best > 0 else None


NO_REQUESTS_REASON = "no successful request ended inside the window"


def window_validity(window: StepWindow, requests: int) -> tuple[bool, str | None]:
    """A step is valid when its window is and a successful request ended inside it; else why not."""
    if window.valid and requests == 0:
        return False, NO_REQUESTS_REASON
    return window.valid, window.reason


def compute_step_figures(records: Sequence[RequestRecord], window: StepWindow, *,
                         batch_s: float | None = None) -> StepFigures:
    """Exact figures of one step window from the records of its lane and concurrency (others are ignored)."""
    start, end = window.start, window.end
    length = max(end - start, 1e-9)
    mine = [r for r in records if r.lane == window.lane and r.concurrency == window.concurrency]

    arrivals: list[tuple[float, int]] = []
    per_user: dict[int, int] = {u: 0 for u in range(window.concurrency)}
    itl: list[float] = []
    gaps: list[tuple[float, float]] = []
    prefills: list[tuple[float, float]] = []
    e2e: list[float] = []
    ttft: list[float] = []
    tpot: list[float] = []
    queue: list[float] = []
    waits: list[float] = []
    ok_count = 0
    errors_by_outcome: dict[str, int] = {}

    for rec in mine:
        first = rec.first_token_at
        ended = rec.ended_at
        admitted = rec.sent_at + (rec.queue_s or 0.0)
        prefills.append((admitted, first if first is not None else (ended if ended is not None else end)))
        times = rec.token_times()
        for t, n in token_arrivals(rec):
            if start <= t <= end:
                arrivals.append((t, n))
                per_user[rec.user] = per_user.get(rec.user, 0) + n
        for i in range(1, len(times)):
            if start <= times[i] <= end:
                itl.append(times[i] - times[i - 1])
                gaps.append((times[i - 1], times[i]))
        sent_in = start <= rec.sent_at <= end
        if rec.ok:
            if ended is not None and start <= ended <= end:
                ok_count += 1
            if sent_in:
                if rec.e2e_s is not None:
                    e2e.append(rec.e2e_s)
                if rec.ttft_s is not None:
                    ttft.append(rec.ttft_s)
                if rec.tpot_s is not None:
                    tpot.append(rec.tpot_s)
                if rec.queue_s is not None:
                    queue.append(rec.queue_s)
        else:
            when = ended if ended is not None else rec.sent_at
            if start <= when <= end:
                errors_by_outcome[rec.outcome] = errors_by_outcome.get(rec.outcome, 0) + 1
        if sent_in:
            wait = rec.ttft_s if rec.ttft_s is not None else rec.e2e_s
            if wait is not None:
                waits.append(wait)

    tokens = sum(n for _, n in arrivals)
    itl_q = quantiles(itl)
    stall = longest_stalled_gap(gaps, prefills)
    ratio = None
    if stall is not None and itl_q.p50:
        ratio = stall / itl_q.p50
    counts = list(per_user.values())
    valid, reason = window_validity(window, ok_count)
    return StepFigures(
        lane=window.lane,
        concurrency=window.concurrency,
        window_s=end - start,
        requests=ok_count,
        errors=sum(errors_by_outcome.values()),
        throughput_tok_s=tokens / length,
        requests_per_s=ok_count / length,
        latency_s=quantiles(e2e),
        ttft_s=quantiles(ttft),
        itl_s=itl_q,
        tpot_s=quantiles(tpot),
        queue_s=quantiles(queue),
        jain=jain_index(counts),
        max_min_share=max_min_share(counts),
        decode_stall_max_ratio=ratio,
        decode_stall_max_s=stall,
        prefill_wait_max_s=max(waits) if waits else None,
        errors_by_outcome=dict(sorted(errors_by_outcome.items())),
        throughput_ci_tok_s=throughput_ci(arrivals, start, end, batch_s),
        valid=valid,
        reason=reason,
    )
