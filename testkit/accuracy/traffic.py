"""The datasheet's traffic, from a draw alone: open-loop arrivals for the truth, closed-loop users' lengths, and
the recorded trace.

The truth's arrivals are this module's own (``random.gammavariate``: shape ``1 / cv**2``, so a gamma of cv 1 is
Poisson), never the load generator's schedule: the truth is a property of the process, and a schedule that
drifted from the process it names would show as an error. One run's gaps are drawn at rate 1 and divided by the
rate, so the truth's bisection compares rates on the same random numbers and its attainment falls with the rate
without noise of its own.

A trace is ``requests`` arrivals over a window whose recorded rate is ``load`` times the draw's capacity guess,
placed by the inverse of the cumulative intensity of its shape (uniform order statistics: a Poisson process of
that intensity given its count): ``stationary`` flat; ``burst`` flat with ``burst_share`` of the requests in a
stretch of ``burst_len`` of the window starting at ``burst_at`` (anywhere: at the very start as at the end);
``ramp_up`` and ``ramp_down`` intensities rising or falling five-fold across the window; ``diurnal`` one
sinusoidal cycle of +-60 % at a drawn phase.
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
from dataclasses import dataclass

from testkit.accuracy.space import Condition, TraceShape

__all__ = ["TraceRows", "long_user", "open_arrivals", "trace_rows", "unit_gaps"]


def long_user(cond: Condition, user: int) -> bool:
    """Whether ``user`` is one of the draw's long-prompt users (a low-discrepancy share of the users)."""
    return cond.long_share > 0 and ((user + 0.5) * 0.6180339887) % 1.0 < cond.long_share


def unit_gaps(cv: float, n: int, seed: str) -> list[float]:
    """``n`` inter-arrival gaps of a rate-1 gamma renewal process of coefficient of variation ``cv``."""
    rng = random.Random(f"gaps:{seed}")
    if abs(cv - 1.0) < 1e-9:
        return [rng.expovariate(1.0) for _ in range(n)]
    shape = 1.0 / (cv * cv)
    return [rng.gammavariate(shape, 1.0 / shape) for _ in range(n)]


def open_arrivals(cond: Condition, rate: float, gaps: list[float], seed: str) -> list[tuple[float, int, int]]:
    """Arrivals ``(at, prompt, output)`` at ``rate`` from rate-1 ``gaps``; lengths seeded apart from the gaps, so
    every rate sees the same requests."""
    rng = random.Random(f"lengths:{seed}")
    out = []
    t = 0.0
    for g in gaps:
        t += g / rate
        long = cond.long_share > 0 and rng.random() < cond.long_share
        out.append((t, *cond.lengths(rng, long)))
    return out


@dataclass(frozen=True, slots=True)
class TraceRows:
    """A recorded window: ``rows`` (at, prompt, output) sorted, the first at 0, over ``length_s``."""

    rows: tuple[tuple[float, int, int], ...]
    length_s: float

    @property
    def rate_rps(self) -> float:
        return len(self.rows) / self.length_s


def _intensity(shape: TraceShape, x: float) -> float:
    """The shape's relative intensity at ``x`` in [0, 1] of the window (the burst aside)."""
    if shape.kind == "ramp_up":
        return 0.2 + 0.8 * x
    if shape.kind == "ramp_down":
        return 1.0 - 0.8 * x
    if shape.kind == "diurnal":
        return 1.0 + 0.6 * math.sin(2 * math.pi * x + shape.phase)
    return 1.0


def trace_rows(cond: Condition) -> TraceRows:
    """The draw's recorded trace (module docstring)."""
    shape = cond.trace
    rng = random.Random(f"trace:{cond.seed}:{cond.index}")
    n = shape.requests
    length = n / (shape.load * cond.capacity_guess_rps())
    grid = [i / 1000 for i in range(1001)]
    cum = [0.0]
    for a, b in itertools.pairwise(grid):
        cum.append(cum[-1] + (_intensity(shape, a) + _intensity(shape, b)) / 2 / 1000)

    def place(u: float) -> float:
        k = min(999, max(0, bisect.bisect_left(cum, u * cum[-1]) - 1))
        span = cum[k + 1] - cum[k]
        return (grid[k] + (u * cum[-1] - cum[k]) / span / 1000 if span > 0 else grid[k]) * length

    burst = round(n * shape.burst_share) if shape.kind == "burst" else 0
    at = [place(rng.random()) for _ in range(n - burst)]
    start = shape.burst_at * length
    at += [start + rng.random() * shape.burst_len * length for _ in range(burst)]
    at.sort()
    first = at[0]
    rows = []
    for t in at:
        long = cond.long_share > 0 and rng.random() < cond.long_share
        rows.append((round(t - first, 3), *cond.lengths(rng, long)))
    return TraceRows(tuple(rows), length)
