"""Who waited for a slot, how long, and whether first-in-first-out admission explains it: the prefill
starvation and fairness figures of one step.

Definitions (DESIGN.md "prefill starvation", "fairness"; the verdicts are in ``answer.judges``):

- **a wait**: from a request's send to its admission (sent plus the server's queue time where it says it;
  else its first token; a request that never got a token waited until it ended or was cut off). A request
  still waiting when last seen (cancelled at the drain, timed out, or cut off without a token) is a
  *censored* wait: at least that long (``core.survival.Wait``). Waits are observed for every request of the
  step whose wait overlaps the window, so a request sent before the window and never admitted (a user the
  scheduler never serves) counts, as it must.
- **queued**: with ``S`` slots (``window.slots``), a request that found at least ``S`` others of the step in
  flight when it was sent (one the server is turning away holds no slot and does not count, as for the bound).
- **its FIFO bound**: under first-in-first-out admission a queued request is admitted when the ``k + 1``-th
  slot frees after it arrived, ``k`` being the requests waiting ahead of it: those in flight when it was sent
  beyond the ``S`` that hold the slots (one sent within ``ORDER_SLACK_S`` after it counts as ahead too, since
  the server may have seen it first). Slots free when requests that held one end, at the times they ended:
  the service times of the requests actually in the slots and ahead of it, not a worst case of the whole
  step. The bound is that
  release's time less its send, plus one decode step's slack (the longest emission gap of the window: a
  freed slot is filled at the next step). A request whose bound cannot be told (fewer releases seen than it
  needed) is not judged.
- ``admission_overruns``: requests whose wait (censored included: a lower bound) passed their bound;
  ``admission_overrun_max_ratio`` the largest wait over bound, and ``admission_wait_max_s`` /
  ``admission_wait_bound_s`` that request's wait and bound. FIFO admission never overruns, whatever the
  lengths; an admission that lets later requests overtake (newest first, lowest user first) does.
- **users** ``0..c-1``: ``users_unserved`` got no token inside the window; ``users_starved`` of those had a
  request waiting past its FIFO bound (served nothing *because* they were passed over, not because their
  own prompt was long). ``user_wait_*``: the users' waits (queued ones, where the slots are known; every one
  otherwise), censored ones included, compared by a permutation log-rank test (``user_wait_p_value``,
  ``core.survival``), with the worst user's mean wait over the lane's (``user_wait_ratio``, a censored wait at
  its length so far) and their difference (``user_wait_excess_s``). ``user_itl_*``: the users' decode pace
  (each request's median emission gap) by Kruskal-Wallis, slowest user's mean over the fastest's.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from satbench.core.manifest import StepWindow
from satbench.core.records import RequestRecord
from satbench.core.statistics import groups_differ
from satbench.core.survival import Wait, logrank_p_value, mean_wait

__all__ = ["HANDLING_S", "ORDER_SLACK_S", "AdmissionFigures", "WaitObservation", "admission_figures", "observe_waits"]

ORDER_SLACK_S = 0.002
HANDLING_S = 0.05


@dataclass(frozen=True, slots=True)
class WaitObservation:
    record: RequestRecord
    sent: float
    admitted: float | None  # None: never admitted while observed
    seen_until: float  # admission, or when it was last seen waiting
    queued: bool

    @property
    def wait(self) -> Wait:
        return Wait(self.seen_until - self.sent, self.admitted is not None)


def _admitted(rec: RequestRecord) -> float | None:
    if rec.first_token_at is None:
        return None
    if rec.queue_s is not None:
        return rec.sent_at + rec.queue_s
    return rec.first_token_at


def _rejected(rec: RequestRecord) -> bool:
    """A request the server turned away (an HTTP error or a refusal before any token) never waited for a
    slot; one that was dropped or timed out without a token was still waiting."""
    return rec.first_token_at is None and rec.outcome in ("http_error", "refused", "malformed")


def observe_waits(step_records: Sequence[RequestRecord], window: StepWindow) -> list[WaitObservation]:
    """Every wait of the step that overlaps the window, with whether it queued (module docstring)."""
    slots = window.slots or 0
    waiting = [r for r in step_records if not _rejected(r)]
    sent = sorted(r.sent_at for r in waiting)
    ended = sorted(r.ended_at if r.ended_at is not None else math.inf for r in waiting)
    out: list[WaitObservation] = []
    for rec in waiting:
        admitted = _admitted(rec)
        last = admitted if admitted is not None else (rec.ended_at if rec.ended_at is not None else window.end)
        if rec.sent_at > window.end or last < window.start:
            continue
        others = bisect.bisect_left(sent, rec.sent_at) - bisect.bisect_right(ended, rec.sent_at)
        out.append(WaitObservation(rec, rec.sent_at, admitted, max(last, rec.sent_at),
                                   bool(slots) and others >= slots))
    return out


@dataclass(frozen=True, slots=True)
class AdmissionFigures:
    queued_requests: int | None = None
    admission_wait_max_s: float | None = None
    admission_wait_bound_s: float | None = None
    admission_overruns: int | None = None
    admission_overrun_max_ratio: float | None = None
    users_unserved: int | None = None
    users_starved: int | None = None
    user_wait_p_value: float | None = None
    user_wait_ratio: float | None = None
    user_wait_excess_s: float | None = None
    user_itl_p_value: float | None = None
    user_itl_ratio: float | None = None
    user_itl_excess_s: float | None = None


def _fifo_bounds(step_records: Sequence[RequestRecord], observed: Sequence[WaitObservation], slots: int,
                 slack: float) -> dict[int, float]:
    """Each observation's FIFO bound (by its index in ``observed``), where it can be told (module docstring).
    The requests waiting ahead of one are those in flight when it was sent beyond the ``slots`` that hold one
    (a work-conserving server keeps every slot busy while anyone waits), counted without knowing which ones
    hold the slots, so no admission time is needed; one that found a slot free is admitted at the next step."""
    releases = sorted(r.ended_at for r in step_records
                      if r.first_token_at is not None and r.ended_at is not None)
    sends = sorted(r.sent_at for r in step_records if not _rejected(r))
    ends = sorted(r.ended_at if r.ended_at is not None else math.inf for r in step_records if not _rejected(r))
    def in_flight(sent: float) -> int:
        return bisect.bisect_left(sends, sent + ORDER_SLACK_S) - bisect.bisect_right(ends, sent) - 1

    # where the server does not say its queue time the wait is the TTFT, which holds the request's own prefill:
    # its bound then allows a prefill, the median TTFT of the requests that found a slot free
    free = sorted(r.ttft_s for r in step_records if r.ttft_s is not None and not _rejected(r)
                  and in_flight(r.sent_at) < slots)
    prefill = free[len(free) // 2] if free else 0.0
    bounds: dict[int, float] = {}
    for i, obs in enumerate(observed):
        extra = slack + HANDLING_S + (prefill if obs.record.queue_s is None else 0.0)
        n = in_flight(obs.sent)
        if n < slots:
            bounds[i] = extra
            continue
        first = bisect.bisect_right(releases, obs.sent)
        if first + n - slots < len(releases):
            bounds[i] = releases[first + n - slots] - obs.sent + extra
    return bounds


def _by_user(pairs: Iterable[tuple[int, float]]) -> dict[int, list[float]]:
    out: dict[int, list[float]] = {}
    for user, value in pairs:
        out.setdefault(user, []).append(value)
    return out


def admission_figures(step_records: Sequence[RequestRecord], window: StepWindow, served: dict[int, int],
                      paces: Sequence[tuple[int, float]], slack: float) -> AdmissionFigures:
    """The step's admission and fairness figures (module docstring). ``served``: tokens per user inside the
    window; ``paces``: (user, median emission gap) of the successful requests sent in the window; ``slack``:
    one decode step (the window's longest emission gap)."""
    observed = observe_waits(step_records, window)
    slots, c = window.slots, window.concurrency
    queued = [(i, o) for i, o in enumerate(observed) if o.queued]
    bounds = _fifo_bounds(step_records, observed, slots, slack) if slots is not None and c > slots else {}
    over = [(o.wait.seconds / bounds[i], i) for i, o in enumerate(observed) if i in bounds and bounds[i] > 0]
    overruns = [i for ratio, i in over if ratio > 1.0]
    worst = max(over, default=None)
    unserved = [u for u in range(c) if served.get(u, 0) == 0]
    starved = {observed[i].record.user for i in overruns} & set(unserved)
    judged = [o for _, o in queued] if slots is not None else observed
    waits = _by_user((o.record.user, o.wait.seconds) for o in judged)
    groups = {u: [o.wait for o in judged if o.record.user == u] for u in waits}
    flat = [o.wait for o in judged]
    lane_mean = mean_wait(flat) or 0.0
    wait_p = wait_ratio = wait_excess = None
    if len(groups) >= 2 and lane_mean > 0:
        worst_user = max(mean_wait(g) or 0.0 for g in groups.values())
        wait_p = logrank_p_value(list(groups.values()))
        wait_ratio, wait_excess = worst_user / lane_mean, worst_user - lane_mean
    itl_p = itl_ratio = itl_excess = None
    by_pace = _by_user(paces)
    means = [sum(v) / len(v) for v in by_pace.values()]
    if len(by_pace) >= 2 and min(means) > 0:
        itl_p, itl_ratio, itl_excess = groups_differ(by_pace.values()), max(means) / min(means), max(means) - min(means)
    known = slots is not None and c > slots
    return AdmissionFigures(
        queued_requests=len(queued) if known else None,
        admission_wait_max_s=None if worst is None else observed[worst[1]].wait.seconds,
        admission_wait_bound_s=None if worst is None else bounds[worst[1]],
        admission_overruns=len(overruns) if known else None,
        admission_overrun_max_ratio=None if worst is None else worst[0],
        users_unserved=len(unserved),
        users_starved=len(starved) if known else None,
        user_wait_p_value=wait_p, user_wait_ratio=wait_ratio, user_wait_excess_s=wait_excess,
        user_itl_p_value=itl_p, user_itl_ratio=itl_ratio, user_itl_excess_s=itl_excess,
    )
