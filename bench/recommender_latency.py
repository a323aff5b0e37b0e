"""Recommender speed: analysis of a 2-lane, 8-rung run from a real Prometheus, and cached GET latency.

Goals (printed as ratios against them, not asserted):

* ``analyze_run`` of a 2-lane x 8-rung run from Prometheus in under 1 s;
* ``GET /recommendations`` (cached) p99 under 5 ms with 100 concurrent clients.

The run is synthetic (``testkit.synthetic``), backfilled into a real Prometheus with
``promtool``; the service runs as its own process (``satbench recommender``), so the load generator here
does not share its interpreter. The clients are 100 persistent HTTP/1.1 connections on raw asyncio
streams (the lightest client Python has), each warmed by one unmeasured request, then polling at
``--rate`` requests per second with a random phase; ``--rate 0`` makes them closed-loop (as fast as the
server answers: latency is then queueing, not service time).

    .venv/bin/python bench/recommender_latency.py [--rate 5] [--seconds 10] [--clients 100]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from math import nan
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from satbench.answer.document import read_document  # noqa: E402
from satbench.answer.policy import Policy  # noqa: E402
from satbench.core.statistics import quantiles  # noqa: E402
from satbench.recommender.run_analysis import analyze_run  # noqa: E402
from satbench.recommender.settings import WRITE_TOKEN_ENV  # noqa: E402
from testkit.backfill import BackfilledPrometheus  # noqa: E402
from testkit.net import free_port, wait_http  # noqa: E402
from testkit.openmetrics import openmetrics_text  # noqa: E402
from testkit.pacing import paced  # noqa: E402
from testkit.synthetic import SyntheticLane, simulate_run  # noqa: E402

LADDER = (1, 2, 4, 8, 12, 16, 24, 32)
LANES = (SyntheticLane("dense", slots=4), SyntheticLane("moe", slots=8, prefill_s=0.03, itl_s=0.006))


async def get(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes) -> float:
    t = time.perf_counter()
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    await reader.readexactly(length)
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(head[:100].decode(errors="replace"))
    return time.perf_counter() - t


async def client(host: str, port: int, path: str, rate: float, start: asyncio.Event, until: list[float],
                 out: list[float]) -> None:
    """One persistent connection: one unmeasured request (connection set-up), then the measured ones."""
    reader, writer = await asyncio.open_connection(host, port)
    request = f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: keep-alive\r\n\r\n".encode()
    try:
        await get(reader, writer, request)
        async for _ in paced(rate, start, until):
            out.append(await get(reader, writer, request))
    finally:
        writer.close()


async def load(port: int, clients: int, rate: float, seconds: float) -> list[float]:
    latencies: list[float] = []
    start, until = asyncio.Event(), [0.0]
    tasks = [asyncio.create_task(client("127.0.0.1", port, "/recommendations", rate, start, until, latencies))
             for _ in range(clients)]
    await asyncio.sleep(1.0)
    until[0] = time.perf_counter() + seconds
    start.set()
    await asyncio.gather(*tasks)
    return latencies


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--rate", type=float, default=5.0, help="requests/s per client (0: closed loop)")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--window", type=float, default=10.0, help="step window of the synthetic run, s")
    args = parser.parse_args()

    t0 = float((int(time.time()) // 3600 - 4) * 3600)
    manifest, records = simulate_run(LANES, LADDER, t0=t0, window_s=args.window)
    print(f"synthetic run: {len(LANES)} lanes x {len(LADDER)} rungs, {len(records)} requests")
    with tempfile.TemporaryDirectory() as tmp, BackfilledPrometheus(openmetrics_text(manifest, records),
                                                                    Path(tmp)) as prom:
        timings = []
        doc = {}
        for _ in range(5):
            start = time.perf_counter()
            doc = analyze_run(manifest, prometheus_url=prom.url, run_dir=None, policy=Policy())
            timings.append(time.perf_counter() - start)
        best, median = min(timings), statistics.median(timings)
        answers = {lane: v.recommended_concurrency for lane, v in read_document(doc).lanes.items()}
        print(f"analysis from Prometheus: best {best * 1000:.0f} ms, median {median * 1000:.0f} ms "
              f"(goal 1000 ms: {median / 1.0:.2f}x of budget); answers {answers}")

        port, token = free_port(), secrets.token_urlsafe(16)  # writes need the service's token
        server = subprocess.Popen(
            [sys.executable, "-m", "satbench.cli", "recommender", "--prometheus-url", prom.url,
             "--port", str(port), "--refresh-interval", "3600"], cwd=ROOT, env={**os.environ, WRITE_TOKEN_ENV: token})
        try:
            url = f"http://127.0.0.1:{port}"
            wait_http(f"{url}/healthz", timeout_s=30)
            httpx.post(f"{url}/runs", json=manifest.to_dict(), timeout=60,
                       headers={"Authorization": f"Bearer {token}"}).raise_for_status()
            size = len(httpx.get(f"{url}/recommendations").content)
            single = quantiles(one := asyncio.run(load(port, 1, 0.0, 2.0)))
            print(f"GET /recommendations ({size} bytes), 1 client closed-loop: "
                  f"p50 {(single.p50 or nan) * 1e3:.2f} ms, p99 {(single.p99 or nan) * 1e3:.2f} ms, "
                  f"{len(one) / 2.0:.0f} req/s")
            lat = asyncio.run(load(port, args.clients, args.rate, args.seconds))
            figures = quantiles(lat)
            p50, p99 = figures.p50 or nan, figures.p99 or nan
            mode = f"{args.rate:g} req/s each" if args.rate > 0 else "closed loop"
            print(f"GET /recommendations, {args.clients} clients ({mode}): {len(lat)} requests, "
                  f"{len(lat) / args.seconds:.0f} req/s, p50 {p50 * 1e3:.2f} ms, p99 {p99 * 1e3:.2f} ms, "
                  f"max {max(lat) * 1e3:.2f} ms (goal p99 5 ms: {p99 / 0.005:.2f}x of budget)")
        finally:
            server.terminate()
            server.wait(timeout=10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
