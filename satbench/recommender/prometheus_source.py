"""Step figures from a live Prometheus: the PromQL of ``core.promql`` over exactly each step window.

Each window costs two round trips: one instant query, evaluated at the window's end, that unites every
figure's PromQL (``step_queries``) with ``core.promql.named_union`` (each result series names its part
in a ``satbench_query`` label), then, when the window is long enough against its requests (see
``PrometheusSourceConfig``), one range query whose step is the batch length, for the batch-means interval.
Every window's queries are in flight together (bounded by ``max_in_flight``) through a ``PromQLClient``:
``HttpxPromClient`` talks to a real Prometheus over its HTTP API (POST, so long queries never hit URL
limits); tests may pass any object with the same two coroutines. Connection failures and 5xx answers
raise ``PrometheusUnavailable`` (the service then serves its last good answer); a refused query raises
``PrometheusQueryError``.

A store that takes writes only with credentials (docs/fleet-store.md, "Credentials") usually wants them for
reads too: ``auth`` (user, password) is sent as HTTP basic auth with every query. A password never appears in
what the client says: its errors and ``public_url`` name the store without it (a URL's own userinfo too).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

import httpx

from satbench.core import promql
from satbench.core.energy import COUNTER_METRICS, EnergyReadings, window_readings
from satbench.core.figures import Quantiles, StepFigures
from satbench.core.manifest import RunManifest, StepWindow
from satbench.recommender.errors import PrometheusQueryError, PrometheusUnavailable
from satbench.recommender.prometheus_figures import PromStepResults, figures_from_prometheus, finite, memory_figures

__all__ = [
    "HttpxPromClient",
    "PromQLClient",
    "PrometheusSourceConfig",
    "VectorSample",
    "fetch_run_figures",
    "fetch_step_figures",
    "public_url",
    "window_energy",
]

QUANTILES = (0.5, 0.95, 0.99)


@dataclass(frozen=True, slots=True)
class VectorSample:
    labels: Mapping[str, str]
    value: float


class PromQLClient(Protocol):
    async def query(self, expr: str, at: float) -> list[VectorSample]: ...

    async def query_samples(self, expr: str, at: float) -> list[tuple[dict[str, str], list[tuple[float, float]]]]:
        """A range selector's raw samples at ``at``: each series' labels (``__name__`` included) and samples."""

    async def query_range(self, expr: str, start: float, end: float, step_s: float) -> list[list[float]]: ...


@dataclass(frozen=True, slots=True)
class PrometheusSourceConfig:
    """How to query: batches for the throughput interval, how many queries may be in flight, and how well
    the load generator must have been scraped for a window to count (``min_scrape_coverage`` of the
    ``window / scrape_interval_s`` samples a healthy scrape leaves).

    The load generator credits a request's tokens when it *ends*, so one batch's count is granular by whole
    requests: with ``c`` users and mean latency ``e2e``, a batch of ``B`` seconds is off by about
    ``e2e / (B * sqrt(c))`` of its value from request phase alone. A batch shorter than
    ``ci_min_e2e_multiple`` mean latencies (or ``min_batch_s``, two scrapes) would measure that granularity,
    not the server; then there is no interval (``None``) rather than a misleading one. Fewer than
    ``ci_min_batches`` batches give none either (Student's t with one degree of freedom is 12.7).

    ``published_lookback_s``: how long after a step's drain the load generator's published figures
    (``loadgen_step_figure``) are looked for; it publishes them as the step ends and keeps them until it exits,
    so the first scrape after the drain holds them. Prometheus stamps a sample with its scrape's *start*, and
    a scrape that started just before the drain ended can read figures published while it was under way, so
    the search starts at the window's start (one scrape interval before it), not at the drain: no earlier
    sample can exist for the step's ``run_id`` and ``concurrency``."""

    ci_batches: int = 10
    ci_min_batches: int = 5
    min_batch_s: float = 2.0
    ci_min_e2e_multiple: float = 10.0
    max_in_flight: int = 32
    confidence: float = 0.95
    scrape_interval_s: float = 1.0
    min_scrape_coverage: float = 0.8
    published_lookback_s: float = 120.0


def public_url(url: str) -> str:
    """``url`` as it may be shown (a document's ``source``, a log line, an error): without a password."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{parts.username}:***@{host}"))


class HttpxPromClient:
    """A ``PromQLClient`` over Prometheus' HTTP API. Use as an async context manager."""

    def __init__(self, base_url: str, *, timeout_s: float = 10.0,
                 transport: httpx.AsyncBaseTransport | None = None,
                 headers: Mapping[str, str] | None = None, auth: tuple[str, str] | None = None) -> None:
        """``headers`` go with every query: a multi-tenant store's tenant (Mimir, Cortex: ``X-Scope-OrgID``);
        ``auth``: basic auth (user, password) for a store that asks for it."""
        self.base_url = public_url(base_url.rstrip("/"))
        self._client = httpx.AsyncClient(base_url=base_url.rstrip("/"), timeout=timeout_s, transport=transport,
                                         headers=dict(headers or {}), auth=auth)

    async def __aenter__(self) -> HttpxPromClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._client.aclose()

    async def _post(self, path: str, data: dict[str, str]) -> Any:
        try:
            resp = await self._client.post(path, data=data)
        except httpx.HTTPError as exc:
            raise PrometheusUnavailable(f"Prometheus at {self.base_url} unreachable: {exc!r}") from exc
        if resp.status_code >= 500:
            raise PrometheusUnavailable(f"Prometheus at {self.base_url} answered {resp.status_code}")
        if resp.status_code in (401, 403):
            raise PrometheusUnavailable(f"Prometheus at {self.base_url} refused the credentials (HTTP "
                                        f"{resp.status_code}): set prometheus_username and prometheus_password")
        try:
            body = resp.json()
        except ValueError as exc:
            raise PrometheusUnavailable(f"Prometheus at {self.base_url} sent no JSON") from exc
        if resp.status_code >= 400 or body.get("status") != "success":
            why = body.get("error", resp.text)
            raise PrometheusQueryError(f"Prometheus refused {data.get('query')!r}: {why}")
        return body["data"]

    async def query(self, expr: str, at: float) -> list[VectorSample]:
        data = await self._post("/api/v1/query", {"query": expr, "time": f"{at:.3f}"})
        if data.get("resultType") == "scalar":
            return [VectorSample({}, float(data["result"][1]))]
        items = data.get("result", [])
        return [VectorSample(dict(item["metric"]), float(item["value"][1])) for item in items]

    async def query_samples(self, expr: str, at: float) -> list[tuple[dict[str, str], list[tuple[float, float]]]]:
        data = await self._post("/api/v1/query", {"query": expr, "time": f"{at:.3f}"})
        if data.get("resultType") != "matrix":
            raise PrometheusQueryError(f"Prometheus answered {expr!r} with a {data.get('resultType')}, not a matrix")
        return [(dict(item["metric"]), [(float(t), float(v)) for t, v in item.get("values", [])])
                for item in data.get("result", [])]

    async def query_range(self, expr: str, start: float, end: float, step_s: float) -> list[list[float]]:
        data = await self._post("/api/v1/query_range", {
            "query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step_s:.3f}"})
        return [[float(v) for _, v in item["values"]] for item in data.get("result", [])]


def _single(samples: Sequence[VectorSample]) -> float | None:
    return samples[0].value if samples else None


def _quantiles(samples: Sequence[VectorSample]) -> Quantiles:
    by_q = {float(s.labels.get("quantile", "nan")): s.value for s in samples}
    return Quantiles(p50=by_q.get(0.5), p95=by_q.get(0.95), p99=by_q.get(0.99))


def step_queries(lane: str, w: float, scrape_s: float = 1.0) -> dict[str, str]:
    """Every instant query of one step window, by name (sent as one ``named_union``)."""
    return {
        "tokens": promql.window_output_tokens(lane, w),
        "users": promql.window_user_tokens(lane, w),
        "outcomes": promql.window_requests_by_outcome(lane, w),
        "ttft": promql.window_quantiles("loadgen_ttft_seconds", QUANTILES, lane, w),
        "itl": promql.window_quantiles("loadgen_itl_seconds", QUANTILES, lane, w),
        "e2e": promql.window_quantiles("loadgen_e2e_seconds", QUANTILES, lane, w),
        "tpot": promql.window_quantiles("loadgen_tpot_seconds", QUANTILES, lane, w),
        "queue": promql.window_quantiles("loadgen_queue_seconds", QUANTILES, lane, w),
        "stall_max": promql.window_quantile("loadgen_decode_stall_seconds", 1.0, lane, w),
        "ttft_max": promql.window_quantile("loadgen_ttft_seconds", 1.0, lane, w),
        "occupancy": promql.window_gauge_avg("runtime_batch_occupancy_ratio", lane, w),
        "queue_depth": promql.window_gauge_avg("runtime_queue_depth", lane, w),
        "gpu_used": promql.window_gauge_max("gpu_memory_used_bytes", lane, w),
        "gpu_total": promql.window_gauge_max("gpu_memory_total_bytes", lane, w),
        "gpu_sum": promql.window_sum_max("gpu_memory_used_bytes", lane, w, scrape_s),
        "gpu_sum_total": promql.window_sum_max("gpu_memory_total_bytes", lane, w, scrape_s),
        "gpu_count": promql.window_series_count("gpu_memory_total_bytes", lane, w),
        "gpu_names": promql.window_gpu_names(lane, w),
        "rss": promql.window_gauge_max("runtime_process_resident_memory_bytes", lane, w),
        "gpu_headroom": promql.window_gpu_headroom_min(lane, w),
        "gpu_other": promql.window_gpu_other_max(lane, w, scrape_s),
        "kv_usage": promql.window_gauge_max("runtime_kv_cache_usage_ratio", lane, w),
        "samples": promql.window_sample_count("loadgen_requests_total", lane, w),
        "e2e_mean": promql.window_mean("loadgen_e2e_seconds", lane, w),
    }


async def fetch_step_figures(client: PromQLClient, window: StepWindow, config: PrometheusSourceConfig,
                             limit: asyncio.Semaphore | None = None, run_id: str | None = None) -> StepFigures:
    """The figures of one step window, from Prometheus.

    With ``run_id``, the load generator's published figures of the step are read too: where present they
    give every client figure exactly (the records' own numbers), and the histograms give none of them.
    """
    gate = limit or asyncio.Semaphore(config.max_in_flight)
    lane, w, at = window.lane, window.duration_s, window.end

    async def published() -> dict[str, float]:
        if run_id is None:
            return {}
        after = window.drain_end if window.drain_end is not None else window.end
        at_s = after + config.published_lookback_s
        span_s = at_s - window.start + config.scrape_interval_s
        query = promql.published_step_figures(lane, run_id, window.concurrency, span_s, window.rate_rps)
        async with gate:
            samples = await client.query(query, at_s)
        return {s.labels["figure"]: s.value for s in samples if "figure" in s.labels and math.isfinite(s.value)}

    async def batches(e2e_mean: float | None) -> tuple[tuple[float, ...], float | None]:
        shortest = max(config.min_batch_s, config.ci_min_e2e_multiple * (e2e_mean or math.inf))
        usable = math.isfinite(shortest) and shortest > 0
        n = min(config.ci_batches, math.floor(w / shortest)) if usable else 0
        if n < config.ci_min_batches:
            return (), None
        batch_s = w / n
        async with gate:
            series = await client.query_range(promql.batch_output_tokens(lane, batch_s),
                                              window.start + batch_s, window.end + batch_s / 1000, batch_s)
        values = tuple(series[0][:n]) if series else ()
        return values, batch_s

    async def instant() -> dict[str, list[VectorSample]]:
        async with gate:
            samples = await client.query(promql.named_union(step_queries(lane, w, config.scrape_interval_s)), at)
        parts: dict[str, list[VectorSample]] = {}
        for s in samples:
            labels = dict(s.labels)
            name = labels.pop(promql.QUERY_LABEL, "")
            parts.setdefault(name, []).append(VectorSample(labels, s.value))
        return parts

    async def energy_of() -> EnergyReadings:
        async with gate:
            return await window_energy(client, lane, window.start, window.end, config.scrape_interval_s)

    got, exact, energy = await asyncio.gather(instant(), published(), energy_of())
    batch_tokens, batch_s = await batches(finite(_single(got.get("e2e_mean", []))))
    results = PromStepResults(
        output_tokens=_single(got.get("tokens", [])),
        user_tokens={s.labels.get("user", ""): s.value for s in got.get("users", [])},
        outcomes={s.labels.get("outcome", ""): s.value for s in got.get("outcomes", [])},
        ttft=_quantiles(got.get("ttft", [])),
        itl=_quantiles(got.get("itl", [])),
        e2e=_quantiles(got.get("e2e", [])),
        tpot=_quantiles(got.get("tpot", [])),
        queue=_quantiles(got.get("queue", [])),
        decode_stall_max_s=_single(got.get("stall_max", [])),
        ttft_max_s=_single(got.get("ttft_max", [])),
        occupancy_ratio=_single(got.get("occupancy", [])),
        queue_depth_avg=_single(got.get("queue_depth", [])),
        memory=memory_figures(
            gpu_max=_single(got.get("gpu_used", [])), gpu_total=_single(got.get("gpu_total", [])),
            host_rss_max=_single(got.get("rss", [])), gpu_sum_max=_single(got.get("gpu_sum", [])),
            gpu_sum_total=_single(got.get("gpu_sum_total", [])), gpu_count=_single(got.get("gpu_count", [])),
            gpu_names=[s.labels.get("name", "") for s in got.get("gpu_names", [])],
            gpu_headroom_min=_single(got.get("gpu_headroom", [])), gpu_other_max=_single(got.get("gpu_other", [])),
            kv_usage_max=_single(got.get("kv_usage", [])),
            gpu_simulated=None if not got.get("gpu_names") else any(
                s.labels.get("simulated") == "true" for s in got["gpu_names"])),
        energy=energy,
        batch_tokens=batch_tokens,
        batch_s=batch_s,
        samples=_single(got.get("samples", [])),
    )
    return figures_from_prometheus(window, results, confidence=config.confidence,
                                   scrape_interval_s=config.scrape_interval_s,
                                   min_scrape_coverage=config.min_scrape_coverage, published=exact)


async def window_energy(client: PromQLClient, lane: str, start: float, end: float,
                        scrape_interval_s: float) -> EnergyReadings:
    """The lane's energy readings over ``[start, end]`` from the raw samples (``core.energy.window_readings``); none
    where the store refuses raw samples (the figures still stand)."""
    margin = 2 * scrape_interval_s  # a sample beyond each edge, to interpolate at it
    query = promql.window_samples(COUNTER_METRICS, lane, end - start + 2 * margin)
    try:
        series = await client.query_samples(query, end + margin)
    except PrometheusQueryError:
        return EnergyReadings()
    return window_readings(series, start, end)


async def fetch_run_figures(client: PromQLClient, manifest: RunManifest,
                            config: PrometheusSourceConfig) -> dict[str, list[StepFigures]]:
    """Figures of every step window of the run, per lane, all queries in flight together."""
    gate = asyncio.Semaphore(config.max_in_flight)
    windows = [w for w in manifest.steps if w.end > w.start]
    figures = await asyncio.gather(*(fetch_step_figures(client, w, config, gate, manifest.run_id)
                                     for w in windows))
    out: dict[str, list[StepFigures]] = {lane: [] for lane in manifest.lane_names()}
    for fig in figures:
        out.setdefault(fig.lane, []).append(fig)
    return out
