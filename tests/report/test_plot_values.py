"""The plots' values (``report.plots._values``): a figure declared in seconds is drawn in ms, the axes'
unit; any other figure as it is."""

from __future__ import annotations

import math

from satbench.core.figures import Quantiles, StepFigures
from satbench.report.plots import _values

STEPS = [StepFigures(lane="a", concurrency=c, window_s=8.0, requests=10, errors=0, throughput_tok_s=120.0 * c,
                     requests_per_s=1.5, ttft_s=Quantiles(p95=0.25 * c), jain=0.9, admission_wait_max_s=0.004)
         for c in (1, 2)]


def test_seconds_are_drawn_in_ms_and_the_rest_as_they_are() -> None:
    assert _values(STEPS, "ttft_s.p95") == [250.0, 500.0]
    assert _values(STEPS, "admission_wait_max_s") == [4.0, 4.0]
    assert _values(STEPS, "throughput_tok_s") == [120.0, 240.0]
    assert _values(STEPS, "jain") == [0.9, 0.9]
    assert all(math.isnan(v) for v in _values(STEPS, "itl_s.p95") + _values(STEPS, "user_wait_ratio"))
