"""Did the node change speed while a lane was measured? Drift, told apart from concurrency.

A ladder measures its rungs one after another, so anything that changes the node's speed during the walk (a
co-tenant, thermal limits, a server that slows with uptime) lands on the rungs measured after it and is read
as an effect of their concurrency: a step time that doubles between c=8 and c=16 reads as "c=16 lost 23 %"
and answers 8 where the steady node answers 128. Two checks see it, both pure functions of step figures:

- **The reference re-measure** (``reference_drift``). At the end of a lane the load generator measures its
  lowest rung again (``StepFigures.drift_reference`` set, ``loadgen.runner``). A steady node gives the same
  throughput twice; a node that changed gives another. The test is Welch's on the log of the two throughputs:
  ``log(t_again / t_first)`` has standard error ``sqrt((se1/t1)**2 + (se2/t2)**2)`` (the delta method on each
  window's autocorrelation-aware batch-means error, ``core.statistics.batch_mean_estimate``) and the
  Welch-Satterthwaite degrees of freedom (``core.statistics.welch_difference``); its Student interval at the
  policy's confidence, exponentiated, is the interval of the speed ratio. Significance alone is not drift: a
  40-second window measures a steady node to a few per cent, so a 5 % wobble of a real GPU would be
  "significant". The lane has drifted only where the whole interval lies beyond a practical floor: below
  ``1 / (1 + floor)`` (the node got slower by more than the floor) or above ``1 + floor`` (faster: most often a
  first rung measured on a cold server). The floor, ``policy.drift_floor``, is 0.25 by default, and here is
  why: a drift of ``f`` moves each later rung's throughput by ``f`` at most, so a doubling's gain moves from
  ``g`` to about ``(1 + g) / (1 + f) - 1``; the default ``min_gain_per_doubling`` of 10 % is decided by
  intervals some ±7-10 % wide at a session's rungs, so a 20 % drift spread over a walk moves no decision
  the rungs' own noise does not already leave open (``undecided``), while a step time that grows by half or
  doubles (ratio 0.67 or 0.5) turns paying doublings into plateaus and must be seen. With the floor at 25 %, a
  20 % drift (ratio 0.83) is called drift only where the interval's upper end falls below 0.80, which needs the
  point 4 % below the truth and an interval under ±4 % wide at once; a doubling (0.5) is called whenever the
  interval is narrower than ±60 %, which every usable rung's is (``policy.max_throughput_ci_ratio``).
- **Rung by rung** (``rung_drift``). Where a doubling of concurrency loses throughput beyond the floor (the
  gain interval's upper end below ``1 / (1 + floor) - 1``, -20 % at the default) while no request of the larger
  rung waited for a slot (the batch really grew), the loss alone does not say the node slowed: a real engine
  can lose aggregate throughput to concurrency itself (on a CPU, two streams' prefills interleave with the
  other's decode and the threads contend; a real llama-server on a CPU keeps 0.76x at c=1 -> 2 on a steady
  node, its re-measure of c=1 within 10 %). What a batched decoder cannot do is take longer for one step of
  the doubled batch than for two steps of the old one: it could run the larger batch as two of the old size.
  So the rung check calls drift only where the runtime's decode-only step (``StepFigures.decode_step_s``,
  ``core.stalls``) grew by more than the batch did (``step_b / step_a > c_b / c_a``) besides the loss: the
  step the engine ran is the witness, the throughput loss the size. Without the step on both rungs it says
  nothing. This names *when* (between which rungs) and catches a step change mid-walk even without a
  re-measure (the audit's "another tenant doubles the step from 120 s": c=16 lost 23 %), but a slowdown that
  lands on a doubling that still gains much (a 2x step at c=2 -> 4, +83 % true gain, reads -9 %) is invisible
  to it: the re-measure is the check that always sees a lasting change.

- **The answer's rung, again** (``knee_rung``, ``answer_recheck``). A drift below the floor (20 %) is not called,
  and where it lands on the doubling that decides the answer it moves the answer all the same: a step 20 %
  slower from c=128 turns the doubling 64 -> 128's +13 % into -6 %, a plateau at 64. So the load generator also
  measures the rung its walk stopped at (``knee_rung``: the lower rung of the first doubling decided a plateau,
  the lane's top rung where none was) again at the lane's end, and the doubling from it is decided twice:
  against the rung's first window and against its re-measure, which was taken on the node as it is after the
  doubling's upper rung (an A-B-A design, the classic answer to drift between the arms). Where the node was
  steady, both windows measure one rung and the two decisions agree; where a change landed between the rung's
  first window and the doubling's upper rung, the re-measure sees the node as the upper rung did and the
  decisions disagree: the answer is then not settled but ``undecided``, with both gains said
  (``answer_recheck``), and the walk from that rung up is taken against its re-measure
  (``answer.analysis``), never a plateau the slowdown made. ``bench/drift_power.py``, 400 walks: a 20 %
  step at a random rung moved the answer in 31 % of walks before, in none after.

A drifted lane's plateau is not blamed on concurrency: the recommender (``answer.analysis``) withholds
the answer (``policy.on_drift = "withhold"``, the default: status ``degraded``, the reason naming the drift)
or keeps it with the drift said (``"report"``); the tune (``satbench.tune``) never compares a candidate whose
walk drifted with the others.

Warm-up: every rung's users run ``warmup_s`` before its window opens (``loadgen.step``), so the first rung is
never measured on a server's first requests; a first rung that was measured on a cold server all the same
(weights still paging in, caches empty) is measured slower than its re-measure at the lane's end, and the
two-sided test calls that drift too ("faster by ..."), so a cold first rung cannot pass unseen.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from satbench.core.figures import StepFigures
from satbench.core.statistics import (
    doubling_decision,
    gain_interval,
    gain_per_doubling,
    t_quantile,
    welch_difference,
)

__all__ = ["Drift", "answer_recheck", "knee_rung", "lane_drift", "reference_drift", "rung_drift"]


@dataclass(frozen=True, slots=True)
class Drift:
    """What a drift check found. ``ratio`` is the node's speed after over before (throughput at the reference
    rung, or the doubling's throughput ratio rung by rung), ``interval`` its interval at the confidence the
    check used; ``drifted`` where the interval lies beyond the practical floor. ``between`` names when: the
    two rungs (concurrencies) the change happened between; ``how`` says which check (``reference`` or
    ``rung``). ``decode_step_s`` is the runtime's decode step before and after, where the stream showed it."""

    how: str
    concurrency: int
    ratio: float
    interval: tuple[float, float] | None
    drifted: bool
    between: tuple[int, int]
    decode_step_s: tuple[float | None, float | None] = (None, None)

    def said(self) -> str:
        span = "" if self.interval is None else f" (interval {self.interval[0]:.2f}-{self.interval[1]:.2f})"
        steps = ""
        if self.decode_step_s[0] is not None and self.decode_step_s[1] is not None:
            steps = f"; decode step {self.decode_step_s[0] * 1000:.1f} -> {self.decode_step_s[1] * 1000:.1f} ms"
        if self.how == "reference":
            verdict = (f"the node changed speed between c={self.between[0]} and c={self.between[1]}"
                       if self.drifted else "no drift beyond the floor")
            return (f"c={self.concurrency} re-measured at the lane's end gave {self.ratio:.2f}x its first "
                    f"throughput{span}: {verdict}{steps}")
        return (f"the node slowed between c={self.between[0]} and c={self.between[1]}: doubling the batch "
                f"kept {self.ratio:.2f}x the throughput{span}, and its decode step grew by more than its batch{steps}")


