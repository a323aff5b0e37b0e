"""Fleet-scale figures: the recommender, the exporters and Prometheus for 50 nodes x 2 lanes (by default).

Printed as one table (goal, absolute figure, floor measured in the same run, ratio to the floor, ratio to
the goal), because this machine is small and shared: a ratio to a floor taken minutes apart on the same
machine survives a move to other hardware better than the absolute figure does. Nothing is asserted.

1. **Analysis time**: ``recommender.run_analysis.analyze_run`` of a synthetic fleet run (``testkit.synthetic``,
   every lane key ``node-NNN/dense`` and ``node-NNN/moe``, lanes walking a 1/2/4/8 ladder side by side as a
   fleet's load generator does), backfilled into a real Prometheus with ``promtool``; median of ``--repeat``.
   Goal: under 10 s for the whole fleet. Floor: the bare round trips the analysis makes, i.e. as many trivial
   instant queries (``vector(1)``) as it sends (counted by wrapping its PromQL client), through the same
   client, with the same number in flight (``PrometheusSourceConfig.max_in_flight``); that floor has its own
   floor in turn, the same count of round trips on one raw socket (no HTTP library), which shows what the
   client library costs. The table also splits the analysis into its fetch (every step's PromQL) and its
   document (pure Python), gives one lane analysed alone, and the CPU that this process and Prometheus spent
   per analysis (on a 2-core machine their sum bounds the wall time from below).
2. **GET /recommendations p99** with ``--pollers`` persistent HTTP/1.1 clients (raw asyncio streams, each
   polling at ``--rate`` req/s with a random phase) against ``satbench recommender`` as its own process,
   serving that run from ``--runs-dir`` (analysed from the same Prometheus, validity checked every scrape
   interval, as deployed). Goal: p99 under 20 ms. Floor: the same pollers against a bare asyncio protocol
   server (its own process, uvloop as uvicorn uses it) that answers every request with the same bytes. The
   server's and the pollers' CPU during each poll are printed beside them (the pollers share this process).
   Twice: plain, and with ``Accept-Encoding: gzip`` (what an HTTP library sends by default; the service then
   sends its cached gzipped bytes, and the floor serves the same gzipped bytes).
3. **The document's size**, raw and gzipped, and what serialising it costs (the service re-serialises it only
   when some answer's validity changes).
4. **Exporter, Prometheus and simulator CPU**: ``satbench sim-fleet`` serving every lane, one exporter per lane
   (``bench/_fleet_exporters.py``: all in one process here; a real fleet runs one exporter per node, on its
   own host), and a real Prometheus scraping every exporter each ``--scrape-interval`` with the repo's rules
   (``prometheus/rules/``, whose groups evaluate every 1 s whatever the scrape interval), over ``--seconds``;
   CPU from ``psutil`` ``cpu_times`` deltas, as % of one core, and per scrape of one target (scrapes counted
   by Prometheus' own ``prometheus_target_interval_length_seconds_count``), projected to a 1 s scrape.
   Floors, each its own phase with one thing changed: the exporter process serving fixed bytes
   (``--static``: what its collector answered once, gzipped once; the same WSGI server, no collection), and
   Prometheus scraping the same live exporters without the rules.

   The scrape interval is 5 s by default, not 1 s: an exporter scrape costs some 10 ms of CPU here, so 100
   targets a second need more than one core of exporter CPU, which one process (one GIL) cannot give and
   this 2-core machine cannot spare; at 1 s every scrape then times out, threads pile up and the figures
   are of an overload, not of the exporter (``--scrape-interval 1`` shows it; the output warns when fewer
   than 99 % of the scrapes succeed). The CPU per scrape is what carries to a fleet, where each node runs
   its own exporter for its own lanes.

    .venv/bin/python bench/fleet.py [--nodes 50] [--seconds 20] [--pollers 100] [--rate 5] [--quick]

``--quick``: 5 nodes, 5 s phases, 1 s scrapes, one analysis (a smoke run). ``--parts analysis,service,cpu``
picks the figures. ``--profile``: cProfile's top 10 of one analysis (also printed whenever the analysis
misses its goal). Every child process is stopped on exit. Exits 0 unless a part failed (goals are printed,
not asserted).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import gzip
import io
import json
import os
import pstats
import random
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import psutil
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.manifest import RunManifest  # noqa: E402
from exporter.promconfig import EXPORTER_JOB, ScrapeTarget, render_prometheus_config  # noqa: E402
from recommender.policy import Policy  # noqa: E402
from recommender.prometheus_source import (  # noqa: E402
    HttpxPromClient,
    PrometheusSourceConfig,
    VectorSample,
    fetch_run_figures,
)
from recommender.run_analysis import analyze_run, document_from_figures  # noqa: E402
from testkit.backfill import BackfilledPrometheus  # noqa: E402
from testkit.net import free_port, wait_http  # noqa: E402
from testkit.openmetrics import openmetrics_text  # noqa: E402
from testkit.prom import PrometheusProcess  # noqa: E402
from testkit.synthetic import SyntheticLane, simulate_run  # noqa: E402

LADDER = (1, 2, 4, 8)
GOAL_ANALYSIS_S = 10.0
GOAL_P99_S = 0.020
RULES = sorted((ROOT / "prometheus" / "rules").glob("*.yml"))
HTTP_TIMEOUT_S = 30.0


# -- the table ----------------------------------------------------------------------------------------------


@dataclass
class Row:
    figure: str
    absolute: float
    unit: str
    floor: float | None = None
    goal: float | None = None
    note: str = ""


def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "s":
        return f"{value:.2f} s" if value >= 1 else f"{value * 1e3:.0f} ms"
    if unit == "ms":
        return f"{value * 1e3:.2f} ms"
    if unit == "B":
        return f"{value / 1024:.0f} KiB" if value >= 10240 else f"{value:.0f} B"
    if unit == "%":
        return f"{value:.1f} %"
    if unit == "cpu-ms":
        return f"{value * 1e3:.2f} ms"
    return f"{value:g}{unit}"


def ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b <= 0:
        return "-"
    return f"{a / b:.2f}x"


def print_table(rows: Sequence[Row]) -> None:
    head = ("figure", "goal", "absolute", "floor", "x floor", "x goal")
    cells = [(r.figure, fmt(r.goal, r.unit), fmt(r.absolute, r.unit), fmt(r.floor, r.unit),
              ratio(r.absolute, r.floor), ratio(r.absolute, r.goal)) for r in rows]
    widths = [max(len(head[i]), *(len(c[i]) for c in cells)) for i in range(len(head))]
    line = "  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(head, widths, strict=True)))
    print(line)
    print("-" * len(line))
    for cell, row in zip(cells, rows, strict=True):
        text = "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cell, widths, strict=True)))
        print(text + (f"   {row.note}" if row.note else ""))


def machine() -> str:
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"{os.cpu_count()} CPUs, load average {load}"


# -- child processes ----------------------------------------------------------------------------------------


def stop_process(proc: subprocess.Popen[bytes], timeout_s: float = 15.0) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@contextlib.contextmanager
def child(argv: Sequence[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        proc = subprocess.Popen(list(argv), cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
        try:
            yield proc
        finally:
            stop_process(proc)


def wait_file(path: Path, proc: subprocess.Popen[bytes], log: Path, timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited {proc.returncode}:\n{log.read_text(errors='replace')[-2000:]}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {timeout_s:g} s")
        time.sleep(0.1)
    return json.loads(path.read_text(encoding="utf-8"))


def cpu_s(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


# -- 1. the analysis ----------------------------------------------------------------------------------------


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
    statuses = Counter(str(v.get("status")) for v in doc.get("lanes", {}).values())
    answers = Counter(f"{k.rpartition('/')[2]}={v.get('recommended_concurrency')}"
                      for k, v in doc.get("lanes", {}).items())
    got = AnalysisFigures(statistics.median(timings), min(timings), bench_cpu, prom_cpu, fetch_s, document_s,
                          instant, ranged, floor_s, raw_s, statistics.median(one), statuses, answers)
    if profile or got.median_s > GOAL_ANALYSIS_S:
        profile_analysis(manifest, prom.url)
    return got


# -- 2. GET /recommendations under pollers ------------------------------------------------------------------


@dataclass
class Polled:
    latencies: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0
    client_cpu_s: float = 0.0  # over the whole poll (wall_s), set-up and warm-up included
    server_cpu_s: float = 0.0
    wall_s: float = 1.0

    def cpu_note(self) -> str:
        return (f"CPU: server {100 * self.server_cpu_s / self.wall_s:.0f} %, "
                f"pollers {100 * self.client_cpu_s / self.wall_s:.0f} %")

    def pct(self, q: float) -> float | None:
        data = sorted(self.latencies)
        return data[min(len(data) - 1, max(0, round(q * (len(data) - 1))))] if data else None


async def _get(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes) -> tuple[float, bytes]:
    t = time.perf_counter()
    writer.write(request)
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HTTP_TIMEOUT_S)
    length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    await asyncio.wait_for(reader.readexactly(length), HTTP_TIMEOUT_S)
    return time.perf_counter() - t, head.split(b"\r\n", 1)[0]


async def _poller(port: int, rate: float, start: asyncio.Event, until: list[float], out: Polled,
                  gzipped: bool = False) -> None:
    """One persistent connection: one unmeasured request (set-up), then the measured ones at ``rate``;
    ``gzipped``: it accepts gzip, as an HTTP library does by default."""
    accept = b"Accept-Encoding: gzip\r\n" if gzipped else b""
    request = b"GET /recommendations HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: keep-alive\r\n" + accept + b"\r\n"
    period = 1.0 / rate if rate > 0 else 0.0
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), HTTP_TIMEOUT_S)
    except (OSError, TimeoutError) as exc:
        out.errors[f"connect: {type(exc).__name__}"] += 1
        return
    try:
        await _get(reader, writer, request)
        await start.wait()
        next_at = time.perf_counter() + random.random() * period
        while time.perf_counter() < until[0]:
            if period:
                await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
                next_at += period
            took, status = await _get(reader, writer, request)
            if status.startswith(b"HTTP/1.1 200"):
                out.latencies.append(took)
            else:
                out.errors[status.decode(errors="replace")] += 1
    except (OSError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
        out.errors[f"request: {type(exc).__name__}"] += 1
    finally:
        writer.close()


async def _poll(port: int, pollers: int, rate: float, seconds: float, gzipped: bool) -> Polled:
    out = Polled(seconds=seconds)
    start, until = asyncio.Event(), [0.0]
    tasks = [asyncio.create_task(_poller(port, rate, start, until, out, gzipped)) for _ in range(pollers)]
    await asyncio.sleep(min(5.0, 0.5 + pollers / 100))  # every connection opened and warmed
    until[0] = time.perf_counter() + seconds
    start.set()
    await asyncio.wait_for(asyncio.gather(*tasks), seconds + 2 * HTTP_TIMEOUT_S)
    return out


def poll(port: int, pollers: int, rate: float, seconds: float, server_pid: int, gzipped: bool = False) -> Polled:
    """The pollers' latencies, and the CPU the pollers (this process) and the server spent meanwhile."""
    client0, server0, t0 = time.process_time(), cpu_s(server_pid), time.perf_counter()
    out = asyncio.run(_poll(port, pollers, rate, seconds, gzipped))
    out.client_cpu_s, out.server_cpu_s = time.process_time() - client0, cpu_s(server_pid) - server0
    out.wall_s = time.perf_counter() - t0
    return out


