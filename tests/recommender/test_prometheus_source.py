"""The Prometheus source against a fake client (query logic) and httpx.MockTransport (the wire client)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

import httpx
import pytest

from satbench.core import promql
from satbench.core.figures import MemoryFigures, Quantiles
from satbench.core.manifest import RunManifest, StepWindow
from satbench.recommender.errors import PrometheusQueryError, PrometheusUnavailable
from satbench.recommender.prometheus_figures import PromStepResults, figures_from_prometheus, memory_figures
from satbench.recommender.prometheus_source import (
    HttpxPromClient,
    PrometheusSourceConfig,
    VectorSample,
    fetch_run_figures,
    step_queries,
)

WINDOW = StepWindow(lane="dense", concurrency=4, start=1000.0, end=1020.0)


def test_figures_from_prometheus() -> None:
    results = PromStepResults(
        output_tokens=8000.0, user_tokens={"0": 2000, "1": 2000, "2": 2000, "3": 2000, "7": 99.0},
        outcomes={"ok": 39.6, "timeout": 1.2, "http_error": 0.2},
        ttft=Quantiles(0.1, 0.2, float("nan")), itl=Quantiles(0.01, 0.02, 0.03),
        decode_stall_max_s=0.05, ttft_max_s=0.4,
        memory=memory_figures(gpu_max=5.0, gpu_total=10.0, host_rss_max=float("nan"), gpu_sum_max=None,
                              gpu_sum_total=None, gpu_count=2.0, gpu_names=["H200", "", "H200"], gpu_simulated=False),
        batch_tokens=(800.0, 810.0, 790.0, 800.0, 805.0, 795.0), batch_s=2.0,
    )
    fig = figures_from_prometheus(WINDOW, results, confidence=0.95)
    assert (fig.requests, fig.errors, fig.errors_by_outcome) == (40, 1, {"timeout": 1})
    assert fig.throughput_tok_s == pytest.approx(400.0)
    assert fig.ttft_s == Quantiles(0.1, 0.2, None)
    assert fig.jain == pytest.approx(1.0)  # user 7 belongs to no user of this rung
    assert fig.decode_stall_max_ratio == pytest.approx(5.0)
    assert fig.prefill_wait_max_s == 0.4
    assert fig.memory_bytes == MemoryFigures(gpu_max=5.0, gpu_total=10.0, host_rss_max=None, gpu_count=2,
                                             gpu_names="H200", gpu_simulated=False)
    ci = fig.throughput_ci_tok_s
    assert ci is not None and ci[0] < 400 < ci[1]


def test_a_user_without_tokens_counts_as_zero() -> None:
    fig = figures_from_prometheus(WINDOW, PromStepResults(user_tokens={"0": 10, "1": 10}), confidence=0.95)
    assert fig.jain == pytest.approx(0.5)
    assert fig.max_min_share is None
    assert fig.requests == 0 and fig.throughput_tok_s == 0.0


class FakeProm:
    """Answers each named part of a united query from ``parts``; records what it was asked."""

    def __init__(self, parts: Mapping[str, list[VectorSample]]) -> None:
        self.parts = parts
        self.asked: list[tuple[str, float]] = []

    async def query(self, expr: str, at: float) -> list[VectorSample]:
        self.asked.append((expr, at))
        out = []
        for name, answer in self.parts.items():
            if f'"{promql.QUERY_LABEL}", "{name}"' in expr:
                out += [VectorSample({**s.labels, promql.QUERY_LABEL: name}, s.value) for s in answer]
        return out

    async def query_samples(self, expr: str, at: float) -> list[tuple[dict[str, str], list[Any]]]:
        return []

    async def query_range(self, expr: str, start: float, end: float, step_s: float) -> list[list[float]]:
        self.asked.append((expr, start))
        n = round((end - start) / step_s) + 1
        return [[step_s * 100.0] * n]


def test_fetch_run_figures_queries_each_window_at_its_end() -> None:
    fake = FakeProm({
        "ttft_max": [VectorSample({}, 0.9)],
        "outcomes": [VectorSample({"outcome": "ok"}, 50.0)],
        "users": [VectorSample({"user": "0"}, 1000.0)],
        "tokens": [VectorSample({}, 2000.0)],
        "ttft": [VectorSample({"quantile": "0.5"}, 0.1), VectorSample({"quantile": "0.95"}, 0.3)],
        "e2e_mean": [VectorSample({}, 0.2)],
    })
    manifest = RunManifest(run_id="r1", created_at=0.0, steps=[
        StepWindow("dense", 1, 100.0, 120.0), StepWindow("dense", 2, 130.0, 150.0),
        StepWindow("moe", 1, 0, 20)])
    figures = asyncio.run(fetch_run_figures(fake, manifest, PrometheusSourceConfig()))
    assert sorted(figures) == ["dense", "moe"]
    first = figures["dense"][0]
    assert (first.requests, first.throughput_tok_s) == (50, 100.0)
    assert first.ttft_s == Quantiles(0.1, 0.3, None)
    assert first.prefill_wait_max_s == 0.9
    assert first.throughput_ci_tok_s == pytest.approx((100.0, 100.0))
    times = {at for expr, at in fake.asked if "[20000ms]" in expr}
    assert times == {120.0, 150.0, 20.0}
    published = {at for expr, at in fake.asked if expr.startswith("last_over_time(loadgen_step_figure")}
    assert published == {120.0 + 120.0, 150.0 + 120.0, 20.0 + 120.0}  # after each step's end (no drain here)
    assert len(fake.asked) == 9  # per window: the united instant query, the range query, the published figures


def test_step_queries_unite_into_one_valid_expression() -> None:
    united = promql.named_union(step_queries("dense", 30.0))
    assert united.count(f'"{promql.QUERY_LABEL}"') == len(step_queries("dense", 30.0))
    assert united.count("(") == united.count(")")


def _client(handler: httpx.MockTransport) -> HttpxPromClient:
    return HttpxPromClient("http://prom.test", transport=handler)


def test_httpx_client_parses_vectors_and_posts_the_query() -> None:
    seen: dict[str, str] = {}

    def handler(request: httpx.Request) -> httpx.Response:
        seen.update(dict(httpx.QueryParams(request.content.decode())))
        body = {"status": "success", "data": {"resultType": "vector", "result": [
            {"metric": {"user": "1"}, "value": [1.0, "42"]}, {"metric": {}, "value": [1.0, "NaN"]}]}}
        return httpx.Response(200, json=body)

    async def go() -> list[VectorSample]:
        async with _client(httpx.MockTransport(handler)) as client:
            return await client.query('up{lane="a\\"b"}', 12.5)

    samples = asyncio.run(go())
    assert samples[0] == VectorSample({"user": "1"}, 42.0)
    assert seen == {"query": 'up{lane="a\\"b"}', "time": "12.500"}


@pytest.mark.parametrize(
    ("response", "error"),
    [
        (httpx.Response(503, text="down"), PrometheusUnavailable),
        (httpx.Response(200, text="<html>"), PrometheusUnavailable),
        (httpx.Response(400, json={"status": "error", "error": "parse error"}), PrometheusQueryError),
    ],
)
def test_httpx_client_errors(response: httpx.Response, error: type[Exception]) -> None:
    async def go() -> None:
        async with _client(httpx.MockTransport(lambda request: response)) as client:
            await client.query("up", 1.0)

    with pytest.raises(error):
        asyncio.run(go())


def test_httpx_client_unreachable() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    async def go() -> None:
        async with _client(httpx.MockTransport(refuse)) as client:
            await client.query_range("up", 1.0, 2.0, 1.0)

    with pytest.raises(PrometheusUnavailable, match="unreachable"):
        asyncio.run(go())


def test_range_query_values() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        body = {"status": "success", "data": {"resultType": "matrix", "result": [
            {"metric": {}, "values": [[1, "1"], [2, "3"]]}]}}
        return httpx.Response(200, content=json.dumps(body))

    async def go() -> list[list[float]]:
        async with _client(httpx.MockTransport(handler)) as client:
            return await client.query_range("up", 1.0, 2.0, 1.0)

    assert asyncio.run(go()) == [[1.0, 3.0]]
