"""The window's stop rule on synthetic batch rates whose truth is the rate drawn: a rung whose true gain over
the rung below is far above the policy's gain pays, far below it is a plateau, and at the threshold stays
undecided, where measuring on is not worth it when the rung below alone makes the interval straddle."""

from __future__ import annotations

import math
import random

import pytest

from satbench.core.figures import StepFigures
from satbench.core.statistics import autocorrelated_batch_ci, batch_rates, relative_half_width
from satbench.core.step_figures import START_BATCHES, throughput_estimate
from satbench.loadgen import stop_rule

GAIN = 0.10  # the policy's gain per doubling


def reference(tok_s: float, half_width: float) -> StepFigures:
    return StepFigures(lane="x", concurrency=4, window_s=10.0, requests=100, errors=0, requests_per_s=10.0,
                       throughput_tok_s=tok_s, throughput_ci_tok_s=(tok_s - half_width, tok_s + half_width))


def rates(mean: float, seed: int, n: int = 40, noise: float = 0.03) -> list[float]:
    rng = random.Random(seed)
    return [rng.gauss(mean, noise * mean) for _ in range(n)]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_clear_gain_pays_and_a_clear_plateau_does_not(seed: int) -> None:
    ref = reference(100.0, 1.0)
    assert stop_rule.decide(rates(150.0, seed), ref, 8, GAIN, 10.0)[0] == "pays"  # +50 %
    assert stop_rule.decide(rates(101.0, seed), ref, 8, GAIN, 10.0)[0] == "plateau"  # +1 %


def test_a_gain_at_the_threshold_is_rarely_decided_and_a_wide_rung_below_makes_it_futile() -> None:
    """At a true gain of exactly the policy's, either decision is an error the 95 % interval makes on each side
    2.5 % of the time: over 400 noisy windows, 19 (4.75 %) decided (at most 10 % asked)."""
    narrow, wide = reference(100.0, 0.5), reference(100.0, 15.0)
    decisions = [stop_rule.decide(rates(110.0, seed, noise=0.15), narrow, 8, GAIN, 10.0)[0] for seed in range(400)]
    assert decisions.count("undecided") >= 0.9 * len(decisions)
    assert stop_rule.decide(rates(110.0, 1, noise=0.15), narrow, 8, GAIN, 10.0)[1].startswith("10 s: undecided")
    for seed in (1, 2, 3):
        assert not stop_rule.worth_deciding(rates(110.0, seed), wide, 8, GAIN, 10.0, 40.0)


def test_stable_needs_two_batches_and_a_narrow_interval() -> None:
    assert not stop_rule.stable([100.0], 0.05)
    assert stop_rule.stable(rates(100.0, 1, noise=0.01), 0.05)
    assert not stop_rule.stable(rates(100.0, 1, n=4, noise=0.5), 0.05)


def test_deciding_needs_a_lower_rung_with_an_interval_and_a_gain_to_decide() -> None:
    assert stop_rule.deciding(reference(100.0, 1.0), 8, GAIN)
    assert not stop_rule.deciding(reference(100.0, 1.0), 4, GAIN)  # not a rung above
    assert not stop_rule.deciding(reference(100.0, 1.0), 8, None)
    assert not stop_rule.deciding(None, 8, GAIN)


def test_a_rung_is_held_while_too_thin_or_too_unsteady_to_use_and_never_when_nothing_is_held() -> None:
    """Batch rates drawn around 100 with a 3 % noise over 40 batches: an interval of about 1 % of the mean, usable
    under the policy's 25 %; 6 batches of a bursty rung (0 or 200, drawn): far wider than 25 %, held; 400 batches
    of the same bursts: about 10 %, usable (a longer window is what makes it so)."""
    steady = rates(100.0, 1)
    rng = random.Random(4)
    short = [rng.choice((0.0, 200.0)) for _ in range(6)]
    long = [rng.choice((0.0, 200.0)) for _ in range(400)]
    assert stop_rule.held(steady, 20, 12, 0.25) is None
    assert stop_rule.held(steady, 11, 12, 0.25) == "11 requests, 12 needed"
    said = stop_rule.held(short, 20, 12, 0.25)
    assert said is not None and said.startswith("throughput interval") and said.endswith("25% usable")
    assert stop_rule.held(long, 400, 12, 0.25) is None
    assert stop_rule.held([100.0], 20, 12, 0.25) == "no throughput interval yet"
    for window in (steady, short, long, [100.0]):  # unset: nothing is held, as before
        assert stop_rule.held(window, 0, 12, None) is None


def _ends_at(rule: stop_rule.WindowEnd, *, stable_from: float, decision: str = "undecided", worth: bool = True,
             usable_from: float = float("inf"), tick: float = 0.25, enough_from: float = 0.0) -> float:
    """Ticks ``rule`` as the step does and says when the window ended (``stable_from``: when its throughput
    interval is within the bound; ``usable_from``: when it is usable)."""
    t = 0.0
    while True:
        if rule.ends(t, t >= max(rule.min_s, enough_from), lambda t=t: t >= stable_from,  # type: ignore[misc]
                     lambda: decision, lambda: worth,
                     lambda t=t: None if t >= usable_from else "3 requests, 12 needed"):  # type: ignore[misc]
            return t
        t += tick