class _StaticProtocol(asyncio.Protocol):
    """HTTP/1.1 keep-alive: every request head is answered with the same prepared response."""

    def __init__(self, response: bytes) -> None:
        self.response = response
        self.buffer = b""
        self.transport: Any = None  # uvloop's transports are not asyncio.Transport subclasses

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            self.buffer = self.buffer[end + 4:]
            self.transport.write(self.response)


def serve_static(path: Path, port: int) -> int:
    """The floor of figure 2 (run as ``fleet.py --serve-static FILE --port P``): ``FILE``'s bytes to anyone."""
    body = path.read_bytes()
    response = (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                + f"content-length: {len(body)}\r\n\r\n".encode() + body)
    try:
        import uvloop  # uvicorn's loop where installed: the floor shares the service's loop
        uvloop.install()
    except ImportError:
        pass

    async def run() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: _StaticProtocol(response), "127.0.0.1", port, backlog=1024)
        async with server:
            await server.serve_forever()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run())
    return 0


@dataclass
class ServiceFigures:
    doc_bytes: int
    doc_gzip: int
    serialise_s: float
    service: Polled
    zipped: Polled  # the same pollers accepting gzip (what an HTTP library sends by default)
    floor: Polled
    zipped_floor: Polled
    lanes: int
    schema: str
    ready_s: float


