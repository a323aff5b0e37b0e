from __future__ import annotations

import pytest

from recommender.confidence import batch_means_ci, indistinguishable, intervals_overlap, relative_half_width


def test_batch_means_ci_known_values() -> None:
    # mean 10, sd 1 over 4 batches: half-width t(0.975, 3) * 1 / 2 = 3.182 / 2
    ci = batch_means_ci([9.0, 11.0, 9.0, 11.0], 0.95)
    assert ci is not None
    sd = (4 / 3) ** 0.5
    assert ci == pytest.approx((10 - 3.1824 * sd / 2, 10 + 3.1824 * sd / 2), rel=1e-4)


@pytest.mark.parametrize("values", [[], [5.0], [float("nan"), 5.0]])
def test_batch_means_ci_needs_two_batches(values: list[float]) -> None:
    assert batch_means_ci(values, 0.95) is None


def test_batch_means_ci_rejects_bad_confidence() -> None:
    with pytest.raises(ValueError):
        batch_means_ci([1.0, 2.0], 1.0)


def test_wider_confidence_gives_wider_interval() -> None:
    narrow = batch_means_ci([9.0, 11.0, 10.0, 10.5], 0.80)
    wide = batch_means_ci([9.0, 11.0, 10.0, 10.5], 0.99)
    assert narrow is not None and wide is not None
    assert wide[0] < narrow[0] and wide[1] > narrow[1]


@pytest.mark.parametrize(
    ("a", "b", "overlap"),
    [((1, 2), (1.5, 3), True), ((1, 2), (2.5, 3), False), ((3, 4), (1, 2), False), ((1, 4), (2, 3), True)],
)
def test_intervals_overlap(a: tuple[float, float], b: tuple[float, float], overlap: bool) -> None:
    assert intervals_overlap(a, b) is overlap


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ((90, 110), (125, 145), False),  # 35 apart, sqrt(10^2 + 10^2) = 14.1
        ((90, 110), (105, 125), False),  # overlapping intervals, yet 15 > 14.1: told apart
        ((90, 110), (100, 120), True),  # 10 <= 14.1
        ((100, 100), (100, 100), True),
        ((100, 100), (101, 101), False),
    ],
)
def test_indistinguishable(a: tuple[float, float], b: tuple[float, float], same: bool) -> None:
    assert indistinguishable(a, b) is same
    assert indistinguishable(b, a) is same


def test_relative_half_width() -> None:
    assert relative_half_width((90.0, 110.0), 100.0) == pytest.approx(0.1)
    assert relative_half_width((0.0, 1.0), 0.0) == float("inf")