def _beyond(interval: tuple[float, float], floor: float) -> bool:
    return interval[1] < 1 / (1 + floor) or interval[0] > 1 + floor


def reference_drift(first: StepFigures, again: StepFigures, confidence: float, floor: float) -> Drift | None:
    """The reference re-measure's test (module docstring); ``None`` where either window has no usable
    throughput or no standard error (nothing to test)."""
    t1, t2 = first.throughput_tok_s, again.throughput_tok_s
    if not (first.valid and again.valid) or t1 <= 0 or t2 <= 0:
        return None
    se1, se2, d1, d2 = first.throughput_se_tok_s, again.throughput_se_tok_s, first.throughput_dof, again.throughput_dof
    ratio = t2 / t1
    if se1 is None or se2 is None or d1 is None or d2 is None:
        return None
    se, dof = welch_difference(se1 / t1, d1, se2 / t2, d2)
    half = t_quantile(confidence, max(dof, 1.0)) * se
    interval = (ratio * math.exp(-half), ratio * math.exp(half))
    return Drift("reference", first.concurrency, ratio, interval, _beyond(interval, floor),
                 (first.concurrency, again.concurrency), (first.decode_step_s, again.decode_step_s))


def _step_outgrew_batch(a: StepFigures, b: StepFigures) -> bool:
    """The decode-only step of rung ``b`` took longer than ``b / a`` of rung ``a``'s: more than running the
    larger batch as several of the smaller one would (module docstring). False without both steps."""
    if a.decode_step_s is None or b.decode_step_s is None or a.decode_step_s <= 0:
        return False
    return b.decode_step_s / a.decode_step_s > b.concurrency / a.concurrency