def _recommender(manifest: RunManifest, prom_url: str, tmp: Path, pollers: int, rate: float,
                 seconds: float) -> tuple[bytes, Polled, Polled, float]:
    """One ``satbench recommender`` serving the run from a runs folder, as deployed (validity ticks every
    second): its document once it serves, the pollers against it plain and accepting gzip, and how long it
    took to serve its first document after start."""
    runs = tmp / "runs-deployed"
    manifest.write(runs / manifest.run_id / "manifest.json")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [sys.executable, "-m", "satbench.cli", "recommender", "--prometheus-url", prom_url,
            "--runs-dir", str(runs), "--port", str(port), "--refresh-interval", "3600"]
    log = tmp / "recommender-deployed.log"
    with child(argv, log) as proc:
        t0 = time.perf_counter()
        wait_http(f"{url}/healthz", timeout_s=60)
        deadline = time.monotonic() + 180
        while True:  # the service analyses the run at start (its first refresh tick)
            resp = httpx.get(f"{url}/recommendations", timeout=HTTP_TIMEOUT_S)
            if resp.status_code == 200:
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the recommender never served: {resp.status_code} {resp.text[:300]}\n"
                                   f"{log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.2)
        ready_s = time.perf_counter() - t0
        time.sleep(2.0)  # a validity tick or two: the document as it is served from now on
        body = httpx.get(f"{url}/recommendations", timeout=HTTP_TIMEOUT_S).content
        plain = poll(port, pollers, rate, seconds, proc.pid)
        zipped = poll(port, pollers, rate, seconds, proc.pid, gzipped=True)
        return body, plain, zipped, ready_s


