"""Interval occupancy and the monotonic busy-slot-decode counter (exporter.occupancy)."""

from __future__ import annotations

from pathlib import Path

import pytest

from satbench.exporter.llamacpp_parse import parse_exposition
from satbench.exporter.occupancy import OccupancyState, advance


@pytest.mark.parametrize(
    ("previous", "steps", "busy", "slots", "ratio", "published"),
    [
        (None, 100, 250, 4, None, 250),  # first scrape: no interval yet
        (OccupancyState(100, 250, 250), 200, 550, 4, 0.75, 550),  # 300 busy over 100 steps on 4 slots
        (OccupancyState(100, 250, 250), 100, 250, 4, 0.0, 250),  # no decode step in the interval
        (OccupancyState(100, 250, 250), 50, 60, 4, None, 60),  # decode counter dropped: runtime restarted
        (OccupancyState(100, 250.004, 250.004), 100, 250.001, 4, 0.0, 250.004),  # rounding step back
        (OccupancyState(100, 250, 250), 110, 300, 4, 1.0, 300),  # rounding above 1 is clamped
        (OccupancyState(100, 250, 250), 200, 550, None, None, 550),  # unknown slot count
    ],
)
def test_advance(previous, steps, busy, slots, ratio, published) -> None:
    step = advance(previous, steps, busy, slots)
    assert step.interval_ratio == (None if ratio is None else pytest.approx(ratio))
    assert step.busy_published == pytest.approx(published)
    assert step.state.decode_steps == steps and step.state.busy_raw == busy


def test_rounding_step_back_does_not_bias_the_next_interval() -> None:
    first = advance(None, 100, 250.004, 4)
    second = advance(first.state, 100, 250.001, 4)
    third = advance(second.state, 200, 650.001, 4)
    assert third.interval_ratio == pytest.approx(1.0)
    assert third.busy_published == pytest.approx(650.001)


def test_real_sequence_warmup_load_after_load(llamacpp_fixtures: Path) -> None:
    def counters(name: str) -> tuple[float, float]:
        s = parse_exposition((llamacpp_fixtures / "dense_np4" / name).read_text())
        return s["llamacpp:n_decode_total"], s["llamacpp:n_busy_slots_per_decode"] * s[
            "llamacpp:n_decode_total"
        ]

    state = advance(None, *counters("metrics_after_warmup.txt"), 4).state
    during = advance(state, *counters("metrics_load.txt"), 4)
    # warm-up: 72 single-slot decodes; first load snapshot: 457 busy-slot decodes over 169 steps
    assert during.interval_ratio == pytest.approx((457.0 - 72) / (169 - 72) / 4, rel=1e-4)
    after = advance(during.state, *counters("metrics_after_load.txt"), 4)
    assert after.interval_ratio == pytest.approx((3912.0 - 457.0) / (1225 - 169) / 4, rel=1e-4)
    assert 0.8 < after.interval_ratio < 0.85  # 10 requests on 4 slots: the tail runs with fewer slots busy
