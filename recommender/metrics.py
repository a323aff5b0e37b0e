"""``/metrics`` of the recommender: the current answer as gauges, on a private registry.

A custom collector reads the store at scrape time (no timers, no global registry):
``satbench_recommended_concurrency{lane}`` and ``satbench_saturation_concurrency{lane}`` for lanes that have
an answer, plus ``satbench_recommendations_stale`` (1 while the served answer is stale).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from recommender.errors import NothingToServe
from recommender.store import RecommendationStore

__all__ = ["RecommendationsCollector", "build_registry"]


class RecommendationsCollector(Collector):
    def __init__(self, store: RecommendationStore) -> None:
        self._store = store

    def collect(self) -> Iterator[Metric]:
        rec = GaugeMetricFamily("satbench_recommended_concurrency",
                                "Largest useful concurrency per lane under the policy.", labels=["lane"])
        sat = GaugeMetricFamily("satbench_saturation_concurrency",
                                "Concurrency where throughput stops paying per doubling.", labels=["lane"])
        stale = GaugeMetricFamily("satbench_recommendations_stale",
                                  "1 while the served recommendations are stale (source unreachable).")
        try:
            lanes = self._store.document()["lanes"]
        except NothingToServe:
            lanes = {}
        for lane, data in sorted(lanes.items()):
            if data.get("recommended_concurrency") is not None:
                rec.add_metric([lane], float(data["recommended_concurrency"]))
            if data.get("saturation_concurrency") is not None:
                sat.add_metric([lane], float(data["saturation_concurrency"]))
        stale.add_metric([], 1.0 if self._store.state == "stale" else 0.0)
        yield rec
        yield sat
        yield stale


def build_registry(store: RecommendationStore) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RecommendationsCollector(store))
    return registry
