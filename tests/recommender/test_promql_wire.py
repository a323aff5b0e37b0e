"""Escaping against a real Prometheus: a hostile label value matches exactly its own series, or nothing."""

from __future__ import annotations

import httpx
import pytest

from satbench.core import promql
from tests.recommender.conftest import HOSTILE, SyntheticRun

pytestmark = pytest.mark.slow


def _query(run: SyntheticRun, expr: str) -> list[dict[str, object]]:
    at = run.manifest.finished_at or 0.0
    resp = httpx.post(f"{run.prometheus_url}/api/v1/query", data={"query": expr, "time": f"{at:.3f}"},
                      timeout=10)
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["status"] == "success"
    result: list[dict[str, object]] = body["data"]["result"]
    return result


def _probe(value: str) -> str:
    return f"last_over_time({promql.selector('satbench_escape_probe', lane=value)}[1d])"


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(HOSTILE)))
def test_hostile_value_matches_only_its_own_series(synthetic_run: SyntheticRun, index: int) -> None:
    result = _query(synthetic_run, _probe(HOSTILE[index]))
    assert len(result) == 1
    assert result[0]["metric"]["lane"] == HOSTILE[index]  # type: ignore[index]
    assert float(result[0]["value"][1]) == index + 1  # type: ignore[index]


@pytest.mark.parametrize("value", ['nope"} or vector(1) or {x="', "\\", '"', "}", "\n", "dense\\"])
def test_hostile_value_without_a_series_matches_nothing(synthetic_run: SyntheticRun, value: str) -> None:
    assert _query(synthetic_run, _probe(value)) == []


def test_builders_run_on_a_real_prometheus(synthetic_run: SyntheticRun) -> None:
    for value in ['x"}) or vector(1) #', "dense"]:
        for expr in (promql.window_throughput(value, 10.0), promql.window_user_tokens(value, 10.0),
                     promql.window_quantiles("loadgen_ttft_seconds", (0.5, 0.95), value, 10.0),
                     promql.window_gauge_max("gpu_memory_used_bytes", value, 10.0)):
            _query(synthetic_run, expr)
