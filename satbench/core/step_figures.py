"""Exact per-step figures from raw request records: the offline source of truth for one step window.

``compute_step_figures(records, window)`` is pure: the load generator calls it to write ``steps.json`` and to
publish the step's figures, and the recommender's records source calls the same function, so both agree to
the last digit.

What counts (DESIGN.md "Metric definitions"):

- throughput: output tokens whose *arrival time* lies inside ``[start, end]``, over the window length. Each
  content event is one arrival of the tokens it carried (``event_token_counts``): as the runtime counted them
  per event where it did (``RequestRecord.event_tokens``: llama.cpp's cumulative ``tokens_predicted`` or the
  event's ``tokens`` ids, an OpenAI stream's per-chunk ``usage``, ``core.sse``); else, where the server's final
  count is larger than the events seen (vLLM or SGLang ``--stream-interval``, a speculative verify step sent as
  one chunk), an estimate: the uncounted tokens spread evenly over the events after the first (the first event
  is TTFT's; a stream cut into k-token events carries k in each). Crediting them all to the last event, as
  before, made the arrivals lumpy (the throughput interval of one engine went from +-2 % to +-57 % at eight
  tokens an event) and moved tokens out of the window. ``tokens_per_event`` is the window's mean (1 for a
  stream of one token an event: a lane whose events carry several says so), ``event_tokens_estimated`` how
  many of the requests ended in the window had theirs estimated rather than counted by the runtime.
- ITL, TPOT and pauses per token (``core.stalls.token_gaps``, which says why): the gap before an emission of n
  tokens is n per-token gaps, a hold kept in one of them; TPOT is per token by its definition. So one engine
  streamed at one, two, four or eight tokens an event gives the same ITL and the same answer.
- requests/s: successful requests that *ended* inside the window. Errors: failed requests that ended (or,
  without an end, were sent) inside the window, per outcome.
- the judged requests: every request *sent* inside the window, followed to its end. The load generator keeps
  its users going after the window until each of them has ended (up to its drain cap), so a long request
  sent late counts as much as a short one; one still running when the drain stopped following it (recorded
  ``dropped`` with ``extra.censored``) is *censored*: its e2e, TTFT and longest pause so far enter the
  quantiles as what they are, lower bounds, so a quantile over them is a lower bound too, and
  ``censored_requests`` says how many there were (never a silently truncated tail).
- latency quantiles (e2e, TTFT, TPOT, queue, pause) over the judged requests; ``latency_tail``,
  ``ttft_tail``, ``pause_excess_tail`` keep their largest values, so a quantile objective is judged by how
  many requests exceed it (``core.figures.Tail``). ITL: every per-token gap whose end lies inside the window
  (``core.stalls``: tokens less than 1 ms apart are one emission, its gap cut per token). Quantiles are exact
  (linear interpolation between order statistics, numpy's default). Reasoning: TTFT is the first token of any kind;
  ``ttft_visible_s`` the first visible one, over the same requests; ``reasoning_requests`` how many thought.
- ``turn_mean``: in a conversation workload, the mean depth (turn) of the judged requests: with a steady start
  it is (N + 1) / 2 at every rung, the check that every rung measured the same workload (``None`` without
  conversations).
- decode starvation (``decode_step_s``, ``pause_excess_s``, interference): ``core.stalls``.
- prefill starvation and fairness (queued waits, FIFO bounds, users served nothing, users' waits and pace):
  ``core.admission``. Jain's index ``(sum x)^2 / (n sum x^2)`` over per-user output tokens in the window,
  users ``0..c-1`` (a user that got nothing counts as 0); ``max_min_share`` is max/min of those counts
  (``None`` when some user got nothing).
- ``prefill_wait_max_s``: the longest TTFT of a request sent in the window (a request with no first token
  counts with the time it waited, its e2e).
- ``pause_s``: per judged request, its longest per-token gap; quantiles over requests (``pause_requests``).
- prompt cache and speculative decoding (``cache_hit_share``, ``spec_acceptance_rate`` and their token
  sums): over the successful requests that ended inside the window, ``core.runtime_counts``.
- open loop (a rate rung, ``core.arrivals``): the judged requests are those *meant* to be sent in the window
  (``intended_at``); ``offered_rps`` is how many over the window's length, ``schedule_lag_s`` how late they
  left (the client's own lag: a rung whose client fell behind is marked invalid by the load generator), and
  ``ttft_intended_s``/``latency_intended_s`` their TTFT and e2e from the intended time. ``backlog_growth_rps``
  is how fast the backlog (requests meant to be sent and not yet ended) grew over the window, with a standard
  error that is a stable queue's wander (``backlog_growth``): a queue that grows is a rate the lane does not
  sustain. A trace rung's window is whole passes of its recorded schedule (``period_s``): there it is the
  backlog's growth from one pass to the next at the same moment of the schedule (``pass_growth``), since a
  recorded schedule's own rise fills any server's slots and is no growing queue.
- goodput (``core.objectives``, given ``objectives``): per judged request whether it attained every
  objective (TTFT and e2e from the intended time in open loop); ``attained_requests`` of
  ``judged_requests``, ``attainment`` their share, ``goodput_rps``/``goodput_tok_s`` the attained requests and
  their tokens over the window's length, ``objective_misses`` the misses per objective (``error`` for failed).
- throughput interval: the rates of ``k = floor(W / batch_s)`` equal batches (default ``batch_s = W / 32``)
  and the autocorrelation-aware estimate of their mean (``core.statistics.batch_mean_estimate``, which says
  why); the interval at ``confidence`` in ``throughput_ci_tok_s``, and its standard error and degrees of
  freedom (``throughput_se_tok_s``, ``throughput_dof``) so a consumer rebuilds it at any confidence.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from satbench.core.admission import admission_figures
from satbench.core.attainment import attainment_estimate
from satbench.core.backlog import backlog_growth as growth_of
from satbench.core.backlog import pass_growth
from satbench.core.figures import TAIL_SIZE, StepFigures, Tail
from satbench.core.itl_interval import itl_interval_figures
from satbench.core.manifest import StepWindow
from satbench.core.objectives import Objectives
from satbench.core.passes import SNAP_S, paired_attainment
from satbench.core.records import RequestRecord
from satbench.core.runtime_counts import runtime_count_figures
from satbench.core.stalls import Decoding, StallFigures, longest_stalled_gap, stall_figures, token_gaps
from satbench.core.statistics import (
    MeanEstimate,
    batch_mean_estimate,
    batch_rates,
    jain_index,
    max_min_share,
    quantiles,
)

__all__ = [
    "START_BATCHES",
    "censored",
    "compute_step_figures",
    "event_token_counts",
    "longest_stalled_gap",
    "throughput_ci",
    "throughput_estimate",
    "token_arrivals",
    "window_validity",
]


def event_token_counts(record: RequestRecord) -> tuple[list[int], bool]:
    """Tokens per content event and whether they were estimated (module docstring): the runtime's counts where
    the record has them (a final count beyond them goes to the last event, as the server's word), else the
    server's final count less one per event spread evenly over the events after the first."""
    events = len(record.itl_s) + 1 if record.ttft_s is not None else 0
    if not events:
        return [], False
    counted = record.event_tokens
    if counted is not None and len(counted) == events:
        counts = [max(1, n) for n in counted]
        extra = record.output_tokens - sum(counts)
        if extra > 0:
            counts[-1] += extra
        return counts, False
    counts = [1] * events
    extra = record.output_tokens - events
    if extra <= 0:
        return counts, False
    if events == 1:
        counts[0] += extra
        return counts, True
    rest = events - 1
    for i in range(1, events):
        counts[i] += (i - 1) * extra // -rest - i * extra // -rest  # ceilings: the last event carries the remainder
    return counts, True


def token_arrivals(record: RequestRecord) -> list[tuple[float, int]]:
    """(arrival time, tokens) per content event (``event_token_counts``)."""
    counts, _ = event_token_counts(record)
    return list(zip(record.token_times(), counts, strict=True))


START_BATCHES = 32


def throughput_estimate(arrivals: Sequence[tuple[float, int]], start: float, end: float,
                        batch_s: float | None = None) -> MeanEstimate | None:
    """Tokens/s over ``[start, end]`` with its autocorrelation-aware standard error: batches of ``batch_s``
    (else a 32nd of the window), ``core.statistics.batch_mean_estimate``."""
    length = end - start
    if length <= 0:
        return None
    size = batch_s if batch_s and batch_s > 0 else length / START_BATCHES
    return batch_mean_estimate(batch_rates(arrivals, start, end, size))


def throughput_ci(arrivals: Sequence[tuple[float, int]], start: float, end: float,
                  batch_s: float | None = None, confidence: float = 0.95) -> tuple[float, float] | None:
    """The interval of ``throughput_estimate`` at ``confidence``."""
    estimate = throughput_estimate(arrivals, start, end, batch_s)
    return None if estimate is None else estimate.interval(confidence)


def censored(record: RequestRecord) -> bool:
    """A request the load generator stopped following while it still ran (cut off at the drain's cap)."""
    return record.outcome == "dropped" and bool(record.extra.get("censored"))


NO_REQUESTS_REASON = "no successful request ended inside the window"


def window_validity(window: StepWindow, requests: int) -> tuple[bool, str | None]:
    """A step is valid when its window is and a successful request ended inside it; else why not."""
    if window.valid and requests == 0:
        return False, NO_REQUESTS_REASON
    return window.valid, window.reason


def intended_times(records: Sequence[RequestRecord]) -> list[tuple[float, float]]:
    """Each open-loop request's (intended send, end), ``inf`` where it did not end: the backlog's steps."""
    return [(r.intended_at, r.ended_at if r.ended_at is not None else math.inf) for r in records
            if r.intended_at is not None]


def backlog_growth(records: Sequence[RequestRecord], start: float, end: float,
                   period_s: float | None = None) -> MeanEstimate | None:
    """How fast the backlog (requests meant to be sent by t and not ended by t) grew over ``[start, end]``
    (``core.backlog.backlog_growth``), or from pass to pass of a schedule replayed in whole passes of
    ``period_s`` (``core.backlog.pass_growth``); ``None`` for a closed rung (nothing has an intended time)."""
    times = intended_times(records)
    return growth_of(times, start, end) if period_s is None else pass_growth(times, start, end, period_s)


def compute_step_figures(records: Sequence[RequestRecord], window: StepWindow, *, batch_s: float | None = None,
                         confidence: float = 0.95, objectives: Objectives | None = None,
                         tail_size: int | None = TAIL_SIZE) -> StepFigures:
    """Exact figures of one step window from the records of its rung, its lane, concurrency and rate (others
    are ignored); goodput where ``objectives`` are given; ``tail_size`` None keeps every value in the tails."""
    start, end = window.start, window.end
    length = max(end - start, 1e-9)
    mine = [r for r in records if r.lane == window.lane and r.concurrency == window.concurrency
            and r.rate_rps == window.rate_rps]
    tally = _Tally(start, end, per_user={u: 0 for u in range(window.concurrency)}, period=window.period_s)
    for rec in mine:
        tally.take(rec)
    window_gaps = [g for d in tally.decodings for g in d.window_gaps]
    # a closed rung above one user, or an open-loop one (concurrency 0: no in-flight cap; a cap above one), runs
    # requests beside each other, so a decode can be held by another's prefill: its pause excess is measured
    overlapping = window.concurrency != 1
    stalls = stall_figures(tally.decodings, tally.prefills, start, end, overlapping)
    slack = max((b - a for a, b in window_gaps), default=0.0)
    admission = admission_figures(mine, window, tally.per_user, tally.paces, slack)
    valid, reason = window_validity(window, tally.ok_count)
    return StepFigures(
        lane=window.lane,
        concurrency=window.concurrency,
        window_s=end - start,
        **_service_figures(tally, length),
        **_latency_figures(tally, window_gaps, tail_size),
        **_stall_figures(stalls, overlapping, tail_size),
        **{f.name: getattr(admission, f.name) for f in fields(admission)},
        **_open_loop_figures(tally, window, backlog_growth(mine, start, end, window.period_s), length),
        **_goodput(objectives, tally.judged_records, stalls.excess_of, start, end, tally.earlier,
                   None if window.period_s is None else (window.period_s, intended_times(mine))),
        **runtime_count_figures(tally.finished),  # type: ignore[arg-type]
        **_throughput_interval(throughput_estimate(tally.arrivals, start, end, batch_s), confidence),
        valid=valid,
        reason=reason,
    )


@dataclass(slots=True)
class _Tally:
    """What one pass over a rung's records gathers for the window ``[start, end]``: each list is one
    figure's raw values, filled request by request so that every record is read once, in its order (the
    decodings' indices are the judged records' keys to their pause excess)."""

    start: float
    end: float
    per_user: dict[int, int]  # output tokens per user arriving inside the window
    arrivals: list[tuple[float, int]] = field(default_factory=list)
    decodings: list[Decoding] = field(default_factory=list)
    prefills: list[tuple[float, float, int | None]] = field(default_factory=list)  # admitted, prefill end, prompt
    prompt_in: list[int] = field(default_factory=list)  # prompt tokens of the prefills that ended inside the window
    finished: list[RequestRecord] = field(default_factory=list)  # successful, ended inside the window
    errors_by_outcome: dict[str, int] = field(default_factory=dict)
    waits: list[float] = field(default_factory=list)
    lags: list[float] = field(default_factory=list)
    judged_records: list[tuple[int, RequestRecord, bool]] = field(default_factory=list)  # decoding, record, cut
    period: float | None = None  # a trace rung's pass: the pass before the window is judged too
    earlier: list[tuple[int, RequestRecord]] = field(default_factory=list)  # decoding, record of that pass
    e2e: list[float] = field(default_factory=list)
    ttft: list[float] = field(default_factory=list)
    visible: list[float] = field(default_factory=list)
    tpot: list[float] = field(default_factory=list)
    queue: list[float] = field(default_factory=list)
    pauses: list[float] = field(default_factory=list)
    paces: list[tuple[int, float]] = field(default_factory=list)
    turns: list[int] = field(default_factory=list)
    ttft_intended: list[float] = field(default_factory=list)
    e2e_intended: list[float] = field(default_factory=list)
    ok_count: int = 0
    cut: int = 0
    reasoning: int = 0
    events_in: int = 0
    guessed: int = 0

    def take(self, rec: RequestRecord) -> None:
        """Count one record of the rung: its stream, its outcome, its wait and, if judged, its latencies."""
        start, end = self.start, self.end
        gaps, estimated = self._take_stream(rec)
        meant = rec.intended_at if rec.intended_at is not None else rec.sent_at
        sent_in = start <= meant <= end
        cut_off = censored(rec)
        judged = sent_in and (rec.ok or cut_off)
        ended = rec.ended_at
        earlier = (self.period is not None and rec.intended_at is not None
                   and start - self.period - SNAP_S <= meant < start)  # paired_attainment places it in its pass
        self.decodings.append(Decoding([(a, b) for a, b in gaps if start <= b <= end], gaps, judged, None
                                       if rec.first_token_at is None else
                                       (rec.first_token_at, ended if ended is not None else math.inf), earlier))
        if earlier:
            self.earlier.append((len(self.decodings) - 1, rec))
        self._take_outcome(rec, estimated)
        if sent_in:
            wait = rec.ttft_s if rec.ttft_s is not None else rec.e2e_s
            if wait is not None:
                self.waits.append(wait)
        if sent_in and rec.intended_at is not None:
            self.lags.append(rec.lag_s)
            if not judged and not rec.ok:  # a failed open-loop request counts against goodput
                self.judged_records.append((len(self.decodings) - 1, rec, False))
        if judged:
            self._take_judged(rec, gaps, cut_off)

    def _take_stream(self, rec: RequestRecord) -> tuple[list[tuple[float, float]], bool]:
        """The request's prefill, its token arrivals inside the window (per user too) and its emission gaps;
        whether its tokens per event were estimated."""
        start, end = self.start, self.end
        first, ended = rec.first_token_at, rec.ended_at
        prefilled = None if rec.prompt_tokens is None else rec.prompt_tokens - (rec.cached_prompt_tokens or 0)
        self.prefills.append((rec.sent_at + (rec.queue_s or 0.0), first if first is not None else (
            ended if ended is not None else end), prefilled))
        if first is not None and start <= first <= end and rec.prompt_tokens is not None:
            self.prompt_in.append(rec.prompt_tokens)
        times = rec.token_times()
        counts, estimated = event_token_counts(rec)
        for t, n in zip(times, counts, strict=True):
            if start <= t <= end:
                self.arrivals.append((t, n))
                self.events_in += 1
                self.per_user[rec.user] = self.per_user.get(rec.user, 0) + n
        return token_gaps(times, counts), estimated

    def _take_outcome(self, rec: RequestRecord, estimated: bool) -> None:
        """A success that ended inside the window, or a failure that ended (else was sent) inside it."""
        ended = rec.ended_at
        if rec.ok and ended is not None and self.start <= ended <= self.end:
            self.ok_count += 1
            self.finished.append(rec)
            self.guessed += estimated
        elif not rec.ok:
            when = ended if ended is not None else rec.sent_at
            if self.start <= when <= self.end:
                self.errors_by_outcome[rec.outcome] = self.errors_by_outcome.get(rec.outcome, 0) + 1

    def _take_judged(self, rec: RequestRecord, gaps: list[tuple[float, float]], cut_off: bool) -> None:
        """A judged request's latencies; one cut off by the drain gives its times so far, lower bounds."""
        self.judged_records.append((len(self.decodings) - 1, rec, cut_off))
        self.cut += cut_off
        self.turns.append(int(rec.extra.get("turn", 1)))
        if rec.intended_at is not None:
            if rec.ttft_s is not None or rec.e2e_s is not None:
                self.ttft_intended.append((rec.ttft_s if rec.ttft_s is not None else rec.e2e_s or 0.0) + rec.lag_s)
            if rec.e2e_s is not None:
                self.e2e_intended.append(rec.e2e_s + rec.lag_s)
        if rec.e2e_s is not None:
            self.e2e.append(rec.e2e_s)
        if rec.ttft_s is not None or rec.e2e_s is not None:  # no first token yet: at least the time so far
            self.ttft.append(rec.ttft_s if rec.ttft_s is not None else rec.e2e_s)  # type: ignore[arg-type]
        if rec.ok and rec.ttft_s is not None:
            self.visible.append(rec.ttft_visible_s if rec.ttft_visible_s is not None else rec.ttft_s)
            self.reasoning += rec.ttft_visible_s is not None
        if rec.ok and rec.tpot_s is not None:
            self.tpot.append(rec.tpot_s)
        if rec.queue_s is not None:
            self.queue.append(rec.queue_s)
        if gaps:
            self.pauses.append(max(b - a for a, b in gaps))
            if rec.ok:
                self.paces.append((rec.user, float(statistics.median(b - a for a, b in gaps))))


def _service_figures(tally: _Tally, length: float) -> dict[str, Any]:
    """What the window served: requests, errors, token rates, fairness over users, tokens per event."""
    tokens = sum(n for _, n in tally.arrivals)
    counts = list(tally.per_user.values())
    return {
        "requests": tally.ok_count,
        "errors": sum(tally.errors_by_outcome.values()),
        "errors_by_outcome": dict(sorted(tally.errors_by_outcome.items())),
        "throughput_tok_s": tokens / length,
        "input_throughput_tok_s": sum(tally.prompt_in) / length if tally.prompt_in else None,
        "requests_per_s": tally.ok_count / length,
        "jain": jain_index(counts),
        "max_min_share": max_min_share(counts),
        "tokens_per_event": tokens / tally.events_in if tally.events_in else None,
        "event_tokens_estimated": tally.guessed,
    }


def _latency_figures(tally: _Tally, window_gaps: Sequence[tuple[float, float]],
                     tail_size: int | None) -> dict[str, Any]:
    """The judged requests' latency quantiles and tails, the window's ITL and the workload's turn depth."""
    turns = tally.turns
    return {
        "latency_s": quantiles(tally.e2e),
        "ttft_s": quantiles(tally.ttft),
        "itl_s": quantiles(b - a for a, b in window_gaps),
        **itl_interval_figures(window_gaps, tally.start, tally.end),
        "tpot_s": quantiles(tally.tpot),
        "queue_s": quantiles(tally.queue),
        "prefill_wait_max_s": max(tally.waits) if tally.waits else None,
        "pause_s": quantiles(tally.pauses),
        "pause_requests": len(tally.pauses),
        "ttft_tail": Tail.of(tally.ttft, tail_size),
        "latency_tail": Tail.of(tally.e2e, tail_size),
        "censored_requests": tally.cut,
        "ttft_visible_s": quantiles(tally.visible),
        "reasoning_requests": tally.reasoning,
        "turn_mean": sum(turns) / len(turns) if turns and max(turns) > 1 else None,
    }


def _stall_figures(stalls: StallFigures, overlapping: bool, tail_size: int | None) -> dict[str, Any]:
    """Decode starvation (``core.stalls``); prefill events only where requests ran beside each other."""
    step_s = stalls.decode_step_s
    return {
        "decode_stall_max_ratio": None if stalls.longest_stalled_s is None or not step_s
        else stalls.longest_stalled_s / step_s,
        "decode_stall_max_s": stalls.longest_stalled_s,
        "prefill_events": stalls.prefill_events if overlapping else 0,
        "interference_share": stalls.interference_share,
        "stall_per_prompt_s": stalls.stall_per_prompt_s,
        "stall_ms_per_prompt_token": stalls.stall_ms_per_prompt_token,
        "stall_prompt_elasticity": stalls.prompt_elasticity,
        "decode_step_s": step_s,
        "decode_step_gaps": stalls.decode_step_gaps,
        "pause_excess_s": quantiles(stalls.excesses),
        "pause_excess_tail": Tail.of(stalls.excesses, tail_size),
        "pause_step_tail": Tail() if stalls.holds is None else Tail.of(stalls.holds, tail_size),
        "pause_steps_per_request": stalls.holds_per_request,
    }


def _open_loop_figures(tally: _Tally, window: StepWindow, growth: MeanEstimate | None,
                       length: float) -> dict[str, Any]:
    """A rate rung's offered load, the client's lag, latencies from the intended time and the backlog's
    growth; the window's own marks (settled waits, drift reference)."""
    return {
        "rate_rps": window.rate_rps,
        "waits_settled": None if window.steady is None else int(window.steady),
        "decided_early": None if window.decided_early is None else int(window.decided_early),
        "drift_reference": 1 if window.drift_reference else None,
        "offered_rps": None if window.rate_rps is None else len(tally.lags) / length,
        "schedule_lag_s": quantiles(tally.lags),
        "ttft_intended_s": quantiles(tally.ttft_intended),
        "latency_intended_s": quantiles(tally.e2e_intended),
        "backlog_growth_rps": None if growth is None else growth.mean,
        "backlog_growth_se": None if growth is None else growth.se,
        "backlog_growth_dof": None if growth is None else growth.dof,
    }


def _throughput_interval(estimate: MeanEstimate | None, confidence: float) -> dict[str, Any]:
    """The throughput's interval at ``confidence``, with its standard error and degrees of freedom."""
    return {
        "throughput_ci_tok_s": None if estimate is None else estimate.interval(confidence),
        "throughput_se_tok_s": None if estimate is None else estimate.se,
        "throughput_dof": None if estimate is None else estimate.dof,
    }


def _misses(objectives: Objectives, rec: RequestRecord, excess: float | None, cut: bool) -> list[str]:
    """The objectives one request missed (``core.objectives``): TTFT and e2e from its intended send time; one
    the drain cut off (``cut``) by its times so far."""
    ttft = rec.ttft_s if rec.ttft_s is not None else (rec.e2e_s if cut else None)
    return objectives.misses(
        ok=rec.ok or cut, finished=not cut,
        ttft_s=None if ttft is None else ttft + rec.lag_s, tpot_s=rec.tpot_s if rec.ok else None,
        pause_excess_s=excess, e2e_s=None if rec.e2e_s is None else rec.e2e_s + rec.lag_s,
        prompt_tokens=rec.prompt_tokens)


def _goodput(objectives: Objectives | None, judged: Sequence[tuple[int, RequestRecord, bool]],
             excess_of: dict[int, float], start: float, end: float,
             earlier: Sequence[tuple[int, RequestRecord]] = (),
             passes: tuple[float, Sequence[tuple[float, float]]] | None = None) -> dict[str, Any]:
    """Attainment and goodput of the judged requests (module docstring): each with its decoding's index (for
    its pause excess), its record and whether the drain cut it off. The attainment's standard error is the
    one the load generator's looks used (``core.attainment.attainment_estimate``); a trace rung's (``passes``:
    its period and every request's intended send and end, with the ``earlier`` pass's requests judged alike) is
    read pass against pass (``core.passes.paired_attainment``)."""
    if objectives is None or not judged:
        return {}
    length = max(end - start, 1e-9)
    tokens = 0
    misses: dict[str, int] = {}
    outcomes: list[tuple[float, bool]] = []
    waits: list[tuple[float, float]] = []
    for index, rec, cut in judged:
        ttft = rec.ttft_s if rec.ttft_s is not None else (rec.e2e_s if cut else None)
        missed = _misses(objectives, rec, excess_of.get(index), cut)
        for name in missed:
            misses[name] = misses.get(name, 0) + 1
        meant = rec.intended_at if rec.intended_at is not None else rec.sent_at
        outcomes.append((min(max(meant, start), end), not missed))
        if ttft is not None:
            waits.append((min(max(meant, start), end), ttft + rec.lag_s))
        if not missed:
            tokens += rec.output_tokens
    estimate = attainment_estimate(outcomes, start, end, waits)
    if passes is not None:
        before = [(rec.intended_at if rec.intended_at is not None else rec.sent_at,
                   not _misses(objectives, rec, excess_of.get(index), censored(rec))) for index, rec in earlier]
        estimate = paired_attainment(outcomes, before, start, end, passes[0], passes[1]) or estimate
    return {"judged_requests": estimate.judged, "attained_requests": estimate.attained,
            "attainment": estimate.share, "attainment_se": estimate.se, "attainment_dof": estimate.dof,
            "goodput_rps": estimate.attained / length, "goodput_tok_s": tokens / length,
            "objective_misses": dict(sorted(misses.items()))}
