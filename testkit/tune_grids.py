"""Noisy tune grids with a known truth: what a ladder walk of each candidate would report, drawn around a curve.

The tune's pruning (``satbench.tune.search``) and its answer (``satbench.tune.answer``) are judged on measured
outcomes that carry noise. This module makes such outcomes for a lane whose truth is a formula, so a test
or a bench can compare the pruned search with the full grid on the *same* measurements and score both winners
by the curve, never by the code under test. It is the audit's model (``../shared/audit/prune_noise.py``)
with the evidence a walk publishes beside its answer:

- **Truth.** A knee at ``knee`` busy slots (2, 4 or 8): one slot gives 90 tok/s and each doubling of busy
  slots adds 60, 30, 30 (``CURVE``), so doublings gain 67 %, 20 %, 17 % up to the knee and nothing past it.
  A smaller batch loses prefill efficiency, ``1 - 0.01 * (2048 // batch)`` (b2048 0.99, b512 0.96, b256 0.92,
  b128 0.84). A batch of 2048 starves decodes: from 2 users one request in ten is held past the stall limit
  (the prefill probe's share). Past the knee, with more slots than it, the ITL objective breaks (more
  decodes share each step).
- **A walk** measures rungs 1, 2, 4, ... up to twice the slots. Each rung's throughput is drawn with a
  relative standard error ``noise`` (3 %: the audit's level), its interval Student's at 30 degrees of
  freedom. The answer is the recommender's walk in small: a doubling that pays (its gain interval not
  entirely below 10 %) is accepted, a plateau (entirely below) stops it, a broken objective stops it below.
- **Noise in the verdicts** (the audit's levels): with probability ``flip`` a candidate's pause check flags
  at 2 users by chance, on the smallest counts that pass the verdict's own 5 % test (4 or 5 of 100 requests
  held); with probability ``blip`` a transient burst of errors stops the walk at a random rung.

``true_throughput(candidate)`` is the curve at the candidate's true answer: what a noise-free walk would
report. ``lane(seed, ...)`` returns a ``measure`` function (memoised: the pruned search and the full grid see
the same draws) and the lane's knee.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from satbench.core.statistics import gain_interval
from satbench.tune.grid import Candidate
from satbench.tune.search import Outcome, PauseCount

__all__ = ["CURVE", "NoisyLane", "agreement", "lane"]

CURVE = (90.0, 60.0, 30.0, 30.0)  # tok/s added by busy slots 1, 2, 4, 8
MIN_GAIN = 0.10
_Z = 2.042  # Student's t at 95 %, 30 degrees of freedom


def _busy_throughput(busy: int) -> float:
    return sum(CURVE[: busy.bit_length()])


def _batch_factor(batch: int) -> float:
    return 1.0 - 0.01 * (2048 // batch)


@dataclass
class NoisyLane:
    """One lane: its knee, noise levels and seed; ``measure`` draws a walk once per candidate."""

    seed: int
    knee: int
    noise: float = 0.03
    flip: float = 0.0
    blip: float = 0.0
    requests: int = 100

    def __post_init__(self) -> None:
        self._cache: dict[Candidate, Outcome] = {}

    def truth(self, c: Candidate, users: int) -> float:
        return _busy_throughput(min(users, c.parallel, self.knee)) * _batch_factor(c.batch)

    def true_answer(self, c: Candidate) -> int:
        """The rung a noise-free walk answers: the slots' knee (the doubling past it gains nothing)."""
        if c.batch >= 2048:
            return 1
        return min(c.parallel, self.knee)

    def true_throughput(self, c: Candidate) -> float:
        factor = 0.5 if c.batch >= 2048 else 1.0  # the starving batch answers 1 user at half its pace
        return self.truth(c, self.true_answer(c)) * factor

    def measure(self, c: Candidate) -> Outcome:
        if c not in self._cache:
            self._cache[c] = self._walk(c, random.Random(f"{self.seed}:{c.id}"))
        return self._cache[c]

    def _walk(self, c: Candidate, rng: random.Random) -> Outcome:
        rungs: list[int] = [1]
        while rungs[-1] * 2 <= 2 * c.parallel:
            rungs.append(rungs[-1] * 2)
        tput = {u: self.truth(c, u) * (0.5 if c.batch >= 2048 else 1.0) * rng.gauss(1.0, self.noise) for u in rungs}
        ci = {u: (t - _Z * self.noise * t, t + _Z * self.noise * t) for u, t in tput.items()}
        flipped = rng.random() < self.flip
        blip_at = rng.choice(rungs[1:]) if rng.random() < self.blip and len(rungs) > 1 else None
        held = None
        if c.batch >= 2048:
            held = sum(1 for _ in range(self.requests) if rng.random() < 0.1)
        elif flipped:
            held = rng.choice((4, 5))
        rec, binding, plateau, nxt = 1, "ladder_top", None, None
        for lower, upper in itertools.pairwise(rungs):
            stop = None
            if upper >= 2 and held is not None:
                stop = "decode_starvation"
            elif blip_at == upper:
                stop = "errors"
            elif upper > self.knee and c.parallel > self.knee and upper <= c.parallel:
                stop = "slo_itl"
            else:
                gain = gain_interval(lower, ci[lower], upper, ci[upper])
                if gain is not None and gain[1] < MIN_GAIN:
                    stop, plateau = "throughput_plateau", gain
            if stop is not None:
                binding, nxt = stop, upper
                break
            rec = upper
        if binding == "ladder_top" and rec < rungs[-1]:
            binding = "throughput_plateau"
        t = tput[rec]
        counts = () if held is None else (PauseCount(2, held, self.requests),)
        return Outcome(
            c, "measured", status="unsaturated" if binding == "ladder_top" else "ok", recommended=rec,
            binding=binding, throughput_tok_s=t, throughput_ci_tok_s=ci[rec],
            throughput_se_tok_s=self.noise * t, throughput_dof=30.0,
            starved_at=(2,) if held is not None else (), pause_counts=counts,
            pauses_bounded=held is None and rec >= 2, plateau=plateau, next_rung=nxt, rungs=tuple(rungs))


def lane(seed: int, *, noise: float = 0.03, flip: float = 0.0, blip: float = 0.0) -> NoisyLane:
    """A lane whose knee is drawn from the seed (2, 4 or 8 busy slots)."""
    return NoisyLane(seed, random.Random(seed).choice((2, 4, 8)), noise=noise, flip=flip, blip=blip)


def agreement(lanes: list[NoisyLane], candidates: list[Candidate],
              run: Callable[[NoisyLane, bool], Outcome | None]) -> tuple[int, int, float]:
    """(lanes whose pruned and full-grid winners differ, of those the ones >10 % slower by the curve, the
    worst ratio of the pruned winner's true throughput to the full grid's)."""
    differ = slower = 0
    worst = 1.0
    for one in lanes:
        a, b = run(one, True), run(one, False)
        if a is None or b is None or a.candidate != b.candidate:
            differ += 1
            if a is not None and b is not None:
                ratio = one.true_throughput(a.candidate) / one.true_throughput(b.candidate)
                worst = min(worst, ratio)
                slower += ratio < 1 / 1.1
    return differ, slower, worst if not math.isnan(worst) else 1.0
