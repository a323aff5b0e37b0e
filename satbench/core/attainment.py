"""A rate rung's verdict: is the rate sustained within its objectives, decided from an honest interval.

The figure is the *attainment*: the share of the requests meant to be sent in the window that attained every
per-request objective (``core.objectives``). Near a lane's capacity it is far from a sum of independent
trials: a burst of arrivals queues a run of requests that all miss, and the next quiet spell lets a run all
attain, so the misses come in clumps whose length grows without bound as the rate nears capacity (a queue's
relaxation time grows as 1 / (1 - rho)^2; Kingman's heavy-traffic limit). A window then holds a handful of
such episodes, or none: its share is a skewed sum of few independent pieces, most windows see fewer misses
than the long run and a few see many. Measured on stationary 90 s slices of long engine runs (the audit's),
a binomial interval, and batch means of the share over 64 short bins with a lag-one correction (this
module before), held the long-run attainment in 23 of 90 windows at Poisson arrivals and 71 of 89 at gamma
cv 4, and lay wholly above it in 67 of 90: a window with no miss at all (58 of 90) has no spread to measure,
and one episode in ten batches is not ten independent ones. More batches do not help (20 or regeneration
cycles covered no better, ``bench/attainment_coverage.py``): what is missing is the number of independent
stretches the window holds, which the misses alone cannot show when there are few or none.

``attainment_estimate`` therefore counts that number from the waits. A request misses because its wait
(TTFT from its intended send) crossed the deadline; the waits are a continuous series of the same queue,
measured for every request, clean windows too, and their correlation time is the queue's. The estimate is
Wilson's score interval (Wilson 1927) on the *effective* number of requests, with a Student quantile for
that count: ``n_eff = min(n, n_w, n_b, n_i)``. ``n_w = n (1 - r) / (1 + r)`` with ``r`` the lag-one
autocorrelation of the waits in send order (an AR(1) long-run variance, the house's
``core.statistics.batch_mean_estimate`` taken over single requests: Fishman 1978, Law and Kelton,
*Simulation Modeling and Analysis* ch. 9.5, ``r`` corrected for its small-sample bias and raised by half its
standard error; Thiebaux and Zwiers 1984 for the effective sample size of a correlated series, Kish's design
effect). ``n_b`` is the waits' variance over the squared standard error of their batch means over bins of
intended send time (about four requests a bin, 64 bins at most, the same AR(1) correction over the bins):
a queue's memory is longer than one AR(1) lag shows, and with ``n_w`` alone the 720 s windows at cv 1 near
the target were covered 87 % of the time. ``n_i = p (1 - p) / se^2`` is the same design effect read from the
share itself (batch means of the per-request indicator over the same bins), where the window holds misses
to read it from. The interval is the hull of that score
interval and the batch-means one (share +- z se), both at the normal quantile: the score interval inverts
the normal test, and a Student quantile for ``n_eff - 1`` degrees of freedom, tried, turned the rungs near
saturation (``n_eff`` about 2: the whole window one excursion of the queue) into [0, 1] without covering
more anywhere (``bench/attainment_coverage.py``: every case at or above 90 % either way). ``n_eff - 1`` is
stored as the estimate's ``dof``, so the figures carry it and the recommender rebuilds the interval at its
own confidence. Where the waits are independent ``n_eff`` is the request count and the interval is Wilson's.
Measured coverage of a nominal 95 % (``bench/attainment_coverage.py``; truth from long runs of
``testkit.open_engine``) is in that script's docstring.

``rate_verdict`` judges a rate from that interval, the backlog's growth (``core.step_figures.backlog_growth``)
and the lane's closed-loop capacity (``capacity_bound``):

- ``fail`` where the rate is above the capacity the closed ladder measured (the most requests/s a rung at or
  above the slot count served: open traffic cannot be served faster than with every slot busy, and a rate
  a few per cent above it grows its queue too slowly for any session's window to see), or where the whole
  attainment interval lies below the target;
- ``pass`` where the whole interval lies at or above the target and the backlog did not grow significantly;
- ``undecided`` otherwise, and where the backlog grew significantly before the window's last look (a burst
  grows it for a while; a rate above capacity keeps growing it); the load generator then measures on
  (``loadgen.open_step``: looks at 1.5x growing lengths up to ``arrival.max_window_s``), and a finished
  window (``final=True``) fails on a significant growth; where its interval still straddles the target it
  is *undecided* (``decided=False``, with its reason), its point share given as the verdict for the search
  to steer by (the best estimate there is, where the interval says the rate sits near the boundary), and
  the rate answer's interval (``answer.rate_analysis``) carries the doubt.

The load generator's looks, its judgment of the finished rung (``loadgen.rates.judge``) and the
recommender's (``answer.rate_analysis``) all call this one function.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

from satbench.core.backlog import backlog_growth, pass_growth
from satbench.core.figures import StepFigures
from satbench.core.statistics import MeanEstimate, batch_mean_estimate, t_quantile, wilson_interval

__all__ = ["EARLY_LOOK_CONFIDENCE", "AttainmentEstimate", "RateVerdict", "attainment_estimate", "capacity_bound",
           "rate_look", "rate_verdict", "score_interval", "step_attainment", "step_confidence", "step_growth",
           "step_steady", "warmup_cut"]

MAX_BINS = 64
_NORMAL_DOF = 1e12  # Student's quantile this far out is the normal one
PER_BIN = 4.0
GROWTH_MARGIN = 0.1  # a look passes a rate only where its backlog's growth is shown below this share of it
# A look before the window's limit decides at three standard errors (Haybittle 1971, Peto et al. 1976): a rung
# looked at up to seven times and stopped at the first look whose 95 % interval cleared the target reported
# intervals that held the long-run attainment in 88.7 % of the datasheet's rungs (416, seed 1), and 91.8 % where
# every rung ran to its limit; the limit's look keeps the nominal level, and the early looks add at most
# 0.27 % each to the chance that a stop was wrong
EARLY_LOOK_CONFIDENCE = 0.9973


@dataclass(frozen=True, slots=True)
class AttainmentEstimate:
    """``attained`` of ``judged`` requests; ``se`` the batch-means standard error of their share and ``dof`` the
    effective number of independent requests less one (module docstring). Without ``dof``: independent."""

    attained: int
    judged: int
    se: float | None = None
    dof: float | None = None

    @property
    def share(self) -> float | None:
        return None if self.judged <= 0 else self.attained / self.judged

    @property
    def effective(self) -> float | None:
        """The effective number of independent requests (``None`` without any): ``dof + 1``, at most the
        requests judged for a stationary window (``attainment_estimate``); a trace rung's, read pass against pass
        (``core.passes.paired_attainment``), can exceed them, where the outcomes vary less between passes than
        coin flips would."""
        if self.judged <= 0:
            return None
        return float(self.judged) if self.dof is None or self.judged == 1 else self.dof + 1.0

    def interval(self, confidence: float = 0.95) -> tuple[float, float] | None:
        """Wilson's score interval at the effective count, hulled with the batch-means interval, clipped to
        [0, 1]; exactly Wilson's without ``dof`` (module docstring)."""
        share, count = self.share, self.effective
        if share is None or count is None:
            return None
        if self.dof is None:
            return wilson_interval(self.attained, self.judged, confidence)
        q = t_quantile(confidence, _NORMAL_DOF)
        low, high = score_interval(share, count, q)
        if self.se is not None:
            low, high = min(low, share - q * self.se), max(high, share + q * self.se)
        return max(0.0, low), min(1.0, high)


