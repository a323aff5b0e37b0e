from __future__ import annotations

import pytest

from satbench.answer.curve import CurvePoint, kneedle, monotone_fit, saturation_rung


def pts(curve: dict[int, float]) -> list[CurvePoint]:
    return [CurvePoint(c, t) for c, t in curve.items()]


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
