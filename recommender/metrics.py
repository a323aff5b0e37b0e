"""``/metrics`` of the recommender: the current answer as gauges, on a private registry.

A custom collector reads the store at scrape time (no timers, no global registry):
``satbench_recommended_concurrency{lane}`` and ``satbench_saturation_concurrency{lane}`` for lanes that have
an answer, ``satbench_recommendation_status{lane,status,binding_constraint}`` (1, an info series: what the
document says of each lane, also without an answer), ``satbench_verdict_ok{lane,check}`` (1 when no measured
rung was flagged for ``decode_starvation``, ``prefill_starvation`` or ``fairness``, 0 when one was; absent
where the document does not say), plus ``satbench_recommendations_stale`` (1 while the served answer is stale).
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
        status = GaugeMetricFamily("satbench_recommendation_status",
                                   "1 per lane, labelled with the answer's status and binding constraint.",
                                   labels=["lane", "status", "binding_constraint"])
        verdict = GaugeMetricFamily("satbench_verdict_ok",
                                    "1 when no measured rung of the lane was flagged for the check, 0 when one was.",
                                    labels=["lane", "check"])
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
            status.add_metric([lane, str(data.get("status") or "unknown"), str(data.get("binding_constraint") or "")],
                              1.0)
            for check, ok in _verdicts(data).items():
                verdict.add_metric([lane, check], 1.0 if ok else 0.0)
        stale.add_metric([], 1.0 if self._store.state == "stale" else 0.0)
        yield rec
        yield sat
        yield status
        yield verdict
        yield stale


def _verdicts(lane: dict) -> dict[str, bool]:
    """Per check, whether every measured rung of the lane passed it (the document's lane summaries)."""
    starvation, fairness = lane.get("starvation") or {}, lane.get("fairness") or {}
    found = {"decode_starvation": starvation.get("decode_ok"), "prefill_starvation": starvation.get("prefill_ok"),
             "fairness": fairness.get("ok")}
    return {check: bool(ok) for check, ok in found.items() if ok is not None}


def build_registry(store: RecommendationStore) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RecommendationsCollector(store))
    return registry