def _static_floor(body: bytes, name: str, tmp: Path, pollers: int, rate: float, seconds: float) -> Polled:
    static_file = tmp / f"{name}.json"
    static_file.write_bytes(body)
    static_port = free_port()
    argv = [sys.executable, str(Path(__file__).resolve()), "--serve-static", str(static_file),
            "--port", str(static_port)]
    with child(argv, tmp / f"static-{name}.log") as static:
        wait_http(f"http://127.0.0.1:{static_port}/recommendations", timeout_s=30)
        return poll(static_port, pollers, rate, seconds, static.pid)


def measure_service(manifest: RunManifest, prom_url: str, tmp: Path, pollers: int, rate: float,
                    seconds: float) -> ServiceFigures:
    body, service, zipped, ready_s = _recommender(manifest, prom_url, tmp, pollers, rate, seconds)
    doc = json.loads(body)
    serialise = []
    for _ in range(5):
        t = time.perf_counter()
        json.dumps(doc, separators=(",", ":")).encode()
        serialise.append(time.perf_counter() - t)
    packed = gzip.compress(body, compresslevel=1, mtime=0)  # what the service sends a gzip poller
    floor = _static_floor(body, "plain", tmp, pollers, rate, seconds)
    zipped_floor = _static_floor(packed, "gzip", tmp, pollers, rate, seconds)
    return ServiceFigures(len(body), len(packed), statistics.median(serialise), service, zipped, floor,
                          zipped_floor, len(doc.get("lanes", {})), str(doc.get("schema")), ready_s)


# -- 4. exporters and Prometheus ----------------------------------------------------------------------------


@dataclass
class Phase:
    name: str
    wall_s: float
    cpu: dict[str, float]
    scrapes: float
    up: float | None
    scrape_mean_s: float | None
    scrape_max_s: float | None
    samples_per_scrape: float | None
    head_series: float | None
    appended: float
    rule_eval_s: float | None
    rule_failures: float | None

    def pct(self, who: str) -> float:
        return 100.0 * self.cpu[who] / self.wall_s

    def per_scrape(self, who: str) -> float | None:
        return self.cpu[who] / self.scrapes if self.scrapes else None


