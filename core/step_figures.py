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
- pauses (decode starvation as a bounded wait, in time a user feels): per successful request sent in the
  window, its longest gap between two tokens; ``pause_s`` holds the quantiles of those per-request
  maxima over the requests (``pause_requests`` of them; the verdict reads the p99), so it neither grows
  with the window's length nor rests on one gap, as a window maximum would.
- prefill interference: a gap that overlaps another request's prefill is stalled, and it lost what it
  lasted beyond the step's ITL p50. ``interference_share`` is the time lost over all decode time (the sum
  of the window's gaps); ``stall_per_prompt_s`` is the mean loss of one stalled gap (how long a decode
  pauses when a prompt is admitted), and ``stall_ms_per_prompt_token`` that over the mean prompt of the
  admitted requests. ``prefill_events`` counts prefills that began inside the window while another request
  of the step was decoding: the opportunities to stall. ``None`` where no request decoded beside another.
- admission (prefill starvation): with ``S`` slots (``window.slots``) and ``c > S`` closed-loop users, a
  request *queues* when at least ``S`` other requests of the step were in flight as it was sent. Under
  first-in-first-out admission at most ``c - S - 1`` requests are ahead of it, and each slot frees within
  one service time (``e2e - queue``, the time a request holds a slot), so it is admitted within
  ``ceil((c - S) / S)`` longest service times, plus one step (the step running as the slot frees: the
  longest gap between tokens). ``admission_wait_bound_s`` is that bound, ``admission_wait_max_s`` the
  longest wait (``queue_s``; where the runtime does not report it, TTFT, and the bound then adds the
  longest TTFT of a request that found a slot free) of the ``queued_requests``. Not applicable (``None``)
  when ``c <= S`` or the slots are unknown.
- fairness: per user, the waits (as above) of its requests that queued (every request sent in the window
  where the slots are unknown; none where every user has a slot: admission cannot favour anyone then);
  ``user_wait_p_value`` is the Kruskal-Wallis p-value that every user's waits share one distribution
  (``core.statistics.groups_differ``), ``user_wait_ratio`` the worst user's mean wait over the mean of all
  and ``user_wait_excess_s`` the difference. Users are exchangeable under a fair admission whatever the
  lengths are (each draws from one workload), so the test does not fire on length noise; it needs two
  users with waits. The same test on the users' decode pace (per request, the median of its gaps, which a
  few stalls do not move: ``user_itl_p_value``; ``user_itl_ratio`` is the slowest user's mean pace over
  the fastest's, ``user_itl_excess_s`` the difference) sees a batcher that decodes some users more slowly
  than others; prefill stalls, which TPOT would mix in, are the starvation checks' business.
- prompt cache and speculative decoding (``cache_hit_share``, ``spec_acceptance_rate`` and their token
  sums): over the successful requests that ended inside the window, ``core.runtime_counts``.
- throughput confidence interval: batch means over ``k = floor(W / batch_s)`` batches (default
  ``batch_s = W / 32``), merged pairwise until their lag-1 autocorrelation is insignificant, then
  ``mean +- t(0.975, k-1) * sd / sqrt(k)`` (``core.statistics.uncorrelated_batch_ci``, which says why).
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Callable, Iterable, Sequence

from core.figures import StepFigures
from core.manifest import StepWindow
from core.records import RequestRecord
from core.runtime_counts import runtime_count_figures
from core.statistics import (
    batch_rates,
    groups_differ,
    jain_index,
    max_min_share,
    quantiles,
    uncorrelated_batch_ci,
)

__all__ = [
    "admission_figures",
    "compute_step_figures",
    "interference_figures",
    "longest_stalled_gap",
    "throughput_ci",
    "token_arrivals",
    "user_wait_figures",
    "window_validity",
]

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


class _Overlap:
    """Does a gap (a, b) overlap one of the intervals (s, e), ``s < b and e > a``? A bisect into the
    intervals sorted by start, against the running maximum of their ends."""

    def __init__(self, intervals: Sequence[tuple[float, float]]) -> None:
        ordered = sorted(intervals)
        self.starts = [s for s, _ in ordered]
        self.run_max: list[float] = []
        top = -math.inf
        for _, e in ordered:
            top = max(top, e)
            self.run_max.append(top)

    def __call__(self, a: float, b: float) -> bool:
        i = bisect.bisect_left(self.starts, b)
        return i > 0 and self.run_max[i - 1] > a


