"""Decode-weighted batch occupancy between two scrapes, and monotonic counters for ``rate()``.

A runtime's busy-slot-decode count (the sum, over decode steps, of the slots in the batch) divided by its
decode-step count is the mean batch size. Between two scrapes::

    occupancy = (busy[t1] - busy[t0]) / (steps[t1] - steps[t0]) / slots

which is what ``runtime_decode_occupancy_ratio`` publishes (the interval is "since this exporter's previous
scrape", so it is only meaningful with a single scraper). For any window in PromQL, the same ratio is
``rate(runtime_busy_slot_decodes_total[w]) / rate(runtime_decode_steps_total[w]) / runtime_slots_configured``.

llama.cpp only publishes the busy count as a rounded lifetime average, so the recovered counter can step
back by a rounding error; :func:`advance` keeps the published counter monotonic (a counter that drops looks
like a restart to ``rate()``) while computing interval ratios from the raw values, and treats a drop of the
decode-step counter as a real runtime restart.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

__all__ = ["OccupancyBook", "OccupancyState", "OccupancyStep", "advance"]


@dataclass(frozen=True)
class OccupancyState:
    decode_steps: float
    busy_raw: float
    busy_published: float


@dataclass(frozen=True)
class OccupancyStep:
    state: OccupancyState
    busy_published: float
    interval_ratio: float | None


def advance(
    previous: OccupancyState | None, decode_steps: float, busy_slot_decodes: float, slots: int | None
) -> OccupancyStep:
    """One scrape's step: the new state, the monotonic busy counter and the interval occupancy (or None)."""
    if previous is None or decode_steps < previous.decode_steps:
        state = OccupancyState(decode_steps, busy_slot_decodes, busy_slot_decodes)
        return OccupancyStep(state, busy_slot_decodes, None)
    published = max(previous.busy_published, busy_slot_decodes)
    state = OccupancyState(decode_steps, busy_slot_decodes, published)
    d_steps = decode_steps - previous.decode_steps
    if not slots or slots <= 0:
        return OccupancyStep(state, published, None)
    if d_steps <= 0:
        return OccupancyStep(state, published, 0.0)
    ratio = (busy_slot_decodes - previous.busy_raw) / d_steps / slots
    return OccupancyStep(state, published, min(1.0, max(0.0, ratio)))


class OccupancyBook:
    """The previous decode counters of each model of a node (key None: a single-model node), kept apart so
    that one model's counters never meet another's."""

    def __init__(self) -> None:
        self._states: dict[str | None, OccupancyState] = {}
        self._lock = threading.Lock()

    def step(
        self, key: str | None, decode_steps: float, busy_slot_decodes: float, slots: int | None
    ) -> OccupancyStep:
        with self._lock:
            step = advance(self._states.get(key), decode_steps, busy_slot_decodes, slots)
            self._states[key] = step.state
            return step
