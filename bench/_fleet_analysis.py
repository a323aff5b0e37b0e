"""Figure 1 of ``bench/fleet.py``: the synthetic fleet run's lanes and the timing of its analysis.

``measure_analysis`` times ``recommender.run_analysis.analyze_run`` against a backfilled Prometheus, with its
floors (the bare round trips it makes, through its own client and on one raw socket), its fetch and document
parts, one lane alone, and the CPU spent per analysis.
"""

from __future__ import annotations

import asyncio
import cProfile
import io
import pstats
import socket
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _fleet_common import HTTP_TIMEOUT_S, cpu_s  # noqa: E402

from satbench.answer.document import read_document  # noqa: E402
from satbench.answer.policy import Policy  # noqa: E402
from satbench.core.manifest import RunManifest  # noqa: E402
from satbench.recommender.prometheus_source import (  # noqa: E402
    HttpxPromClient,
    PrometheusSourceConfig,
    VectorSample,
    fetch_run_figures,
)
from satbench.recommender.run_analysis import analyze_run, document_from_figures  # noqa: E402
from testkit.backfill import BackfilledPrometheus  # noqa: E402
from testkit.synthetic import SyntheticLane  # noqa: E402

GOAL_ANALYSIS_S = 10.0


def fleet_lanes(nodes: int) -> list[SyntheticLane]:
    width = max(3, len(str(nodes)))
    lanes = []
    for i in range(1, nodes + 1):
        node = f"node-{i:0{width}d}"
        lanes.append(SyntheticLane(f"{node}/dense", slots=4))
        lanes.append(SyntheticLane(f"{node}/moe", slots=8, prefill_s=0.03, itl_s=0.006))
    return lanes


class CountingClient:
    """A ``PromQLClient`` that counts what it forwards."""

    def __init__(self, inner: HttpxPromClient) -> None:
        self.inner = inner
        self.instant = 0
        self.ranged = 0

    async def query(self, expr: str, at: float) -> list[VectorSample]:
        self.instant += 1
        return await self.inner.query(expr, at)

    async def query_range(self, expr: str, start: float, end: float, step_s: float) -> list[list[float]]:
        self.ranged += 1
        return await self.inner.query_range(expr, start, end, step_s)


async def counted_fetch(manifest: RunManifest, url: str, config: PrometheusSourceConfig
                        ) -> tuple[dict[str, Any], int, int, float]:
    async with HttpxPromClient(url, timeout_s=HTTP_TIMEOUT_S) as inner:
        client = CountingClient(inner)
        t = time.perf_counter()
        figures = await fetch_run_figures(client, manifest, config)
        return figures, client.instant, client.ranged, time.perf_counter() - t


async def bare_round_trips(url: str, count: int, in_flight: int) -> float:
    """Seconds for ``count`` instant ``vector(1)`` queries, ``in_flight`` at a time, through the same client."""
    async with HttpxPromClient(url, timeout_s=HTTP_TIMEOUT_S) as client:
        await client.query("vector(1)", time.time())  # the connection, as the analysis' first query opens it
        gate = asyncio.Semaphore(in_flight)
        at = time.time()

        async def one() -> None:
            async with gate:
                await client.query("vector(1)", at)

        t = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(count)))
        return time.perf_counter() - t


def raw_round_trips(url: str, count: int) -> float:
    """Seconds for ``count`` ``vector(1)`` POSTs on one keep-alive socket, one after the other: the plainest
    client there is (no HTTP library), the floor of the analysis' own client."""
    parts = urlsplit(url)
    body = f"query=vector(1)&time={time.time():.3f}".encode()
    request = (b"POST /api/v1/query HTTP/1.1\r\nHost: prometheus\r\n"
               b"Content-Type: application/x-www-form-urlencoded\r\n"
               + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 80), timeout=HTTP_TIMEOUT_S) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buffer = b""

        def one() -> None:
            nonlocal buffer
            sock.sendall(request)
            while b"\r\n\r\n" not in buffer:
                buffer += sock.recv(65536)
            head, _, rest = buffer.partition(b"\r\n\r\n")
            if not head.startswith(b"HTTP/1.1 200"):
                raise RuntimeError(head.split(b"\r\n", 1)[0].decode(errors="replace"))
            length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:"))
            while len(rest) < length:
                rest += sock.recv(65536)
            buffer = rest[length:]

        one()
        t = time.perf_counter()
        for _ in range(count):
            one()
        return time.perf_counter() - t


