"""Recommender under many pollers: 500 concurrent clients on ``GET /recommendations``, and no error.

Every node of a fleet polls the recommender, so it must hold many open connections at once without
refusing, resetting or answering anything but 200. The service runs as its own process (``satbench
recommender``, records source: a synthetic run in a temporary ``--runs-dir``, no Prometheus needed); the
clients are persistent HTTP/1.1 connections on raw asyncio streams, each polling at ``--rate`` requests per
second with a random phase (``--rate 0``: closed loop, as fast as the server answers). A client that hits
an error counts it, reconnects and goes on, so one failure never hides the next.

Goal (printed, not asserted): 0 errors with 500 clients; latency figures are for information.

    .venv/bin/python bench/recommender_load.py [--clients 500] [--rate 2] [--seconds 20]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from satbench.core.records import write_records  # noqa: E402
from satbench.core.statistics import quantiles  # noqa: E402
from testkit.net import free_port, wait_http  # noqa: E402
from testkit.synthetic import SyntheticLane, simulate_run  # noqa: E402


@dataclass
class Tally:
    latencies: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    connected: int = 0

    def error(self, what: str) -> None:
        self.errors[what] = self.errors.get(what, 0) + 1


async def poller(port: int, rate: float, start_by: float, until: float, tally: Tally) -> None:
    request = b"GET /recommendations HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: keep-alive\r\n\r\n"
    period = 1.0 / rate if rate > 0 else 0.0
    await asyncio.sleep(random.random() * max(0.0, start_by - time.perf_counter()))
    next_at = time.perf_counter() + random.random() * period
    while time.perf_counter() < until:
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 10)
        except (OSError, TimeoutError) as exc:
            tally.error(f"connect: {type(exc).__name__}")
            await asyncio.sleep(0.2)
            continue
        tally.connected += 1
        try:
            while time.perf_counter() < until:
                if period:
                    await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
                    next_at += period
                t = time.perf_counter()
                writer.write(request)
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                await asyncio.wait_for(reader.readexactly(length), 30)
                if not head.startswith(b"HTTP/1.1 200"):
                    tally.error(head.split(b"\r\n", 1)[0].decode(errors="replace"))
                    continue
                tally.latencies.append(time.perf_counter() - t)
        except (OSError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
            tally.error(f"request: {type(exc).__name__}")
        finally:
            tally.connected -= 1
            writer.close()


async def load(port: int, clients: int, rate: float, seconds: float, ramp_s: float) -> Tally:
    tally = Tally()
    start = time.perf_counter()
    until = start + ramp_s + seconds
    peak = 0

    async def watch() -> None:
        nonlocal peak
        while time.perf_counter() < until:
            peak = max(peak, tally.connected)
            await asyncio.sleep(0.1)

    await asyncio.gather(watch(), *(poller(port, rate, start + ramp_s, until, tally) for _ in range(clients)))
    print(f"peak simultaneously open client connections: {peak} of {clients}")
    return tally


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--clients", type=int, default=500)
    parser.add_argument("--rate", type=float, default=2.0, help="requests/s per client (0: closed loop)")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--ramp", type=float, default=2.0, help="seconds over which clients connect")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < args.clients + 64:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, args.clients + 256), hard))

    manifest, records = simulate_run((SyntheticLane("dense", slots=4), SyntheticLane("moe", slots=8)),
                                     (1, 2, 4, 8), t0=time.time() - 3600, window_s=10.0)
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / manifest.run_id
        manifest.write(run_dir / "manifest.json")
        write_records(run_dir / "records.jsonl", records)
        port = free_port()
        argv = [sys.executable, "-m", "satbench.cli", "recommender", "--prometheus-url", "none",
                "--runs-dir", tmp, "--port", str(port), "--refresh-interval", "3600"]
        server = subprocess.Popen(argv, cwd=ROOT)
        try:
            url = f"http://127.0.0.1:{port}"
            wait_http(f"{url}/healthz", timeout_s=60)
            httpx.get(f"{url}/runs/{manifest.run_id}", timeout=60).raise_for_status()
            size = len(httpx.get(f"{url}/recommendations", timeout=10).content)
            mode = f"{args.rate:g} req/s each" if args.rate > 0 else "closed loop"
            print(f"recommender pid {server.pid}, document {size} bytes; {args.clients} clients ({mode}), "
                  f"{args.seconds:g} s after a {args.ramp:g} s ramp")
            tally = asyncio.run(load(port, args.clients, args.rate, args.seconds, args.ramp))
        finally:
            server.terminate()
            server.wait(timeout=10)
    lat = tally.latencies
    n_err = sum(tally.errors.values())
    print(f"GET /recommendations: {len(lat)} ok, {n_err} errors {tally.errors or ''}, "
          f"{len(lat) / (args.seconds + args.ramp):.0f} req/s")
    figures = quantiles(lat)
    print(f"latency: p50 {(figures.p50 or math.nan) * 1e3:.2f} ms, p99 {(figures.p99 or math.nan) * 1e3:.2f} ms, "
          f"max {max(lat, default=float('nan')) * 1e3:.2f} ms")
    print(f"goal: 0 errors with {args.clients} clients -> {'met' if n_err == 0 and lat else 'NOT met'}")
    return 0 if n_err == 0 and lat else 1


if __name__ == "__main__":
    raise SystemExit(main())