def rung_drift(steps: Sequence[StepFigures], floor: float) -> Drift | None:
    """The first doubling that lost throughput beyond the floor while its larger rung admitted every request
    and its decode step outgrew its batch (module docstring), or ``None``. ``steps`` are the lane's usable
    rungs in increasing concurrency, their throughput intervals already at the policy's confidence."""
    bound = 1 / (1 + floor) - 1
    for a, b in itertools.pairwise(steps):
        if b.concurrency != 2 * a.concurrency or b.queued_requests not in (None, 0):
            continue
        interval = gain_interval(a.concurrency, a.throughput_ci_tok_s, b.concurrency, b.throughput_ci_tok_s)
        if interval is None or interval[1] >= bound or not _step_outgrew_batch(a, b):
            continue
        ratio = 1 + gain_per_doubling(a.concurrency, a.throughput_tok_s, b.concurrency, b.throughput_tok_s)
        return Drift("rung", b.concurrency, ratio, (1 + interval[0], 1 + interval[1]), True,
                     (a.concurrency, b.concurrency), (a.decode_step_s, b.decode_step_s))
    return None


def lane_drift(steps: Sequence[StepFigures], references: Sequence[StepFigures], confidence: float,
               floor: float) -> Drift | None:
    """The lane's drift verdict: the reference re-measure of its lowest rung where there is one (a drifted
    re-measure wins; a steady one is kept and said), else the rung-by-rung check. ``steps`` are the usable
    ladder rungs in increasing concurrency at ``confidence``."""
    if not steps:
        return None
    by_c = {s.concurrency: s for s in steps}
    checked = [d for r in references if r.concurrency in by_c
               and (d := reference_drift(by_c[r.concurrency], r, confidence, floor)) is not None]
    drifted = next((d for d in checked if d.drifted), None)
    by_rung = rung_drift(steps, floor)
    if drifted is not None:  # when: between the rungs the rung check names, else somewhere in the whole walk
        when = by_rung.between if by_rung is not None else (steps[0].concurrency, steps[-1].concurrency)
        return dataclasses.replace(drifted, between=when)
    if by_rung is not None:
        return by_rung
    return checked[0] if checked else None


def knee_rung(steps: Sequence[StepFigures], min_gain: float) -> int | None:
    """The rung the walk stopped at, as the load generator sees it (module docstring): the lower rung of the first
    doubling between valid rungs decided a plateau (its gain interval below ``min_gain``), else the top valid
    rung; ``None`` without a valid rung."""
    valid = sorted((s for s in steps if s.valid and not s.drift_reference), key=lambda s: s.concurrency)
    for a, b in itertools.pairwise(valid):
        if b.concurrency != 2 * a.concurrency:
            continue
        gain = gain_per_doubling(a.concurrency, a.throughput_tok_s, b.concurrency, b.throughput_tok_s)
        interval = gain_interval(a.concurrency, a.throughput_ci_tok_s, b.concurrency, b.throughput_ci_tok_s)
        if doubling_decision(gain, interval, min_gain) == "plateau":
            return a.concurrency
    return valid[-1].concurrency if valid else None


def answer_recheck(steps: Sequence[StepFigures], references: Sequence[StepFigures], answer: int,
                   min_gain: float) -> str | None:
    """Where the doubling from the answer's rung was decided a plateau against the rung's first window but not
    against its re-measure (module docstring), why the answer is not settled; else ``None`` (no re-measure of
    it, no doubling above it, or the two decisions agree). ``steps``: the usable rungs at the policy's
    confidence; ``references``: the re-measures at the same confidence."""
    by_c = {s.concurrency: s for s in steps}
    first, upper = by_c.get(answer), by_c.get(2 * answer)
    again = next((r for r in references if r.concurrency == answer and r.valid), None)
    if first is None or upper is None or again is None:
        return None

    def decided(low: StepFigures) -> tuple[str, float, tuple[float, float] | None]:
        gain = gain_per_doubling(answer, low.throughput_tok_s, upper.concurrency, upper.throughput_tok_s)
        interval = gain_interval(answer, low.throughput_ci_tok_s, upper.concurrency, upper.throughput_ci_tok_s)
        return doubling_decision(gain, interval, min_gain), gain, interval

    was, now = decided(first), decided(again)
    if was[0] != "plateau" or now[0] == "plateau":
        return None

    def said(d: tuple[str, float, tuple[float, float] | None]) -> str:
        span = "" if d[2] is None else f" [{d[2][0]:+.1%}, {d[2][1]:+.1%}]"
        return f"{d[1]:+.1%}{span}"

    return (f"c={answer} re-measured at the lane's end gave {again.throughput_tok_s / first.throughput_tok_s:.2f}x "
            f"its first throughput: the doubling to c={upper.concurrency} gains {said(was)} against the first "
            f"window and {said(now)} against the re-measure, so the node's speed moved between them and the "
            f"plateau at c={answer} is not settled")
