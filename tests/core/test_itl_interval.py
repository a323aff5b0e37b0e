"""The ITL p95's interval over gaps that come in clumps (``core.itl_interval.clustered_quantile_interval``).

A batched engine runs steps; every stream decoding in a step waits that step's time, so one slow step (a
prefill beside the decodes) lengthens a gap in every stream at once, and slow steps come in runs (a chunked
prompt takes several). The case: a two-state Markov chain of steps, decode (the base step times a lognormal
noise) and prefill (the base plus a uniform hold), with ``m`` streams each taking one gap a step. The truth is
the p95 of the steps' stationary mixture, solved from its closed-form distribution function (the chain's
stationary prefill share ``p / (p + 1 - r)``), never from the code under test; many seeded windows measure the
interval's coverage against it. Gaps taken as independent (the binomial interval of the share, one span)
cover far less: the clumps are what the interval must count.
"""

from __future__ import annotations

import math
import random

from scipy import optimize, stats

from satbench.core.itl_interval import QuantileInterval, clustered_quantile_interval

BASE, SIGMA, HOLD = 0.02, 0.15, (0.03, 0.09)  # s: decode step, its noise, a prefill's hold (uniform)
ENTER, STAY = 0.02, 0.7  # the chain: decode -> prefill, prefill -> prefill
STREAMS, STEPS = 8, 2000


def _share() -> float:
    return ENTER / (ENTER + 1 - STAY)


def _truth(q: float = 0.95) -> float:
    share = _share()

    def cdf(x: float) -> float:
        decode = stats.norm.cdf(math.log(x / BASE) / SIGMA)
        prefill = stats.uniform.cdf(x - BASE, HOLD[0], HOLD[1] - HOLD[0])
        return (1 - share) * decode + share * prefill - q

    return float(optimize.brentq(cdf, 1e-4, 1.0))


def _window(seed: int) -> list[tuple[float, float]]:
    """(end time, gap) of every stream's gap over ``STEPS`` steps."""
    rng = random.Random(seed)
    prefill = rng.random() < _share()
    now, out = 0.0, []
    for _ in range(STEPS):
        prefill = rng.random() < (STAY if prefill else ENTER)
        step = BASE + rng.uniform(*HOLD) if prefill else BASE * math.exp(rng.gauss(0.0, SIGMA))
        now += step
        out.extend((now, step) for _ in range(STREAMS))
    return out


def _interval(gaps: list[tuple[float, float]], bins: int = 20) -> QuantileInterval:
    got = clustered_quantile_interval(gaps, 0.95, 0.0, gaps[-1][0], 0.95, bins=bins, min_per_bin=1)
    assert got is not None
    return got


def test_the_interval_covers_the_engines_p95_at_its_nominal_rate() -> None:
    truth = _truth()
    windows = [_window(seed) for seed in range(120)]
    covered = sum(got.low <= truth <= got.high for got in map(_interval, windows))
    assert 0.90 * len(windows) <= covered <= 0.995 * len(windows), (covered, truth)
    # taken as independent, thousands of gaps state an interval that misses the truth far more often
    naive = 0
    for gaps in windows:
        values = sorted(v for _, v in gaps)
        half = 1.96 * math.sqrt(0.95 * 0.05 / len(values))
        low, high = values[int((0.95 - half) * len(values))], values[int((0.95 + half) * len(values))]
        naive += low <= truth <= high
    assert naive < 0.8 * len(windows), naive


def test_the_interval_is_rebuilt_at_another_confidence_around_its_point() -> None:
    got = _interval(_window(7))
    low, high = got.at(0.99)
    assert low < got.low <= got.point <= got.high < high
    assert got.at(0.95) == (got.low, got.high)


def test_too_few_gaps_state_no_interval() -> None:
    gaps = [(float(i), 0.02) for i in range(50)]
    assert clustered_quantile_interval(gaps, 0.95, 0.0, 50.0) is None
