"""Live ``loadgen_*`` metrics (DESIGN.md names and labels) on a private registry, served on /metrics.

Why a custom collector instead of ``prometheus_client.Histogram``: at saturation the client observes one
inter-token gap per streamed token (~100,000/s), and the stock histogram takes a lock and walks its buckets
per observation. Here an observation is a ``bisect`` into a plain list of counts on the event-loop thread;
``collect()`` (the scrape, on the HTTP server's thread) copies the lists and yields fresh families. A scrape
may see a histogram a few observations behind its count, never a torn or decreasing one.

Counters and gauges are updated per request (not per token), so their cost does not matter. The prompt and
reuse counters hold the runtime's own counts of finished requests (``core.records.RequestRecord``):
``rate(loadgen_cached_prompt_tokens_total) / rate(loadgen_prompt_tokens_total)`` is the live prompt-cache hit
share and the draft counters' ratio the speculative acceptance (the step figures of ``core.runtime_counts``
count the same tokens, of the step's finished requests that reported them).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from satbench.core.arrivals import rate_label
from satbench.core.histograms import FastHistogram
from satbench.core.lanes import split_key
from satbench.core.records import RequestRecord

__all__ = ["LoadgenMetrics", "MetricsServer"]

HISTOGRAMS = {
    "ttft": "loadgen_ttft_seconds",
    "itl": "loadgen_itl_seconds",
    "e2e": "loadgen_e2e_seconds",
    "tpot": "loadgen_tpot_seconds",
    "queue": "loadgen_queue_seconds",
    "stall": "loadgen_decode_stall_seconds",
}
# (family, help, RequestRecord field): per lane, the runtime's counts of finished requests that reported them
RUNTIME_COUNTERS = (
    ("loadgen_prompt_tokens", "Prompt tokens of finished requests, as the runtime counted them.",
     "prompt_tokens"),
    ("loadgen_cached_prompt_tokens",
     "Prompt tokens the runtime's prompt cache served (no prefill), of finished requests that reported it.",
     "cached_prompt_tokens"),
    ("loadgen_draft_tokens", "Tokens a draft model proposed (speculative decoding), as the runtime reported.",
     "draft_tokens"),
    ("loadgen_draft_accepted_tokens", "Drafted tokens the target model accepted, as the runtime reported.",
     "draft_accepted_tokens"),
)
_HELP = {
    "ttft": "Time to first content token, from request sent.",
    "itl": "Gaps between successive content tokens of one request.",
    "e2e": "Request sent to last byte.",
    "tpot": "Time per output token after the first: (e2e - TTFT) / (output tokens - 1), per successful request.",
    "queue": "TTFT - the server's prompt_ms (clamped at 0): the wait for a slot and for the running batch step to end.",
    "stall": "Longest inter-token gap of a request while another request of the lane was in prefill.",
}



def _add(family: Metric, key: str, names: list[str], values: list[str], *value: Any) -> None:
    """Adds one sample set of lane ``key`` (``core.lanes``) to ``family``: labelled ``lane``, and ``node`` where
    the key names one (a lane without a node has no ``node`` label at all, as before fleets)."""
    node, lane = split_key(key)
    if node is None:  # the family's own label names: no copy on the scrape's hot path
        family.add_metric([lane, *values], *value)  # type: ignore[attr-defined]
        return
    one = type(family)(family.name, family.documentation, labels=["node", "lane", *names])  # type: ignore[call-arg]
    one.add_metric([node, lane, *values], *value)  # type: ignore[attr-defined]
    family.samples.extend(one.samples)


class LoadgenMetrics(Collector):
    """All ``loadgen_*`` families of one process; register on a private ``CollectorRegistry``."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.requests: dict[tuple[str, str], int] = {}
        self.tokens: dict[tuple[str, str], int] = {}
        self.runtime_totals: dict[tuple[str, str], int] = {}
        self.in_flight: dict[str, int] = {}
        self.step_concurrency: dict[tuple[str, str], int] = {}
        self.step_figures: dict[tuple[str, str, int, str], dict[str, float]] = {}
        # wall time at which the latest collect() read the published step figures: a scrape that read them
        # at or after a publication carries it (set before the read, so a scrape under way when a step is
        # published never counts as having seen it)
        self.last_scrape: float | None = None
        self.hist: dict[tuple[str, str], FastHistogram] = {}
        self.live_tokens: Callable[[], Iterable[tuple[str, str, int]]] | None = None
        self._reported_tokens: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()
        if registry is not None:
            registry.register(self)

    def histogram(self, kind: str, lane: str) -> FastHistogram:
        key = (kind, lane)
        h = self.hist.get(key)
        if h is None:
            with self._lock:
                h = self.hist.setdefault(key, FastHistogram())
        return h

    def request_done(self, lane: str, outcome: str, user: int, tokens: int) -> None:
        key = (lane, outcome)
        self.requests[key] = self.requests.get(key, 0) + 1
        if tokens:
            ukey = (lane, str(user))
            self.tokens[ukey] = self.tokens.get(ukey, 0) + tokens

    def runtime_counts(self, lane: str, record: RequestRecord) -> None:
        """Adds a finished request's prompt, cached-prompt and draft counts (those it reported)."""
        for family, _, attr in RUNTIME_COUNTERS:
            n = getattr(record, attr)
            if n is not None:
                key = (family, lane)
                self.runtime_totals[key] = self.runtime_totals.get(key, 0) + n

    def add_in_flight(self, lane: str, delta: int) -> None:
        self.in_flight[lane] = self.in_flight.get(lane, 0) + delta

    def publish_step(self, lane: str, run_id: str, concurrency: int, values: dict[str, float],
                     rate: float | None = None) -> None:
        """A finished step's exact client figures (``core.figures.client_values``), kept for every later scrape;
        an open-loop rung's carry its rate (``rate_rps``, ``core.arrivals.rate_label``)."""
        self.step_figures[(lane, run_id, concurrency, rate_label(rate))] = dict(values)

    def set_step(self, lane: str, run_id: str, concurrency: int) -> None:
        self.step_concurrency[(lane, run_id)] = concurrency

    def _token_totals(self) -> dict[tuple[str, str], int]:
        """Finished requests' tokens plus those of requests still streaming (``live_tokens``), so a rate over
        a few seconds is not lumpy by whole requests. Never lower than last reported: a counter must not
        fall while a request moves from in-flight to finished."""
        totals = dict(self.tokens)
        source = self.live_tokens
        if source is not None:
            try:
                for lane, user, n in source():
                    totals[(lane, user)] = totals.get((lane, user), 0) + n
            except RuntimeError:
                pass
        with self._lock:
            reported = self._reported_tokens
            for key, n in totals.items():
                totals[key] = reported[key] = max(n, reported.get(key, 0))
        return totals

    def collect(self) -> Iterator[Metric]:
        req = CounterMetricFamily("loadgen_requests", "Requests ended, by outcome.",
                                  labels=["lane", "outcome"])
        for (lane, outcome), n in list(self.requests.items()):
            _add(req, lane, ["outcome"], [outcome], n)
        yield req
        tok = CounterMetricFamily(
            "loadgen_output_tokens",
            "Output tokens received, by user: counted as they arrive, settled to the server's count at the end.",
            labels=["lane", "user"])
        for (lane, user), n in self._token_totals().items():
            _add(tok, lane, ["user"], [user], n)
        yield tok
        totals = list(self.runtime_totals.items())
        for family, help_text, _ in RUNTIME_COUNTERS:
            counter = CounterMetricFamily(family, help_text, labels=["lane"])
            for (name, lane), n in totals:
                if name == family:
                    _add(counter, lane, [], [], n)
            yield counter
        for kind, name in HISTOGRAMS.items():
            fam = HistogramMetricFamily(name, _HELP[kind], labels=["lane"])
            for (k, lane), h in list(self.hist.items()):
                if k == kind:
                    buckets, total = h.buckets()
                    _add(fam, lane, [], [], buckets, total)
            yield fam
        infl = GaugeMetricFamily("loadgen_in_flight", "Requests in flight.", labels=["lane"])
        for lane, n in list(self.in_flight.items()):
            _add(infl, lane, [], [], n)
        yield infl
        step = GaugeMetricFamily("loadgen_step_concurrency",
                                 "Concurrency of the step whose measured window is open; 0 outside a window.",
                                 labels=["lane", "run_id"])
        for (lane, run_id), c in list(self.step_concurrency.items()):
            _add(step, lane, ["run_id"], [run_id], c)
        yield step
        self.last_scrape = time.time()
        figures = GaugeMetricFamily(
            "loadgen_step_figure",
            "A finished step's figure, computed exactly from its records (core.step_figures), by name.",
            labels=["lane", "run_id", "concurrency", "rate_rps", "figure"])
        for (lane, run_id, c, rate), values in list(self.step_figures.items()):
            for name, value in values.items():
                _add(figures, lane, ["run_id", "concurrency", "rate_rps", "figure"], [run_id, str(c), rate, name],
                     value)
        yield figures


class MetricsServer:
    """Serves a registry on ``host:port`` (port 0 picks a free one; ``port`` then holds the chosen one)."""

    def __init__(self, registry: CollectorRegistry, port: int = 0, host: str = "127.0.0.1") -> None:
        from prometheus_client import start_http_server

        server, thread = start_http_server(port, addr=host, registry=registry)
        self._server = server
        self._thread = thread
        self.host = host
        self.port = int(server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=2.0)
