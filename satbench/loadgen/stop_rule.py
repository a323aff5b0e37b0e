"""When a closed-loop rung's window may end: the pure stop rule ``loadgen.step`` asks at each wake-up.

Stable: the 95% interval of the window's batch rates (``core.statistics.autocorrelated_batch_ci``, the step's
own interval), over tokens that are certainly all known, is within ``ci_rel_bound`` of its mean.

Sequential measuring: given the rung below (``reference``) and the gain a doubling must buy (``decide_gain``),
a window whose gain over that rung is *undecided* (its interval straddles the gain:
``core.statistics.doubling_decision``) goes on, to one and a half times its length and again, up to
``decide_max_window_s``, and ends at the first of those looks where the gain is decided (or where the window
the cap allows could not decide it either: a futility rule, ``worth_deciding``). A few looks at growing
lengths keep the error of peeking small (a group-sequential design; Pocock 1977), and certainty is bought only
where the interval straddles the threshold.

Held on (``held``): a rung whose window reaches ``max_window_s`` too thin (fewer than ``min_requests``) or too
unsteady to use (its throughput interval wider than ``usable_ci_rel`` of its mean, the recommender policy's
``max_throughput_ci_ratio``) would be given up, and where it is the lowest rung the lane gets no answer at all.
It goes on, looked at again each time its window has doubled, up to ``decide_max_window_s``, and ends at the
first look where it is usable (or at the cap). A rung already usable at ``max_window_s`` ends there, as before:
the extension costs time only where the rung would otherwise be lost.

``WindowEnd`` puts the three together: the state of one window's looks, asked at each wake-up with the
elapsed time and the window's figures so far, answering whether the window ends. ``loadgen.step`` asks it on
the wall clock; the accuracy datasheet's harness asks the same object in virtual time, so what it measures is
the rule the load generator runs, not a copy of it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from satbench.core.figures import StepFigures
from satbench.core.statistics import (
    autocorrelated_batch_ci,
    batch_mean_estimate,
    doubling_decision,
    gain_interval,
    gain_per_doubling,
    relative_half_width,
)
from satbench.core.step_figures import START_BATCHES

__all__ = ["WindowEnd", "as_final_batches", "decide", "deciding", "held", "stable", "worth_deciding"]


def stable(rates: Sequence[float], ci_rel_bound: float) -> bool:
    """The window's throughput interval within ``ci_rel_bound`` of its mean."""
    if len(rates) < 2:
        return False
    mean = sum(rates) / len(rates)
    ci = autocorrelated_batch_ci(list(rates))
    return ci is not None and relative_half_width(ci, mean) <= ci_rel_bound


def as_final_batches(rates: Sequence[float], bin_s: float, elapsed_s: float, batch_s: float | None) -> list[float]:
    """The live bins' rates (``bin_s`` each) merged into the batches the step's own interval will be computed on
    if the window ends now (``core.step_figures.throughput_estimate``: ``batch_s`` where set, else a
    ``START_BATCHES``-th of the window): runs of the nearest whole number of bins, a trailing part run left out.
    Why: the usability the window is held for is the final figure's, and the batch-means interval depends on the
    batches' count (its lag-one correction is wider with fewer), so bins twice as fine as the final's read a
    rung usable that its figures then were not (28 % against 25 % allowed, a real lane's lowest rung)."""
    size = batch_s if batch_s and batch_s > 0 else elapsed_s / START_BATCHES
    m = max(1, round(size / bin_s)) if bin_s > 0 else 1
    return [sum(rates[i:i + m]) / m for i in range(0, len(rates) - m + 1, m)]


def held(rates: Sequence[float], requests: int, min_requests: int, usable_ci_rel: float | None) -> str | None:
    """Why a window at its look is too thin or too unsteady to use (module docstring), ``None`` when it is usable
    or nothing is held (``usable_ci_rel`` unset)."""
    if usable_ci_rel is None:
        return None
    if requests < min_requests:
        return f"{requests} requests, {min_requests} needed"
    if len(rates) < 2:
        return "no throughput interval yet"
    mean = sum(rates) / len(rates)
    ci = autocorrelated_batch_ci(list(rates))
    if ci is None or mean <= 0:
        return "no throughput interval yet"
    ratio = relative_half_width(ci, mean)
    if ratio > usable_ci_rel:
        return f"throughput interval {ratio:.0%} of the mean, {usable_ci_rel:.0%} usable"
    return None


def deciding(reference: StepFigures | None, concurrency: int, decide_gain: float | None) -> bool:
    """Whether this rung's window is to decide its gain over ``reference`` (module docstring)."""
    return (reference is not None and reference.throughput_ci_tok_s is not None and decide_gain is not None
            and reference.concurrency < concurrency and reference.throughput_tok_s > 0)


def decide(rates: Sequence[float], reference: StepFigures, concurrency: int, gain_min: float,
           elapsed_s: float) -> tuple[str, str]:
    """``pays``, ``plateau`` or ``undecided``: this rung's gain over ``reference`` so far, and the look's words
    for the window's notes."""
    assert reference.throughput_ci_tok_s is not None
    estimate = batch_mean_estimate(list(rates))
    if estimate is None or estimate.mean <= 0:
        return "undecided", f"{elapsed_s:.0f} s: undecided (no interval yet)"
    gain = gain_per_doubling(reference.concurrency, reference.throughput_tok_s, concurrency, estimate.mean)
    interval = gain_interval(reference.concurrency, reference.throughput_ci_tok_s, concurrency,
                             estimate.interval())
    decision = doubling_decision(gain, interval, gain_min)
    said = "" if interval is None else f" [{interval[0]:+.1%}, {interval[1]:+.1%}]"
    return decision, f"{elapsed_s:.0f} s: {decision} ({gain:+.1%}{said})"


