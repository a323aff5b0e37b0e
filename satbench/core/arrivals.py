"""Open-loop arrival schedules: when each request of a rate rung is meant to be sent, seeded and reproducible.

A closed loop (c users, each sending as soon as its last request ended) slows down with the server: its
latency understates what open traffic sees at the same throughput (coordinated omission; Tene 2013). Open
loop sends on a schedule whatever the server does, and times every request from when it was *meant* to be
sent, so a client or server stall cannot hide latency.

The processes (inter-arrival gaps of a stream at ``rate`` requests per second):

- ``constant``: every ``1 / rate`` seconds;
- ``poisson``: exponential gaps (a Poisson process; the memoryless arrivals of many independent users);
- ``gamma``: gamma gaps of mean ``1 / rate`` and shape ``k`` (coefficient of variation ``1 / sqrt(k)``):
  ``k = 1`` is Poisson, ``k < 1`` burstier, ``k > 1`` smoother (vLLM's ``--burstiness``, AIPerf's gamma
  arrivals).

``schedule(process, rate, duration_s, seed, shape)`` gives the send offsets in ``[0, duration_s)``; the same
arguments give the same offsets, so the simulator's virtual-time engine can be fed the very schedule the
load generator sends (``simulator.virtual``), and a test knows the truth of the traffic it measured.
``ArrivalStream`` draws the same offsets one at a time, for a schedule that runs until told to stop.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

__all__ = ["PROCESSES", "ArrivalStream", "gamma_shape", "rate_label", "schedule"]

PROCESSES = ("closed", "constant", "poisson", "gamma")


def rate_label(rate: float | None) -> str:
    """A rung's rate as its series label (``rate_rps``): ``""`` (no label) for a closed rung, else the float's
    shortest round-trip text, the same on the load generator's side and the recommender's."""
    return "" if rate is None else repr(float(rate))


def gamma_shape(shape: float | None, cv: float | None) -> float:
    """The gamma shape from a shape or a coefficient of variation (``cv = 1 / sqrt(shape)``); 1 (Poisson)
    when neither is given."""
    if shape is not None:
        return shape
    if cv is not None:
        return 1.0 / (cv * cv)
    return 1.0


@dataclass
class ArrivalStream:
    """Seeded inter-arrival gaps of one rate rung; ``next_offset()`` is the next send time since its start."""

    process: str
    rate: float
    seed: int | str = 0
    shape: float = 1.0

    def __post_init__(self) -> None:
        if self.process not in PROCESSES[1:]:
            raise ValueError(f"arrival process must be one of {PROCESSES[1:]}, got {self.process!r}")
        if not (self.rate > 0 and math.isfinite(self.rate)):
            raise ValueError(f"arrival rate must be a positive number, got {self.rate!r}")
        if not self.shape > 0:
            raise ValueError(f"gamma shape must be positive, got {self.shape!r}")
        self._rng = random.Random(f"arrivals:{self.process}:{self.rate!r}:{self.shape!r}:{self.seed}")
        self._t = 0.0

    def gap(self) -> float:
        mean = 1.0 / self.rate
        if self.process == "constant":
            return mean
        if self.process == "poisson":
            return self._rng.expovariate(self.rate)
        return self._rng.gammavariate(self.shape, mean / self.shape)

    def next_offset(self) -> float:
        offset = self._t
        self._t += self.gap()
        return offset


def schedule(process: str, rate: float, duration_s: float, seed: int | str = 0, shape: float = 1.0) -> list[float]:
    """Send offsets in ``[0, duration_s)`` of one rung (module docstring)."""
    stream = ArrivalStream(process, rate, seed, shape)
    out = []
    while (t := stream.next_offset()) < duration_s:
        out.append(t)
    return out
