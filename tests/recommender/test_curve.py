from __future__ import annotations

import math

import pytest

from recommender.curve import CurvePoint, gain_per_doubling, kneedle, monotone_fit, saturation_rung


def pts(curve: dict[int, float]) -> list[CurvePoint]:
    return [CurvePoint(c, t) for c, t in curve.items()]


@pytest.mark.parametrize(
    ("c1", "t1", "c2", "t2", "expected"),
    [
        (1, 100, 2, 200, 1.0),  # throughput doubles with concurrency
        (1, 100, 4, 400, 1.0),  # two doublings, same per-doubling gain
        (4, 400, 8, 420, 0.05),
        (2, 100, 8, 121, 0.1),  # 21 % over two doublings = 10 % per doubling
        (1, 100, 3, 100, 0.0),
        (4, 400, 8, 200, -0.5),
        (1, 0, 2, 10, math.inf),
        (1, 0, 2, 0, 0.0),
    ],
)
def test_gain_per_doubling(c1: int, t1: float, c2: int, t2: float, expected: float) -> None:
    assert gain_per_doubling(c1, t1, c2, t2) == pytest.approx(expected)


@pytest.mark.parametrize(("c1", "c2"), [(2, 2), (4, 2), (0, 2)])
def test_gain_per_doubling_rejects_bad_rungs(c1: int, c2: int) -> None:
    with pytest.raises(ValueError):
        gain_per_doubling(c1, 1.0, c2, 2.0)


def test_monotone_fit_pools_a_dip() -> None:
    assert monotone_fit(pts({1: 100, 2: 200, 4: 180, 8: 220})) == pytest.approx([100, 190, 190, 220])


@pytest.mark.parametrize(
    ("curve", "knee"),
    [
        ({1: 100, 2: 200, 4: 400, 8: 410, 16: 412}, 4),  # linear then flat: knee at the bend
        ({1: 100, 2: 190, 4: 300, 8: 380, 16: 400}, 8),
        ({1: 100, 2: 200, 4: 400, 8: 800}, None),  # still doubling: convex on log2, no knee
        ({1: 100, 2: 200, 4: 300, 8: 400}, None),  # constant gain per doubling: straight, no knee
        ({1: 100, 2: 200}, None),  # two points cannot bend
        ({1: 100, 2: 100, 4: 100}, None),  # flat
        ({1: 100, 2: 200, 4: 390, 8: 410, 16: 400, 32: 412}, 4),  # noisy plateau
    ],
)
def test_kneedle(curve: dict[int, float], knee: int | None) -> None:
    found = kneedle(pts(curve))
    assert (found.concurrency if found else None) == knee


@pytest.mark.parametrize(
    ("curve", "min_gain", "rung"),
    [
        ({1: 100, 2: 200, 4: 400, 8: 420, 16: 425}, 0.10, 4),
        ({1: 100, 2: 200, 4: 400, 8: 420, 16: 425}, 0.04, 8),
        ({1: 100, 2: 200, 4: 400, 8: 800}, 0.10, None),
        ({1: 100, 2: 200, 4: 180, 8: 400}, 0.10, 2),  # the dip is pooled: 2->4 gains nothing
    ],
)
def test_saturation_rung(curve: dict[int, float], min_gain: float, rung: int | None) -> None:
    assert saturation_rung(pts(curve), min_gain) == rung