def one_lane(manifest: RunManifest, key: str) -> RunManifest:
    return manifest.model_copy(update={"steps": tuple(w for w in manifest.steps if w.lane == key),
                                       "lanes": {key: manifest.lanes[key]}})


def profile_analysis(manifest: RunManifest, url: str) -> None:
    prof = cProfile.Profile()
    prof.enable()
    analyze_run(manifest, prometheus_url=url, run_dir=None, policy=Policy())
    prof.disable()
    for key in ("tottime", "cumulative"):
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats(key).print_stats(10)
        lines = buf.getvalue().splitlines()
        start = next((i for i, ln in enumerate(lines) if ln.strip().startswith("ncalls")), 0)
        print(f"\ncProfile of one analysis, top 10 by {key}:")
        print("\n".join(ln for ln in lines[start:] if ln.strip()))


@dataclass
class AnalysisFigures:
    median_s: float
    best_s: float
    bench_cpu_s: float
    prom_cpu_s: float
    fetch_s: float
    document_s: float
    instant: int
    ranged: int
    floor_s: float
    raw_s: float
    one_lane_s: float
    statuses: Counter[str]
    answers: Counter[str]


def measure_analysis(manifest: RunManifest, prom: BackfilledPrometheus, repeat: int, profile: bool
                     ) -> AnalysisFigures:
    policy = Policy()
    config = PrometheusSourceConfig(confidence=policy.confidence)
    prom_pid = prom._proc.pid  # the bench reads the backfilled server's CPU
    analyze_run(manifest, prometheus_url=prom.url, run_dir=None, policy=policy)  # warm: page cache, imports
    timings, fetch_times, floor_times = [], [], []
    doc: dict[str, Any] = {}
    figures: dict[str, Any] = {}
    instant = ranged = 0
    bench_cpu = prom_cpu = 0.0
    for _ in range(repeat):  # each round: the analysis, its fetch alone, its floor; so all see one machine
        cpu0, prom0, t = time.process_time(), cpu_s(prom_pid), time.perf_counter()
        doc = analyze_run(manifest, prometheus_url=prom.url, run_dir=None, policy=policy)
        timings.append(time.perf_counter() - t)
        bench_cpu += (time.process_time() - cpu0) / repeat
        prom_cpu += (cpu_s(prom_pid) - prom0) / repeat
        figures, instant, ranged, fetch_s = asyncio.run(counted_fetch(manifest, prom.url, config))
        fetch_times.append(fetch_s)
        floor_times.append(asyncio.run(bare_round_trips(prom.url, instant + ranged, config.max_in_flight)))
    fetch_s, floor_s = statistics.median(fetch_times), statistics.median(floor_times)
    t = time.perf_counter()
    document_from_figures(manifest, figures, policy=policy, source={"kind": "prometheus", "url": prom.url},
                          generated_at=time.time())
    document_s = time.perf_counter() - t
    raw_s = statistics.median(raw_round_trips(prom.url, instant + ranged) for _ in range(3))
    key = manifest.lane_names()[0]
    single = one_lane(manifest, key)
    one = []
    for _ in range(3):
        t = time.perf_counter()
        analyze_run(single, prometheus_url=prom.url, run_dir=None, policy=policy)
        one.append(time.perf_counter() - t)
    answered = read_document(doc).lanes
    statuses = Counter(str(v.status) for v in answered.values())
    answers = Counter(f"{k.rpartition('/')[2]}={v.recommended_concurrency}" for k, v in answered.items())
    got = AnalysisFigures(statistics.median(timings), min(timings), bench_cpu, prom_cpu, fetch_s, document_s,
                          instant, ranged, floor_s, raw_s, statistics.median(one), statuses, answers)
    if profile or got.median_s > GOAL_ANALYSIS_S:
        profile_analysis(manifest, prom.url)
    return got