def score_interval(share: float, count: float, q: float) -> tuple[float, float]:
    """Wilson's score interval of ``share`` over ``count`` (not necessarily whole) trials at quantile ``q``."""
    denom = 1 + q * q / count
    center = (share + q * q / (2 * count)) / denom
    half = q * math.sqrt(max(0.0, share * (1 - share)) / count + q * q / (4 * count * count)) / denom
    return center - half, center + half


def attainment_estimate(outcomes: Sequence[tuple[float, bool]], start: float, end: float,
                        waits: Sequence[tuple[float, float]] | None = None) -> AttainmentEstimate:
    """The attainment of ``outcomes`` (each request's intended send time and whether it attained) meant to be
    sent within ``[start, end]``; ``waits`` (each request's intended send time and its wait from it to the
    first token, or to its end or the look without one) give the effective count (module docstring)."""
    mine = [(t, ok) for t, ok in outcomes if start <= t <= end]
    judged = len(mine)
    attained = sum(1 for _, ok in mine if ok)
    length = end - start
    if judged == 0 or length <= 0:
        return AttainmentEstimate(attained, judged)
    share = attained / judged
    effective = float(judged)
    se = None
    bins = max(1, min(MAX_BINS, int(judged / PER_BIN)))
    width = length / bins
    counts = [0] * bins
    hits = [0] * bins
    for t, ok in mine:
        i = min(bins - 1, int((t - start) / width))
        counts[i] += 1
        hits[i] += ok
    mean_count = judged / bins
    residuals = [(h - share * n) / mean_count for h, n in zip(hits, counts, strict=True)]
    estimate = batch_mean_estimate(residuals)
    if estimate is not None:
        se = estimate.se
        if se > 0 and 0 < share < 1:
            effective = min(effective, share * (1 - share) / (se * se))
    if waits is not None:
        timed = sorted((t, w) for t, w in waits if start <= t <= end and math.isfinite(w))
        series = [w for _, w in timed]
        serial = batch_mean_estimate(series) if len(set(series)) > 1 else None  # equal waits tell no correlation
        if serial is not None:
            effective = min(effective, serial.dof + 1.0)
        effective = min(effective, _binned_effective(timed, start, width, bins))
    if se is None and waits is None:
        return AttainmentEstimate(attained, judged)
    return AttainmentEstimate(attained, judged, se, max(1.0, effective - 1.0))


