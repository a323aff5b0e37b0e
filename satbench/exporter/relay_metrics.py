"""``runtime_ttft_seconds``, ``runtime_itl_seconds``, ``runtime_e2e_seconds``, ``runtime_queue_seconds``
(histograms, label ``route``), ``runtime_relay_requests_total{route, code, outcome}``,
``runtime_relay_prompt_tokens_total{route}``, ``runtime_relay_output_tokens_total{route}`` and
``runtime_relay_in_flight{route}`` of the relay mode.

Latency histograms take only requests whose outcome is ``ok`` (an error answer's e2e says nothing about
the node's speed); token counters take every answer that carried counts. The token counters are separate
from the scrape-time ``runtime_*_tokens_total`` (the runtime's own lifetime counters, unlabelled): these
count only what passed through the relay, per route.

Buckets are loadgen's (:data:`core.histograms.LATENCY_BUCKETS_S`), so relay and client histograms of the
same window can be compared bucket by bucket and ``histogram_quantile`` stays within 5% of the exact value.
Observations use loadgen's bisect histogram on the relay's event loop; ``collect()`` (the scrape thread)
copies them, as in :mod:`loadgen.metrics`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from satbench.core.histograms import FastHistogram
from satbench.exporter.relay_observe import RelayTiming

__all__ = ["RELAY_HISTOGRAMS", "RelayMetrics"]

RELAY_HISTOGRAMS = {
    "ttft": ("runtime_ttft_seconds", "Time to first content token at the relay, from request received."),
    "itl": ("runtime_itl_seconds", "Gaps between successive content tokens forwarded by the relay."),
    "e2e": ("runtime_e2e_seconds", "Request received to last byte forwarded, at the relay."),
    "queue": ("runtime_queue_seconds", "Time waiting for a slot (server queue_ms, else TTFT - prompt_ms)."),
}


class RelayMetrics(Collector):
    def __init__(self) -> None:
        self._hist: dict[tuple[str, str], FastHistogram] = {}
        self._requests: dict[tuple[str, str, str], int] = {}
        self._tokens: dict[tuple[str, str], int] = {}
        self._in_flight: dict[str, int] = {}
        self._lock = threading.Lock()

    def _histogram(self, kind: str, route: str) -> FastHistogram:
        key = (kind, route)
        hist = self._hist.get(key)
        if hist is None:
            with self._lock:
                hist = self._hist.setdefault(key, FastHistogram())
        return hist

    def started(self, route: str) -> None:
        with self._lock:
            self._in_flight[route] = self._in_flight.get(route, 0) + 1

    def finished(self, route: str, code: int, outcome: str = "ok") -> None:
        with self._lock:
            self._in_flight[route] = self._in_flight.get(route, 1) - 1
            key = (route, str(code), outcome)
            self._requests[key] = self._requests.get(key, 0) + 1

    def observe(self, route: str, timing: RelayTiming) -> None:
        """Token counts always (when known); latencies only for an ``ok`` outcome."""
        for kind, n in (("prompt", timing.prompt_tokens), ("output", timing.output_tokens)):
            if n:
                with self._lock:
                    self._tokens[(kind, route)] = self._tokens.get((kind, route), 0) + n
        if timing.outcome != "ok":
            return
        self._histogram("e2e", route).observe(timing.e2e_s)
        if timing.ttft_s is not None:
            self._histogram("ttft", route).observe(timing.ttft_s)
        if timing.itl_s:
            self._histogram("itl", route).observe_many(timing.itl_s)
        if timing.queue_s is not None:
            self._histogram("queue", route).observe(timing.queue_s)

    def in_flight_total(self) -> int:
        """Requests the relay has not finished accounting for (0 once every answer was counted)."""
        with self._lock:
            return sum(self._in_flight.values())

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            hists = sorted(self._hist.items())
            requests = sorted(self._requests.items())
            in_flight = sorted(self._in_flight.items())
            tokens = sorted(self._tokens.items())
        for kind, (name, doc) in RELAY_HISTOGRAMS.items():
            family = HistogramMetricFamily(name, doc, labels=["route"])
            for (k, route), hist in hists:
                if k == kind:
                    buckets, total = hist.buckets()
                    family.add_metric([route], buckets, total)
            yield family
        counter = CounterMetricFamily(
            "runtime_relay_requests", "Requests through the relay, by HTTP status to the client and outcome.",
            labels=["route", "code", "outcome"],
        )
        for (route, code, outcome), n in requests:
            counter.add_metric([route, code, outcome], float(n))
        yield counter
        for kind in ("prompt", "output"):
            tokens_family = CounterMetricFamily(
                f"runtime_relay_{kind}_tokens", f"{kind.capitalize()} tokens of answers through the relay "
                "(the server's own counts).", labels=["route"],
            )
            for (k, route), n in tokens:
                if k == kind:
                    tokens_family.add_metric([route], float(n))
            yield tokens_family
        gauge = GaugeMetricFamily("runtime_relay_in_flight", "Requests in flight through the relay.",
                                  labels=["route"])
        for route, n in in_flight:
            gauge.add_metric([route], float(n))
        yield gauge
