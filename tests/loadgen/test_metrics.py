from __future__ import annotations

import itertools
import random
import time

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from satbench.core.histograms import LATENCY_BUCKETS_S, FastHistogram
from satbench.core.statistics import quantile
from satbench.loadgen.metrics import LoadgenMetrics


def histogram_quantile(q: float, buckets: list[tuple[str, float]]) -> float:
    """Prometheus' histogram_quantile over cumulative (le, count) pairs (linear inside the bucket)."""
    total = buckets[-1][1]
    rank = q * total
    prev_le, prev_count = 0.0, 0.0
    for le, count in buckets:
        if count >= rank:
            if le == "+Inf":
                return prev_le
            upper = float(le)
            if count == prev_count:
                return upper
            return prev_le + (upper - prev_le) * (rank - prev_count) / (count - prev_count)
        prev_le, prev_count = float(le), count
    raise AssertionError("unreachable")


@pytest.mark.parametrize("draw", [
    lambda r: r.lognormvariate(-4.6, 0.3),  # ITL around 10 ms
    lambda r: r.lognormvariate(-1.0, 1.0),  # TTFT, wide
    lambda r: r.uniform(0.0002, 0.002),  # loopback gaps
    lambda r: r.choice([0.05, 2.0]) * r.uniform(0.9, 1.1),  # bimodal prefill waits
    lambda r: r.expovariate(1 / 30.0),  # long e2e
])
def test_histogram_p95_within_5_percent_of_exact(draw: object) -> None:
    rng = random.Random(5)
    values = [draw(rng) for _ in range(5000)]  # type: ignore[operator]
    hist = FastHistogram()
    hist.observe_many(values)
    buckets, total = hist.buckets()
    exact = quantile(sorted(values), 0.95)
    assert exact is not None
    estimate = histogram_quantile(0.95, buckets)
    assert abs(estimate - exact) / exact <= 0.05
    assert total == pytest.approx(sum(values))


def test_buckets_are_geometric_and_cover_the_range() -> None:
    ratios = {round(b / a, 9) for a, b in itertools.pairwise(LATENCY_BUCKETS_S)}
    assert len(ratios) == 1 and ratios.pop() < 1.05
    assert LATENCY_BUCKETS_S[0] < 0.0002 and LATENCY_BUCKETS_S[-1] >= 256


def test_families_names_and_labels_on_a_private_registry() -> None:
    registry = CollectorRegistry()
    metrics = LoadgenMetrics(registry)
    metrics.request_done("dense", "ok", 3, 12)
    metrics.request_done("dense", "dropped", 3, 0)
    metrics.add_in_flight("dense", 2)
    metrics.set_step("dense", "run-1", 8)
    metrics.histogram("itl", "dense").observe_many([0.01, 0.02])
    for kind in ("ttft", "e2e", "queue", "stall"):
        metrics.histogram(kind, "dense").observe(0.5)
    get = registry.get_sample_value
    assert get("loadgen_requests_total", {"lane": "dense", "outcome": "ok"}) == 1
    assert get("loadgen_requests_total", {"lane": "dense", "outcome": "dropped"}) == 1
    assert get("loadgen_output_tokens_total", {"lane": "dense", "user": "3"}) == 12
    assert get("loadgen_in_flight", {"lane": "dense"}) == 2
    assert get("loadgen_step_concurrency", {"lane": "dense", "run_id": "run-1"}) == 8
    assert get("loadgen_itl_seconds_count", {"lane": "dense"}) == 2
    assert get("loadgen_itl_seconds_sum", {"lane": "dense"}) == pytest.approx(0.03)
    for name in ("ttft", "e2e", "queue", "decode_stall"):
        assert get(f"loadgen_{name}_seconds_count", {"lane": "dense"}) == 1
    text = generate_latest(registry).decode()
    assert 'loadgen_itl_seconds_bucket{lane="dense",le="+Inf"} 2.0' in text


def test_a_scrape_counts_as_seeing_the_published_figures_only_if_it_read_them() -> None:
    """The runner lingers until ``last_scrape`` passes the last publication; a scrape under way when a step
    is published (its figures family already read) must not count, or the load generator exits before the
    figures reach Prometheus and the document falls back to histogram figures for that step."""
    metrics = LoadgenMetrics()
    metrics.publish_step("moe", "run-1", 1, {"requests": 4.0})
    families = metrics.collect()
    read: dict[str, list[str | None]] = {}
    for family in families:
        read[family.name] = [s.labels.get("concurrency") for s in family.samples]
        if family.name == "loadgen_step_figure":
            break
    metrics.publish_step("moe", "run-1", 2, {"requests": 6.0})
    published_at = time.time()
    list(families)  # the scrape finishes after the publication
    assert read["loadgen_step_figure"] == ["1"]  # it did not carry c=2 ...
    assert metrics.last_scrape is not None and metrics.last_scrape < published_at  # ... so it does not count
    read_again = {f.name: [s.labels.get("concurrency") for s in f.samples] for f in metrics.collect()}
    assert sorted(read_again["loadgen_step_figure"]) == ["1", "2"]
    assert metrics.last_scrape >= published_at
