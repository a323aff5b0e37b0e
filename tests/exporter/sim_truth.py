"""Ground truth over a time window from the simulator's ``/sim/truth`` request records.

Each record gives a request's ``arrival``, ``admitted`` (slot taken), ``first_token`` and ``last_token``
(slot released) in Unix seconds. Over a window ``[t0, t1]``:

- time-weighted occupancy = total overlap of ``[admitted, last_token]`` with the window / (slots x length);
- mean queue depth = total overlap of ``[arrival, admitted]`` with the window / length;
- output tokens in the window: the first token at ``first_token``, the other ``n - 1`` spread evenly over
  ``(first_token, last_token]`` (decode steps are nearly uniform within one request).

A gauge sampled by Prometheus carries sampling noise that the continuous figure does not; :func:`state_at`
gives the true busy slots and queue depth at one instant, and :func:`state_range` their least and greatest
values over an interval: a sample stamped at the scrape's start was read from the runtime at some instant
before the scrape ended, so each sample is checked against the truth of its own scrape.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["WindowTruth", "state_at", "state_range", "window_truth"]


@dataclass(frozen=True)
class WindowTruth:
    occupancy_ratio: float
    queue_depth: float
    output_tokens: float
    requests: int


def _overlap(a: float, b: float, t0: float, t1: float) -> float:
    return max(0.0, min(b, t1) - max(a, t0))


def window_truth(records: Sequence[Mapping[str, Any]], t0: float, t1: float, slots: int) -> WindowTruth:
    length = t1 - t0
    busy = queued = tokens = 0.0
    count = 0
    for rec in records:
        admitted, last = rec.get("admitted"), rec.get("last_token")
        arrival, first = rec["arrival"], rec.get("first_token")
        queued += _overlap(arrival, admitted if admitted is not None else t1, t0, t1)
        if admitted is None or last is None:
            continue
        busy += _overlap(admitted, last, t0, t1)
        if last >= t0 and arrival <= t1:
            count += 1
        n = int(rec["output_tokens"])
        if first is None or n <= 0:
            continue
        if t0 <= first <= t1:
            tokens += 1
        if n > 1 and last > first:
            tokens += (n - 1) * _overlap(first, last, t0, t1) / (last - first)
    return WindowTruth(busy / (slots * length), queued / length, tokens, count)


def state_at(records: Sequence[Mapping[str, Any]], t: float) -> tuple[int, int]:
    """(busy slots, queued requests) at instant ``t``."""
    busy = queued = 0
    for rec in records:
        admitted, last = rec.get("admitted"), rec.get("last_token")
        if rec["arrival"] <= t and (admitted is None or t < admitted):
            queued += 1
        elif admitted is not None and admitted <= t and (last is None or t < last):
            busy += 1
    return busy, queued


def state_range(records: Sequence[Mapping[str, Any]], lo: float, hi: float) -> tuple[tuple[int, int], tuple[int, int]]:
    """((least, greatest) busy slots, (least, greatest) queued requests) over ``[lo, hi]``."""
    instants = [lo]
    for rec in records:
        for key in ("arrival", "admitted", "last_token"):
            t = rec.get(key)
            if t is not None and lo < t <= hi:
                instants.append(t)
    states = [state_at(records, t) for t in instants]
    busy = [b for b, _ in states]
    queued = [q for _, q in states]
    return (min(busy), max(busy)), (min(queued), max(queued))