def _binned_effective(timed: Sequence[tuple[float, float]], start: float, width: float, bins: int) -> float:
    """The waits' effective count read from their batch means over the bins (``inf`` where it cannot be): the
    request-level AR(1) misses a correlation that lasts longer than its lag one shows (module docstring)."""
    n = len(timed)
    if n < 3 or len({w for _, w in timed}) < 2:  # equal waits tell no correlation (and their variance is rounding)
        return math.inf
    mean = sum(w for _, w in timed) / n
    variance = sum((w - mean) ** 2 for _, w in timed) / (n - 1)
    if variance <= 0:
        return math.inf
    sums = [0.0] * bins
    counts = [0] * bins
    for t, w in timed:
        i = min(bins - 1, int((t - start) / width))
        sums[i] += w
        counts[i] += 1
    estimate = batch_mean_estimate([(s - mean * c) / (n / bins) for s, c in zip(sums, counts, strict=True)])
    if estimate is None or estimate.se <= 0:
        return math.inf
    return max(1.0, variance / (estimate.se * estimate.se))


def capacity_bound(closed: Sequence[tuple[int, float]], slots: int | None) -> float | None:
    """The most requests/s the closed ladder served with every slot busy: of its valid rungs ``(concurrency,
    requests_per_s)`` at or above ``slots``, the one that served most. ``None`` where the slots are unknown or
    no rung reached them (the ladder did not saturate: what it served is no bound)."""
    if not slots:
        return None
    return max((rps for c, rps in closed if c >= slots and rps > 0), default=None)


@dataclass(frozen=True, slots=True)
class RateVerdict:
    verdict: str  # "pass", "fail" or "undecided"
    sustained: bool | None
    interval: tuple[float, float] | None
    reason: str
    start: float | None = None  # a look's: where its warm-up cut put the window's start
    steady: bool | None = None  # a look's: whether the waits had settled (warmup_cut)
    decided: bool = True  # False: a finished window whose interval straddled the target (judged by its point)