def test_a_held_rung_goes_on_to_its_own_cap_and_a_deciding_one_stops_at_the_deciders() -> None:
    # a rung too thin to use (a slow model's lowest rung) is measured on, doubling, past decide_max_window_s, up to
    # hold_max_window_s, and ends at the first look at which it is usable
    thin = stop_rule.WindowEnd.of(8.0, 12.0, 24.0, False, 0.25, 120.0)
    assert thin.cap_s == 120.0 and thin.decide_cap_s == 12.0
    assert _ends_at(thin, stable_from=1e9, usable_from=50.0, enough_from=50.0) == 96.0  # looks at 12, 24, 48, 96
    assert thin.held_looks[:3] == ["12 s: 3 requests, 12 needed", "24 s: 3 requests, 12 needed",
                                   "48 s: 3 requests, 12 needed"]
    never = stop_rule.WindowEnd.of(8.0, 12.0, 24.0, False, 0.25, 120.0)
    assert _ends_at(never, stable_from=1e9) == 120.0  # given up at the cap
    # an undecided gain, usable all along: decided on until decide_max_window_s, not the hold's cap
    deciding = stop_rule.WindowEnd.of(8.0, 12.0, 24.0, True, 0.25, 120.0)
    assert _ends_at(deciding, stable_from=0.0, usable_from=0.0) == 24.0 and deciding.decision == "undecided"
    # without a hold the window ends at max_window_s, as before; hold_max_window_s unset holds to the decider's cap
    assert _ends_at(stop_rule.WindowEnd.of(8.0, 12.0, 24.0, False, None, 120.0), stable_from=1e9) == 12.0
    assert stop_rule.WindowEnd.of(8.0, 12.0, 24.0, False, 0.25).cap_s == 24.0
    # a stable, decided window ends at its first look
    assert _ends_at(stop_rule.WindowEnd.of(8.0, 12.0, 24.0, True, 0.25, 120.0), stable_from=0.0,
                    decision="pays", usable_from=0.0) == 8.0


def test_a_gain_past_its_cap_on_a_held_rung_is_looked_at_with_the_rungs_looks_not_at_every_tick() -> None:
    """An undecided gain on a rung held for being unsteady: looked at when the window first may end (20 s), at the
    decider's cap (24 s), with each of the rung's own looks (40 s) and as the window ends (80 s), never at each
    quarter-second tick in between (a real lane's notes listed 70 looks of one rung)."""
    rule = stop_rule.WindowEnd.of(10.0, 20.0, 24.0, True, 0.25, 80.0)
    looked: list[float] = []
    t = 0.0
    while not rule.ends(t, t >= 10.0, lambda: False, lambda t=t: looked.append(t) or "undecided",  # type: ignore[misc]
                        lambda: True, lambda: "throughput interval 32% of the mean, 25% usable"):
        t += 0.25
    assert t == 80.0 and looked == [20.0, 24.0, 40.0, 80.0] and rule.decision == "undecided"
    # decided, held, usable later: the window ends when it is usable, looked at once more as it ends
    later = stop_rule.WindowEnd.of(10.0, 20.0, 24.0, True, 0.25, 80.0)
    seen: list[float] = []
    t = 0.0
    while not later.ends(t, t >= 10.0, lambda t=t: t >= 30.0, lambda t=t: seen.append(t) or "plateau",  # type: ignore[misc]
                         lambda: True, lambda: "throughput interval 32% of the mean, 25% usable"):
        t += 0.25
    assert t == 30.0 and seen == [20.0, 24.0, 30.0] and later.decision == "plateau"


@pytest.mark.parametrize("seed", range(6))
def test_the_held_look_reads_the_interval_the_steps_figures_will_state(seed: int) -> None:
    """The look that holds an unusable rung reads the live bins (a ``START_BATCHES``-th of the minimum window
    each) merged into the final figure's batches: at a window twice the minimum, the interval is the one
    ``core.step_figures.throughput_estimate`` computes from the same token arrivals, where the bins alone, as
    many again and narrower in their lag-one correction, read it narrower."""
    rng = random.Random(seed)
    min_window, elapsed = 10.0, 20.0
    bin_s = min_window / START_BATCHES
    arrivals, t = [], 0.0
    while t < elapsed:  # bursts of tokens with slow swings: an unsteady lane
        t += rng.expovariate(40.0 * (1.5 + math.sin(t / 1.7)))
        arrivals.append((t, rng.choice((1, 1, 2, 8))))
    fine = batch_rates(arrivals, 0.0, elapsed, bin_s)
    merged = stop_rule.as_final_batches(fine, bin_s, elapsed, None)
    final = throughput_estimate(arrivals, 0.0, elapsed)
    assert final is not None and len(merged) == START_BATCHES
    mean = sum(merged) / len(merged)
    look = autocorrelated_batch_ci(merged)
    assert look is not None and look == pytest.approx(final.interval(0.95), rel=1e-9)
    as_bins = autocorrelated_batch_ci(fine)
    assert as_bins is not None and relative_half_width(as_bins, mean) < relative_half_width(look, mean)
    # a configured batch length is the final's too
    assert stop_rule.as_final_batches(fine, bin_s, elapsed, 4 * bin_s) == pytest.approx(
        batch_rates(arrivals, 0.0, elapsed, 4 * bin_s))