def longest_stalled_gap(gaps: Iterable[tuple[float, float]],
                        prefills: Sequence[tuple[float, float]]) -> float | None:
    """Length of the longest gap (a, b) that overlaps some prefill interval (s, e): s < b and e > a.

    Only a gap longer than the best so far is tested (a bisect into the intervals sorted by start, against
    the running maximum of their ends), so the usual case costs one comparison per gap.
    """
    if not prefills:
        return None
    overlaps = _Overlap(prefills)
    best = 0.0
    for a, b in gaps:
        if b - a > best and overlaps(a, b):
            best = b - a
    return best if best > 0 else None


def interference_figures(gaps: Sequence[tuple[float, float]], prefills: Sequence[tuple[float, float, int | None]],
                         decodes: Sequence[tuple[float, float]], itl_p50: float | None, start: float,
                         end: float, concurrency: int) -> dict[str, float | int | None]:
    """``interference_share``, ``stall_per_prompt_s``, ``stall_ms_per_prompt_token`` and ``prefill_events``
    (module docstring). ``prefills``: (admitted, first token, prompt tokens); ``decodes``: (first token,
    end) of every request of the step. One user has no other request to stall or be stalled by."""
    out: dict[str, float | int | None] = {"prefill_events": 0, "interference_share": None,
                                          "stall_per_prompt_s": None, "stall_ms_per_prompt_token": None}
    if concurrency < 2:
        return out
    firsts = sorted(a for a, _ in decodes)
    ends = sorted(b for _, b in decodes)
    events = [(s, n) for s, _, n in prefills if start <= s <= end
              and bisect.bisect_right(firsts, s) - bisect.bisect_right(ends, s) > 0]
    out["prefill_events"] = len(events)
    total = sum(b - a for a, b in gaps)
    if not events or itl_p50 is None or total <= 0:
        return out
    overlaps = _Overlap([(s, e) for s, e, _ in prefills])
    losses = [b - a - itl_p50 for a, b in gaps if b - a > itl_p50 and overlaps(a, b)]
    per_stall = sum(losses) / len(losses) if losses else 0.0
    sizes = [n for _, n in events if n]
    out.update(interference_share=sum(losses) / total, stall_per_prompt_s=per_stall,
               stall_ms_per_prompt_token=1000.0 * per_stall * len(sizes) / sum(sizes) if sizes else None)
    return out


def _wait(rec: RequestRecord) -> float | None:
    """A request's wait for admission: the server's queue time, else its TTFT, else (no token) its e2e."""
    for value in (rec.queue_s, rec.ttft_s, rec.e2e_s):
        if value is not None:
            return value
    return None


def split_queued(step_records: Sequence[RequestRecord], window: StepWindow
                 ) -> tuple[list[RequestRecord], list[RequestRecord]]:
    """The requests sent in the window that found every one of ``window.slots`` slots busy (at least that many
    others of the step in flight as they were sent), and those that found one free."""
    slots = window.slots or 0
    sent = sorted(r.sent_at for r in step_records)
    ended = sorted(r.ended_at if r.ended_at is not None else math.inf for r in step_records)
    queued: list[RequestRecord] = []
    free: list[RequestRecord] = []
    for rec in step_records:
        if not window.contains(rec.sent_at):
            continue
        others = bisect.bisect_left(sent, rec.sent_at) - bisect.bisect_right(ended, rec.sent_at)
        (queued if slots and others >= slots else free).append(rec)
    return queued, free


def _median_gap(rec: RequestRecord) -> float | None:
    """A request's decode pace: the median of its gaps between tokens (a few stalls do not move it)."""
    return float(statistics.median(rec.itl_s)) if rec.itl_s else None


def admission_figures(step_records: Sequence[RequestRecord], window: StepWindow, queued: Sequence[RequestRecord],
                      free: Sequence[RequestRecord], longest_gap: float | None) -> dict[str, float | int | None]:
    """``queued_requests``, ``admission_wait_max_s`` and its FIFO bound ``admission_wait_bound_s`` (module
    docstring) from ``split_queued``; all ``None`` where the slots are unknown or every user has a slot."""
    out: dict[str, float | int | None] = {"queued_requests": None, "admission_wait_max_s": None,
                                          "admission_wait_bound_s": None}
    slots, c = window.slots, window.concurrency
    if slots is None or c <= slots:
        return out
    service = [r.e2e_s - (r.queue_s or 0.0) for r in step_records if r.ok and r.e2e_s is not None]
    if not service:
        return out
    slack = longest_gap or 0.0
    if any(r.queue_s is None for r in queued):  # waits are TTFTs: they hold the request's own prefill
        slack += max((r.ttft_s for r in free if r.ttft_s is not None), default=0.0)
    waits = [w for w in map(_wait, queued) if w is not None]
    out["queued_requests"] = len(queued)
    out["admission_wait_max_s"] = max(waits) if waits else None
    out["admission_wait_bound_s"] = math.ceil((c - slots) / slots) * max(service) + slack
    return out