_SELF = {
    "prometheus_tsdb_head_series": "",
    "prometheus_tsdb_head_samples_appended": "_total",
    "prometheus_rule_group_last_duration_seconds": "",
    "prometheus_rule_evaluation_failures": "_total",
    "prometheus_target_interval_length_seconds": "_count",  # one per scrape (after each target's first)
}


def _prom_self(prom: PrometheusProcess) -> dict[str, float]:
    """A few of Prometheus' own series from its ``/metrics``, each summed over its labels."""
    out: dict[str, float] = {}
    text = httpx.get(prom.url + "/metrics", timeout=HTTP_TIMEOUT_S).text
    for family in text_string_to_metric_families(text):
        if family.name in _SELF:
            wanted = family.name + _SELF[family.name]
            out[family.name] = sum(s.value for s in family.samples if s.name == wanted)
    return out


def _one(prom: PrometheusProcess, query: str, at: float) -> float | None:
    value = prom.query_value(query, at)
    return None if value is None else float(value)


def measure_phase(name: str, prom: PrometheusProcess, pids: dict[str, int], targets: int, seconds: float,
                  interval_s: float) -> Phase:
    """CPU of ``pids`` and Prometheus over ``seconds``, once every target has been scraped twice."""
    job = f'job="{EXPORTER_JOB}"'
    deadline = time.monotonic() + 60 + 3 * interval_s
    while (_one(prom, f"count(count_over_time(up{{{job}}}[1h]) >= 2)", time.time()) or 0) < targets:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{name}: not every exporter target was scraped twice in time\n{prom.log()}")
        time.sleep(0.5)
    pids = {**pids, "prometheus": prom.proc.pid if prom.proc else 0}
    before = {who: cpu_s(pid) for who, pid in pids.items()}
    self0 = _prom_self(prom)
    t0 = time.perf_counter()
    start = time.time()
    time.sleep(seconds)
    wall = time.perf_counter() - t0
    cpu = {who: cpu_s(pid) - before[who] for who, pid in pids.items()}
    self1 = _prom_self(prom)
    at = time.time()
    span = f"{max(1, round(at - start))}s"

    def delta(key: str) -> float:
        return self1.get(key, 0.0) - self0.get(key, 0.0)

    up = _one(prom, f"sum(sum_over_time(up{{{job}}}[{span}])) / sum(count_over_time(up{{{job}}}[{span}]))", at)
    return Phase(
        name, wall, cpu, delta("prometheus_target_interval_length_seconds"), up,
        _one(prom, f"avg(avg_over_time(scrape_duration_seconds{{{job}}}[{span}]))", at),
        _one(prom, f"max(max_over_time(scrape_duration_seconds{{{job}}}[{span}]))", at),
        _one(prom, f"avg(scrape_samples_scraped{{{job}}})", at),
        self1.get("prometheus_tsdb_head_series"), delta("prometheus_tsdb_head_samples_appended"),
        self1.get("prometheus_rule_group_last_duration_seconds"), delta("prometheus_rule_evaluation_failures"),
    )


def prometheus_for(exporters: dict[str, dict[str, str]], rules: bool, interval_s: float) -> PrometheusProcess:
    targets = [ScrapeTarget(EXPORTER_JOB, urlsplit(url).netloc, labels={"node": node, "lane": lane})
               for node, lanes in exporters.items() for lane, url in lanes.items()]
    config = render_prometheus_config(targets, rule_files=[], scrape_interval_s=interval_s)
    return PrometheusProcess(config, rule_files=RULES if rules else (), startup_timeout_s=60)


