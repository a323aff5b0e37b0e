"""The client figures' flat form (``loadgen_step_figure``) and the agreement bound, from ``core.figures``."""

from __future__ import annotations

import dataclasses

import pytest

from core.figures import Quantiles, StepFigures, client_figures, client_values, disagreements

STEP = StepFigures(lane="a", concurrency=4, window_s=8.0, requests=20, errors=1, throughput_tok_s=300.0,
                   requests_per_s=2.5, ttft_s=Quantiles(0.100, 0.200, 0.250), itl_s=Quantiles(0.010, 0.015),
                   jain=0.98, max_min_share=1.2, decode_stall_max_s=0.09, errors_by_outcome={"http": 1},
                   occupancy_ratio=0.9, throughput_ci_tok_s=(290.0, 310.0))


def test_client_values_round_trip_and_leave_server_figures_out() -> None:
    values = client_values(STEP)
    assert values["ttft_s.p95"] == 0.2 and values["errors_by_outcome.http"] == 1.0 and "itl_s.p99" not in values
    assert not any(k.startswith(("occupancy", "queue_depth", "memory", "valid")) for k in values)
    assert (values["throughput_ci_tok_s.lo"], values["throughput_ci_tok_s.hi"]) == (290.0, 310.0)
    back = StepFigures.from_dict({**STEP.to_dict(), **client_figures(values)})
    assert back == STEP and isinstance(client_figures(values)["requests"], int)
    half = {k: v for k, v in values.items() if k != "throughput_ci_tok_s.hi"}
    assert client_figures(half)["throughput_ci_tok_s"] is None  # half an interval is none


@pytest.mark.parametrize(
    ("change", "differs"),
    [
        ({}, set()),
        ({"throughput_tok_s": 314.0}, set()),  # 4.7 %: inside 5 %
        ({"throughput_tok_s": 316.0}, {"throughput_tok_s"}),
        ({"itl_s": Quantiles(0.0109, 0.015)}, set()),  # sub-20 ms: 0.9 ms apart is inside 1 ms
        ({"itl_s": Quantiles(0.0111, 0.015)}, {"itl_s.p50"}),
        ({"jain": None}, {"jain"}),  # known on one side only
        ({"occupancy_ratio": 0.1}, set()),  # not a client figure
    ],
)
def test_disagreements_use_the_design_bound(change: dict[str, object], differs: set[str]) -> None:
    other = dataclasses.replace(STEP, **change)  # type: ignore[arg-type]
    assert set(disagreements(other, STEP)) == differs