def worth_deciding(rates: Sequence[float], reference: StepFigures, concurrency: int, gain_min: float,
                   elapsed_s: float, cap_s: float) -> bool:
    """Could measuring on, up to ``cap_s``, still decide the gain? Not when the gain's interval by then (this
    rung's half-width shrinking as one over the square root of the window's length) would still straddle the
    policy's gain with the measured gain within half its half-width of it (a gain at the threshold, which no
    cap settles), nor when the rung below alone makes it straddle (a futility rule)."""
    assert reference.throughput_ci_tok_s is not None
    estimate = batch_mean_estimate(list(rates))
    if estimate is None or estimate.mean <= 0:
        return True
    elapsed = max(1e-9, elapsed_s)
    low, high = estimate.interval()
    half = (high - low) / 2 * math.sqrt(min(1.0, elapsed / cap_s))
    projected = (estimate.mean - half, estimate.mean + half)
    ref_c, ref_ci = reference.concurrency, reference.throughput_ci_tok_s
    gain = gain_per_doubling(ref_c, reference.throughput_tok_s, concurrency, estimate.mean)
    interval = gain_interval(ref_c, ref_ci, concurrency, projected)
    exact = gain_interval(ref_c, ref_ci, concurrency, (estimate.mean, estimate.mean))
    if interval is None or exact is None or doubling_decision(gain, interval, gain_min) != "undecided":
        return True
    if doubling_decision(gain, exact, gain_min) == "undecided":
        return False  # the rung below alone straddles it
    return abs(gain - gain_min) > (interval[1] - interval[0]) / 4


@dataclass(slots=True)
class WindowEnd:
    """One closed rung's window: when it ends (module docstring). ``min_s``, ``max_s``: the ladder's window
    bounds; ``decide_cap_s``: the longest an undecided gain is measured on (``decide_max_window_s`` where it is
    deciding, else ``max_s``); ``cap_s``: the longest the window may run (``hold_max_window_s`` too where it is
    holding); ``deciding``: a gain over the rung below is to be decided; ``holding``: a rung not yet usable at
    ``max_s`` goes on. ``decision`` is the last look's; ``held_looks`` say each look at which the window was
    too thin or too unsteady to use."""

    min_s: float
    max_s: float
    decide_cap_s: float
    cap_s: float
    deciding: bool
    holding: bool
    decision: str | None = None
    held_looks: list[str] = field(default_factory=list)
    _look_s: float = 0.0  # the next length at which an undecided gain is looked at again (1.5x)
    _held_s: float = 0.0  # the next length at which a rung not yet usable is looked at again (doubling)
    _capped: bool = False  # the gain was looked at at its cap: again only with the rung's next look

    def __post_init__(self) -> None:
        self._look_s, self._held_s = self.min_s, self.max_s

    @classmethod
    def of(cls, min_window_s: float, max_window_s: float, decide_max_window_s: float, deciding: bool,
           usable_ci_rel: float | None, hold_max_window_s: float | None = None) -> WindowEnd:
        holding = usable_ci_rel is not None
        decide_cap = max(max_window_s, decide_max_window_s) if deciding else max_window_s
        hold = decide_max_window_s if hold_max_window_s is None else hold_max_window_s
        cap = max(decide_cap, hold, max_window_s) if holding else decide_cap
        return cls(min_window_s, max_window_s, decide_cap, cap, deciding, holding)

    def ends(self, elapsed_s: float, enough: bool, stable_now: Callable[[], bool], decide_now: Callable[[], str],
             worth: Callable[[], bool], held_now: Callable[[], str | None]) -> bool:
        """Does the window end at ``elapsed_s``? ``enough``: its minimum length and requests are in;
        ``stable_now``: its throughput interval is within the bound (``stable``); ``decide_now``: the gain's
        decision so far (``decide``); ``worth``: measuring on could decide it (``worth_deciding``);
        ``held_now``: why it is not yet usable, or ``None`` (``held``). Each is asked only when needed."""
        if elapsed_s >= self.cap_s:
            if enough and self.deciding and self._capped:  # as it ends (looked at the cap, then not every tick)
                self.decision = decide_now()
            return True
        stable = enough and stable_now()
        # the rung is measured to its own precision first: it is the next rung's reference
        if not ((stable or elapsed_s >= self.max_s) and (enough or self.holding)):
            return False
        ends = enough and not self.deciding
        looked = False
        if enough and self.deciding:
            at_cap = elapsed_s >= self.decide_cap_s
            if elapsed_s >= self._look_s or (at_cap and not self._capped):
                self.decision, looked, self._capped = decide_now(), True, at_cap
                ends = self.decision != "undecided" or at_cap or not worth()
                if not ends:
                    self._look_s = 1.5 * elapsed_s
            elif at_cap:  # looked at the cap already, and again with the rung's next look or as it ends
                ends = True
        if self.holding and not stable and elapsed_s >= self._held_s:
            why = held_now()
            if why is not None:
                self.held_looks.append(f"{elapsed_s:.0f} s: {why}")
                self._held_s = 2 * elapsed_s
        if ends and (stable or elapsed_s >= self._held_s):
            if self.deciding and not looked:  # the decision is the window's whole, as it ends
                self.decision = decide_now()
            return True
        if ends:  # decided, but not yet usable: the gain is looked at again with the rung's next look
            self._look_s = max(self._look_s, self._held_s)
        return False