def _by_user(records: Iterable[RequestRecord], value: Callable[[RequestRecord], float | None]
             ) -> dict[int, list[float]]:
    out: dict[int, list[float]] = {}
    for rec in records:
        v = value(rec)
        if v is not None:
            out.setdefault(rec.user, []).append(v)
    return out


def user_wait_figures(window_records: Sequence[RequestRecord], queued: Sequence[RequestRecord],
                      window: StepWindow) -> dict[str, float | None]:
    """``user_wait_*`` over the ``queued`` requests (``split_queued``; every one sent in the window where the
    slots are unknown) and ``user_itl_*`` over the successful ones sent in the window (module docstring)."""
    out: dict[str, float | None] = {"user_wait_p_value": None, "user_wait_ratio": None, "user_wait_excess_s": None,
                                    "user_itl_p_value": None, "user_itl_ratio": None, "user_itl_excess_s": None}
    waits = _by_user(window_records if window.slots is None else queued, _wait)
    flat = [w for ws in waits.values() for w in ws]
    mean = sum(flat) / len(flat) if flat else 0.0
    if len(waits) >= 2 and mean > 0:
        worst = max(sum(ws) / len(ws) for ws in waits.values())
        out.update(user_wait_p_value=groups_differ(waits.values()), user_wait_ratio=worst / mean,
                   user_wait_excess_s=worst - mean)
    paces = _by_user((r for r in window_records if r.ok), _median_gap)
    means = [sum(ts) / len(ts) for ts in paces.values()]
    if len(paces) >= 2 and min(means) > 0:
        out.update(user_itl_p_value=groups_differ(paces.values()), user_itl_ratio=max(means) / min(means),
                   user_itl_excess_s=max(means) - min(means))
    return out


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
    prefills: list[tuple[float, float, int | None]] = []  # (admitted, first token or end, prompt tokens)
    e2e: list[float] = []
    ttft: list[float] = []
    tpot: list[float] = []
    queue: list[float] = []
    waits: list[float] = []
    pauses: list[float] = []
    sent_in_window: list[RequestRecord] = []
    decodes: list[tuple[float, float]] = []
    ok_count = 0
    errors_by_outcome: dict[str, int] = {}
    prompt_in: list[int] = []  # prompt tokens of the prefills that ended (first token) inside the window
    finished: list[RequestRecord] = []  # successful, ended inside the window

    for rec in mine:
        first = rec.first_token_at
        ended = rec.ended_at
        admitted = rec.sent_at + (rec.queue_s or 0.0)
        prefills.append((admitted, first if first is not None else (ended if ended is not None else end),
                         rec.prompt_tokens))
        if first is not None:
            decodes.append((first, ended if ended is not None else math.inf))
            if start <= first <= end and rec.prompt_tokens is not None:
                prompt_in.append(rec.prompt_tokens)
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
        if sent_in:
            sent_in_window.append(rec)
        if rec.ok:
            if ended is not None and start <= ended <= end:
                ok_count += 1
                finished.append(rec)
            if sent_in:
                if rec.e2e_s is not None:
                    e2e.append(rec.e2e_s)
                if rec.ttft_s is not None:
                    ttft.append(rec.ttft_s)
                if rec.tpot_s is not None:
                    tpot.append(rec.tpot_s)
                if rec.queue_s is not None:
                    queue.append(rec.queue_s)
                if rec.itl_s:
                    pauses.append(max(rec.itl_s))
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
    stall = longest_stalled_gap(gaps, [(a, b) for a, b, _ in prefills])
    ratio = None
    if stall is not None and itl_q.p50:
        ratio = stall / itl_q.p50
    counts = list(per_user.values())
    valid, reason = window_validity(window, ok_count)
    queued, free = split_queued(mine, window)
    extra: dict[str, float | int | None] = {
        **interference_figures(gaps, prefills, decodes, itl_q.p50, start, end, window.concurrency),
        **admission_figures(mine, window, queued, free, max(itl) if itl else None),
        **user_wait_figures(sent_in_window, queued, window),
        **runtime_count_figures(finished),
    }
    return StepFigures(
        lane=window.lane,
        concurrency=window.concurrency,
        window_s=end - start,
        requests=ok_count,
        errors=sum(errors_by_outcome.values()),
        throughput_tok_s=tokens / length,
        input_throughput_tok_s=sum(prompt_in) / length if prompt_in else None,
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
        pause_s=quantiles(pauses),
        pause_requests=len(pauses),
        **extra,  # type: ignore[arg-type]
        errors_by_outcome=dict(sorted(errors_by_outcome.items())),
        throughput_ci_tok_s=throughput_ci(arrivals, start, end, batch_s),
        valid=valid,
        reason=reason,
    )