def rate_verdict(rate: float, attainment: AttainmentEstimate | None, growth: MeanEstimate | None, *,
                 target: float, confidence: float = 0.95, capacity_rps: float | None = None,
                 final: bool = False, steady: bool | None = None) -> RateVerdict:
    """A rate's verdict (module docstring); ``final`` judges an undecided window by its point share.
    ``steady=False``: the waits had not settled (``warmup_cut``)."""
    interval = None if attainment is None else attainment.interval(confidence)
    if steady is False and not final:
        return RateVerdict("undecided", None, interval, "the waits from the intended send still climbed in the "
                                                        "window's second half: measuring on")
    grew = None
    if growth is not None:
        grew = growth.interval(confidence)[0] > 0.0
    if capacity_rps is not None and rate > capacity_rps * (1 + 1e-4):  # a rate at capacity, rounded, is not above
        return RateVerdict("fail", False, interval, f"above the {capacity_rps:.3g} req/s the closed ladder served "
                                                    "with every slot busy")
    if grew:
        assert growth is not None
        said = f"the backlog grew {growth.mean:+.2f} req/s"
        if final and growth.mean > GROWTH_MARGIN * rate:
            return RateVerdict("fail", False, interval, said + f", more than {GROWTH_MARGIN:.0%} of the rate")
        if not final:
            return RateVerdict("undecided", None, interval, said + ": measuring on (a burst grows it for a while)")
    sustained = None if growth is None else not grew or growth.mean <= GROWTH_MARGIN * rate
    if interval is None or attainment is None or attainment.share is None:
        return RateVerdict("undecided" if not final else ("pass" if sustained else "undecided"), sustained, None,
                           "no request judged")
    share = attainment.share
    said = f"attainment {share:.1%} [{interval[0]:.1%}, {interval[1]:.1%}] of {attainment.judged}"
    if interval[1] < target:
        return RateVerdict("fail", sustained, interval, said + f" < {target:.0%}")
    if interval[0] >= target:
        bounded = growth is None or growth.interval(confidence)[1] <= GROWTH_MARGIN * rate
        if bounded or final:
            return RateVerdict("pass", sustained, interval, said + f" >= {target:.0%}")
        assert growth is not None
        return RateVerdict("undecided", sustained, interval, said + f" >= {target:.0%}, but the backlog's growth "
                           f"({growth.mean:+.2f} req/s) is not yet shown below {GROWTH_MARGIN:.0%} of the rate")
    if not final:
        return RateVerdict("undecided", sustained, interval, said + f" straddles {target:.0%}")
    return RateVerdict("pass" if share >= target else "fail", sustained, interval,
                       said + f" straddles {target:.0%} at the window's limit: undecided (its point share "
                       f"{'passes' if share >= target else 'fails'} it for the search)", decided=False)


def rate_look(done: Sequence[tuple[float, float, float, bool]], pending: Sequence[tuple[float, float, bool]],
              start: float, now: float, rate: float, *, target: float, confidence: float = 0.95,
              capacity_rps: float | None = None, cut: bool = True, period: float | None = None,
              early: bool = False) -> RateVerdict:
    """A look at a rate rung still running. ``done`` holds each ended request of the rung (its warm-up too) as
    ``(intended send, wait, end, attained)``, ``pending`` each one still in flight as ``(intended send, wait
    so far, already missed)`` (its TTFT deadline passed without a token); the wait is to the first token, or
    to the end without one. The warm-up cut (``warmup_cut``) moves the window's start past the idle start;
    the attainment counts the requests meant to be sent before the oldest pending one not yet missed (a later
    request that ended is a short one: counting it alone would favour short requests), the backlog every one.
    The verdict's ``start`` is where the window began. ``cut=False`` (a trace rung: its schedule is not
    stationary, and its warm-up is traffic before the window, ``loadgen.trace_step``) keeps the window from
    ``start`` and asks nothing of its steadiness (``steady`` ``None``); with the schedule's ``period`` (a trace
    rung's pass) the backlog's growth is ``pass_growth``'s, not yet told before the window holds a pass.
    ``early``: a look before the window's limit, which ends the rung where it decides: it decides at
    ``EARLY_LOOK_CONFIDENCE`` (Haybittle-Peto), so that stopping at the first look that clears the target does
    not turn the reported interval's 95 % into less."""
    settled = warmup_cut([(t, w) for t, w, _, _ in done] + [(t, w) for t, w, _ in pending]) if cut \
        else WarmupCut(None, None)
    begin = max(start, settled.at) if settled.at is not None and settled.steady else start
    horizon = min([t for t, _, missed in pending if not missed and t >= begin] + [now])
    outcomes = [(t, ok) for t, _, _, ok in done] + [(t, False) for t, _, missed in pending if missed]
    waits = [(t, w) for t, w, _, _ in done] + [(t, w) for t, w, _ in pending]
    estimate = attainment_estimate(outcomes, begin, horizon, waits)
    if period is None:
        growth = backlog_growth([(t, e) for t, _, e, _ in done if t >= begin]
                                + [(t, math.inf) for t, _, _ in pending if t >= begin], begin, now)
    else:  # the pass before the window's is part of the comparison
        growth = pass_growth([(t, e) for t, _, e, _ in done] + [(t, math.inf) for t, _, _ in pending], begin, now,
                             period)
    verdict = rate_verdict(rate, estimate, growth, target=target,
                           confidence=max(confidence, EARLY_LOOK_CONFIDENCE) if early else confidence,
                           capacity_rps=capacity_rps, steady=settled.steady)
    return dataclasses.replace(verdict, start=begin, steady=settled.steady)


