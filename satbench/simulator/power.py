"""The modelled GPUs' power and energy on the engine's clock (the profile's ``[power]``, ``PowerModel``).

The engine tells the meter of every step it plans (``begin``: its start, its end and the tokens in its batch).
Between steps the GPUs draw ``idle_w``; during one, ``busy_w`` plus ``token_mj`` per token of the batch spread
over the step, capped at ``max_w``. The energy at any moment is that piecewise-constant power integrated from
the meter's first event, so the truth of a window's energy is known exactly from the steps the engine ran.

``/sim/gpu`` reports the energy as NVML's total-energy counter does (joules since the device started) and the
power as NVML's ``nvmlDeviceGetPowerUsage`` does on most boards: the mean over the last second, not an
instantaneous draw (a step lasts milliseconds, a scrape comes every second).
"""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass

from satbench.simulator.profile import PowerModel

__all__ = ["POWER_MEAN_S", "PowerMeter"]

POWER_MEAN_S = 1.0  # NVML's power reading: the mean over about one second


@dataclass(frozen=True)
class _Mark:
    """The meter's state at ``t``: the energy so far and the step running from then (start, end, watts)."""

    t: float
    joules: float
    step: tuple[float, float, float] | None


class PowerMeter:
    def __init__(self, model: PowerModel, keep_s: float = 4 * POWER_MEAN_S) -> None:
        self.model = model
        self._keep_s = keep_s
        self._marks: deque[_Mark] = deque()

    def step_watts(self, n_tokens: int, seconds: float) -> float:
        """The draw while a step of ``n_tokens`` lasting ``seconds`` runs."""
        m = self.model
        extra = m.token_mj / 1000.0 * n_tokens / seconds if seconds > 0 else 0.0
        return min(m.max_w, m.busy_w + extra)

    def _integral(self, mark: _Mark, t: float) -> float:
        """Energy from ``mark.t`` to ``t`` (>= ``mark.t``) under the mark's state."""
        idle = self.model.idle_w
        if mark.step is None:
            return idle * (t - mark.t)
        start, end, watts = mark.step
        busy = max(0.0, min(t, end) - max(mark.t, start))
        return watts * busy + idle * (t - mark.t - busy)

    def start(self, t: float) -> None:
        """The devices' start (idle from ``t``): the runtime's start; without it, the first step's."""
        if not self._marks:
            self._marks.append(_Mark(t, 0.0, None))

    def begin(self, start: float, end: float, n_tokens: int) -> None:
        """A step planned from ``start`` to ``end`` with ``n_tokens`` in its batch."""
        self.start(start)
        while len(self._marks) > 1 and self._marks[-1].t > start:  # a step planned again from earlier replaces
            self._marks.pop()
        last = self._marks[-1]
        joules = last.joules + self._integral(last, start) if start >= last.t else self._energy(start)
        self._marks.append(_Mark(start, joules, (start, end, self.step_watts(n_tokens, end - start))))
        while len(self._marks) > 2 and self._marks[1].t < start - self._keep_s:
            self._marks.popleft()

    def _energy(self, t: float) -> float:
        """Energy at ``t`` since the start, idle before it (negative there: only differences are read)."""
        if not self._marks:
            return 0.0
        i = bisect.bisect_right([m.t for m in self._marks], t) - 1
        if i < 0:
            first = self._marks[0]
            return first.joules - self.model.idle_w * (first.t - t)
        mark = self._marks[i]
        return mark.joules + self._integral(mark, t)

    def joules(self, now: float) -> float:
        """Energy drawn from the start to ``now`` (a counter: 0 before the start)."""
        return max(0.0, self._energy(now))

    def watts(self, now: float, over_s: float = POWER_MEAN_S) -> float:
        """The mean draw over the last ``over_s`` seconds (idle before the start)."""
        if not self._marks:
            return self.model.idle_w
        return (self._energy(now) - self._energy(now - over_s)) / over_s