def measure_cpu(nodes: int, seconds: float, interval_s: float, tmp: Path) -> tuple[Phase, Phase, Phase, int]:
    sim_urls, sim_log = tmp / "sim-fleet.json", tmp / "sim-fleet.log"
    sim_argv = [sys.executable, "-m", "satbench.cli", "sim-fleet", "--nodes", str(nodes),
                "--lanes", "dense=dense,moe=moe", "--urls-file", str(sim_urls)]
    exporters_py = str(ROOT / "bench" / "_fleet_exporters.py")

    def exporters_argv(out: Path, static: bool) -> list[str]:
        return [sys.executable, exporters_py, "--urls-file", str(sim_urls), "--out", str(out),
                *(["--static"] if static else [])]

    with child(sim_argv, sim_log) as sim:
        lanes = wait_file(sim_urls, sim, sim_log, timeout_s=120)
        targets = sum(len(v) for v in lanes.values())
        live_out, live_log = tmp / "exporters.json", tmp / "exporters.log"
        with child(exporters_argv(live_out, False), live_log) as live:
            exporters = wait_file(live_out, live, live_log, timeout_s=180)
            pids = {"exporters": live.pid, "sim-fleet": sim.pid}
            print("  phase 'fleet' ...", flush=True)
            with prometheus_for(exporters, True, interval_s) as prom:
                fleet = measure_phase("fleet", prom, pids, targets, seconds, interval_s)
            print("  phase 'no rules' ...", flush=True)
            with prometheus_for(exporters, False, interval_s) as prom:
                no_rules = measure_phase("no rules", prom, pids, targets, seconds, interval_s)
        static_out, static_log = tmp / "static-exporters.json", tmp / "static-exporters.log"
        with child(exporters_argv(static_out, True), static_log) as static:
            exporters = wait_file(static_out, static, static_log, timeout_s=180)
            pids = {"exporters": static.pid, "sim-fleet": sim.pid}
            print("  phase 'static exporters' ...", flush=True)
            with prometheus_for(exporters, True, interval_s) as prom:
                floor = measure_phase("static exporters", prom, pids, targets, seconds, interval_s)
    return fleet, no_rules, floor, targets


# -- main ---------------------------------------------------------------------------------------------------


def timed(what: str, fn: Callable[[], Any]) -> Any:
    t = time.perf_counter()
    out = fn()
    print(f"  {what}: {time.perf_counter() - t:.1f} s", flush=True)
    return out


def analysis_rows(an: AnalysisFigures, n: int, repeat: int) -> list[Row]:
    return [
        Row(f"analysis, {n} lanes (median of {repeat})", an.median_s, "s", an.floor_s, GOAL_ANALYSIS_S,
            f"floor: {an.instant + an.ranged} bare vector(1) round trips"),
        Row(f"  fetch: every window's PromQL (median of {repeat})", an.fetch_s, "s", an.floor_s,
            note=f"{an.instant} instant + {an.ranged} range queries, {PrometheusSourceConfig().max_in_flight} "
                 "in flight"),
        Row("  its floor: the bare round trips, analysis' client", an.floor_s, "s", an.raw_s,
            note=f"httpx, {PrometheusSourceConfig().max_in_flight} in flight; floor: the same count on one raw "
                 "socket, one at a time"),
        Row("  document: analysis in Python", an.document_s, "s"),
        Row("  one lane alone", an.one_lane_s, "s", note=f"x {n} lanes = {an.one_lane_s * n:.1f} s if serial"),
        Row("  CPU of this process per analysis", an.bench_cpu_s, "s",
            note=f"Prometheus: {an.prom_cpu_s:.2f} s CPU per analysis"),
    ]


def service_rows(svc: ServiceFigures, pollers: int) -> list[Row]:
    nan = float("nan")
    return [
        Row(f"GET /recommendations p99, {pollers} pollers", svc.service.pct(0.99) or nan, "ms",
            svc.floor.pct(0.99), GOAL_P99_S,
            note=f"{len(svc.service.latencies)} ok, {sum(svc.service.errors.values())} errors "
                 f"({len(svc.service.latencies) / svc.service.seconds:.0f} req/s); floor: bare asyncio server, "
                 "same bytes"),
        Row("  p50", svc.service.pct(0.5) or nan, "ms", svc.floor.pct(0.5),
            note=f"service {svc.service.cpu_note()}; floor {svc.floor.cpu_note()}"),
        Row("  max", max(svc.service.latencies, default=nan), "ms", max(svc.floor.latencies, default=None)),
        Row("  p99, pollers accepting gzip", svc.zipped.pct(0.99) or nan, "ms", svc.zipped_floor.pct(0.99),
            GOAL_P99_S, note=f"p50 {fmt(svc.zipped.pct(0.5), 'ms')}; {svc.zipped.cpu_note()}; floor: the bare "
                             "server, the same gzipped bytes"),
        Row(f"document size ({svc.schema}, {svc.lanes} lanes)", svc.doc_bytes, "B",
            note=f"{svc.doc_bytes / max(svc.lanes, 1) / 1024:.1f} KiB per lane"),
        Row("  gzipped (level 1, as served)", svc.doc_gzip, "B"),
        Row("  json.dumps of it (when an answer's validity changes)", svc.serialise_s, "ms"),
    ]