def step_attainment(step: StepFigures) -> AttainmentEstimate | None:
    """A finished rung's attainment as its figures carry it (``None`` without objectives)."""
    if step.judged_requests is None or step.attained_requests is None:
        return None
    return AttainmentEstimate(step.attained_requests, step.judged_requests, step.attainment_se, step.attainment_dof)


def step_confidence(step: StepFigures, confidence: float) -> float:
    """The confidence a finished rung's attainment interval is stated at: ``confidence``, or the early looks'
    (``EARLY_LOOK_CONFIDENCE``) where a look before the window's limit ended it. A rung stopped at the first of
    several looks whose interval cleared the target is a group-sequential trial stopped at an interim look, and
    the interval that holds the truth at the nominal rate there is the repeated confidence interval at that look's
    boundary (Jennison and Turnbull 1989; *Group Sequential Methods*, 2000, ch. 9), the look's own three
    standard errors: the datasheet's early-stopped rate rungs held their long-run attainment in 85.3 % of 415 at
    95 %, 95.4 % at the look's boundary."""
    return max(confidence, EARLY_LOOK_CONFIDENCE) if step.decided_early else confidence


def step_steady(step: StepFigures) -> bool | None:
    """Whether a finished open rung's waits settled (``None``: not told)."""
    return None if step.waits_settled is None else bool(step.waits_settled)


def step_growth(step: StepFigures) -> MeanEstimate | None:
    """A finished rung's backlog growth as its figures carry it (``None`` for a closed rung)."""
    if step.backlog_growth_rps is None or step.backlog_growth_se is None or step.backlog_growth_dof is None:
        return None
    return MeanEstimate(step.backlog_growth_rps, step.backlog_growth_se, step.backlog_growth_dof)


MSER_BATCH = 5
MSER_MIN_BATCHES = 10


@dataclass(frozen=True, slots=True)
class WarmupCut:
    """Where the initial transient ends (``at``: the intended send time of the first request kept) and whether
    the series settled within its first half (``steady``); ``None`` fields: too few requests to tell."""

    at: float | None
    steady: bool | None


def warmup_cut(waits: Sequence[tuple[float, float]]) -> WarmupCut:
    """MSER-5 (White 1997; Hoad, Robinson and Davies 2010, the warm-up rule their comparison recommends) over
    each request's wait from its intended send time, in the order meant: the batches of five are cut where
    the standard error of the mean of what remains is least. A rung that starts from an idle server begins
    below its steady state (an empty queue); the cut drops that start. Where the least lies in the second half
    of the series the waits had not settled by the end (still climbing: a queue that grows, or one whose
    relaxation is longer than the window): not steady."""
    ordered = sorted(waits)
    n = len(ordered) // MSER_BATCH
    if n < MSER_MIN_BATCHES:
        return WarmupCut(None, None)
    ys = [sum(w for _, w in ordered[i * MSER_BATCH:(i + 1) * MSER_BATCH]) / MSER_BATCH for i in range(n)]
    best, best_d = math.inf, 0
    suffix_sum = suffix_sq = 0.0
    stats = [0.0] * n
    for d in range(n - 1, -1, -1):
        suffix_sum += ys[d]
        suffix_sq += ys[d] * ys[d]
        m = n - d
        stats[d] = (suffix_sq - suffix_sum * suffix_sum / m) / (m * m)
    for d in range(0, n - MSER_MIN_BATCHES // 2 + 1):
        if stats[d] < best - 1e-15:
            best, best_d = stats[d], d
    return WarmupCut(ordered[best_d * MSER_BATCH][0], best_d <= n // 2)