def cpu_rows(fleet: Phase, no_rules: Phase, floor: Phase, targets: int, interval_s: float) -> list[Row]:
    nan = float("nan")
    per = fleet.per_scrape("exporters")
    every = f"every {interval_s:g} s"
    rules_pct = fleet.pct("prometheus") - no_rules.pct("prometheus")  # the rules run every 1 s at any interval
    rows = [
        Row(f"exporter process CPU, {targets} targets {every}", fleet.pct("exporters"), "%",
            floor.pct("exporters"), note="% of one core; floor: the same process serving fixed bytes"),
        Row("  exporter CPU per scrape of one target", per or nan, "cpu-ms", floor.per_scrape("exporters")),
        Row(f"  -> {targets} targets every 1 s (projected)", (per or nan) * targets * 100, "%",
            (floor.per_scrape("exporters") or nan) * targets * 100, note="% of one core, all exporters together"),
        Row("  -> one node's exporter, 2 lanes every 1 s", (per or nan) * 2 * 100, "%",
            (floor.per_scrape("exporters") or nan) * 2 * 100, note="% of one core on the node"),
        Row("  scrape duration, mean", fleet.scrape_mean_s or nan, "ms", floor.scrape_mean_s,
            note=f"max {fmt(fleet.scrape_max_s, 'ms')} (floor {fmt(floor.scrape_max_s, 'ms')})"),
        Row(f"Prometheus CPU, with the rules, {every}", fleet.pct("prometheus"), "%", no_rules.pct("prometheus"),
            note="% of one core; floor: the same targets without the rules (they run every 1 s)"),
        Row("  Prometheus CPU per scrape of one target", fleet.per_scrape("prometheus") or nan, "cpu-ms",
            no_rules.per_scrape("prometheus"), note="rules included"),
        Row(f"  -> {targets} targets every 1 s (projected)", rules_pct + (no_rules.per_scrape("prometheus") or nan)
            * targets * 100, "%", (no_rules.per_scrape("prometheus") or nan) * targets * 100,
            note="% of one core: scraping x the rate, plus the rules as measured"),
        Row("sim-fleet CPU (the runtimes)", fleet.pct("sim-fleet"), "%", floor.pct("sim-fleet"),
            note="% of one core; floor: nobody fetching"),
    ]
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each measured phase")
    parser.add_argument("--pollers", type=int, default=100)
    parser.add_argument("--rate", type=float, default=5.0, help="requests/s per poller (0: closed loop)")
    parser.add_argument("--window", type=float, default=10.0, help="step window of the synthetic run, s")
    parser.add_argument("--repeat", type=int, default=3, help="timed analyses (the median is shown)")
    parser.add_argument("--scrape-interval", type=float, default=None,
                        help="exporter scrape interval of the CPU phases (default 5 s, --quick 1 s; see the "
                             "docstring)")
    parser.add_argument("--parts", default="analysis,service,cpu", help="which figures (comma-separated)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 5 nodes, 5 s phases, one analysis")
    parser.add_argument("--profile", action="store_true", help="cProfile's top 10 of one analysis")
    parser.add_argument("--serve-static", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_static is not None:
        return serve_static(args.serve_static, args.port)
    if args.quick:
        args.nodes, args.seconds, args.repeat = 5, 5.0, 1
    if args.scrape_interval is None:
        args.scrape_interval = 1.0 if args.quick else 5.0
    parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 4 * args.pollers + 256:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4 * args.pollers + 1024), hard))

    lanes = fleet_lanes(args.nodes)
    n = len(lanes)
    print(f"fleet: {args.nodes} nodes x 2 lanes = {n} lanes x {len(LADDER)} rungs "
          f"({'/'.join(map(str, LADDER))}), {args.window:g} s windows; {machine()}", flush=True)
    t0 = float((int(time.time()) // 3600 - 3) * 3600)
    rows: list[Row] = []
    failures: list[str] = []
    svc: ServiceFigures | None = None
    phases: tuple[Phase, Phase, Phase, int] | None = None
    with tempfile.TemporaryDirectory(prefix="satbench-fleet-") as tmp_name:
        tmp = Path(tmp_name)
        if parts & {"analysis", "service"}:
            manifest, records = timed("synthetic run", lambda: simulate_run(
                lanes, LADDER, t0=t0, window_s=args.window, parallel=True))
            text = timed("OpenMetrics text", lambda: openmetrics_text(manifest, records))
            print(f"  {len(records)} requests, {len(manifest.steps)} step windows, {len(text) / 1e6:.0f} MB of "
                  f"OpenMetrics ({text.count(chr(10))} lines)", flush=True)
            records.clear()
            (tmp / "backfill").mkdir()
            backfilled = timed("promtool backfill + Prometheus start",
                               lambda: BackfilledPrometheus(text, tmp / "backfill"))
            text = ""
            with backfilled as prom:
                if "analysis" in parts:
                    print("analysis ...", flush=True)
                    try:
                        an = measure_analysis(manifest, prom, args.repeat, args.profile)
                        print(f"  statuses {dict(an.statuses)}; answers {dict(an.answers)}", flush=True)
                        rows += analysis_rows(an, n, args.repeat)
                    except Exception as exc:  # the other figures still come
                        failures.append(f"analysis: {exc!r}")
                if "service" in parts:
                    print(f"GET /recommendations, {args.pollers} pollers ...", flush=True)
                    try:
                        svc = measure_service(manifest, prom.url, tmp, args.pollers, args.rate, args.seconds)
                        rows += service_rows(svc, args.pollers)
                    except Exception as exc:
                        failures.append(f"service: {exc!r}")
        if "cpu" in parts:
            print(f"exporters and Prometheus, 3 phases of {args.seconds:g} s, scrapes every "
                  f"{args.scrape_interval:g} s ...", flush=True)
            try:
                phases = measure_cpu(args.nodes, args.seconds, args.scrape_interval, tmp)
                rows += cpu_rows(*phases, args.scrape_interval)
            except Exception as exc:
                failures.append(f"cpu: {exc!r}")

    print()
    print_table(rows)
    print()
    if phases is not None:
        for ph in phases[:3]:
            print(f"phase {ph.name!r}: {ph.wall_s:.1f} s, {ph.scrapes:.0f} scrapes "
                  f"({100 * (ph.up if ph.up is not None else float('nan')):.1f} % up), "
                  f"{ph.samples_per_scrape or 0:.0f} samples per scrape, {ph.appended / ph.wall_s:.0f} samples/s "
                  f"appended, {ph.head_series or 0:.0f} head series, rule groups last took "
                  f"{fmt(ph.rule_eval_s, 'ms')} in all ({ph.rule_failures or 0:.0f} evaluation failures); CPU "
                  + ", ".join(f"{who} {ph.pct(who):.1f} %" for who in ph.cpu))
            if ph.up is not None and ph.up < 0.99:
                print(f"  WARNING: only {100 * ph.up:.1f} % of the scrapes succeeded: the exporters are "
                      "saturated and the CPU per scrape above is not a steady-state figure")
        print(f"a real fleet runs one exporter per node, on its own host; here all {phases[3]} share one process "
              "(one GIL), so the CPU per scrape is the figure to carry, not the scrape duration")
    if svc is not None:
        if svc.service.errors or svc.zipped.errors or svc.floor.errors or svc.zipped_floor.errors:
            print(f"poll errors: service {dict(svc.service.errors)}, accepting gzip {dict(svc.zipped.errors)}, "
                  f"floors {dict(svc.floor.errors)} {dict(svc.zipped_floor.errors)}")
        print(f"recommender served its first document {svc.ready_s:.1f} s after start (its own analysis "
              "included)")
    for failure in failures:
        print(f"FAILED {failure}")
    print(f"done; {machine()}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
