"""What many scrapers of one exporter cost the node: requests/s reaching ``/health``, ``/metrics``, ``/slots``.

Starts a runtime stand-in on loopback that replays recorded llama-server payloads and counts every request
(``testkit.fixture_runtime``), an exporter subprocess in front of it (``satbench exporter``), and
``--clients`` threads that scrape ``/metrics`` back to back for ``--seconds``. Twice, on the same runtime:

1. ``--read-max-age-s 0``: every scrape reads the node (the exporter before shared reads; the floor);
2. ``--read-max-age-s`` as given (default 0.5, the exporter's default): scrapes within it share one read.

Printed per phase: scrapes/s answered, scrape p50/p99, and the requests/s the node got on each endpoint,
then the ratio of node requests per scrape between the two. Goal: with sharing, each endpoint gets at most
1 / max-age reads/s (2/s at 0.5 s) plus the one in flight, whatever the number of clients.

    .venv/bin/python bench/exporter_shared_reads.py [--clients 16] [--seconds 5] [--max-age 0.5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from satbench.core.statistics import quantiles  # noqa: E402
from testkit.fixture_runtime import FixtureRuntime, LoopbackRuntime  # noqa: E402
from testkit.net import free_port, wait_http  # noqa: E402

PATHS = ("/health", "/metrics", "/slots")


def scrape_phase(url: str, clients: int, seconds: float) -> list[float]:
    """Each client scrapes back to back until ``seconds`` pass; the latency of every scrape."""
    stop_at = time.monotonic() + seconds
    times: list[float] = []
    lock = threading.Lock()
    barrier = threading.Barrier(clients)

    def client() -> None:
        mine = []
        with httpx.Client(timeout=10) as http:
            barrier.wait(timeout=30)
            while time.monotonic() < stop_at:
                t0 = time.perf_counter()
                resp = http.get(url)
                mine.append(time.perf_counter() - t0)
                assert resp.status_code == 200 and "runtime_up 1.0" in resp.text, resp.text[:200]
        with lock:
            times.extend(mine)

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=seconds + 60)
    return times


def phase(runtime: FixtureRuntime, runtime_url: str, max_age: float, clients: int, seconds: float
          ) -> dict[str, float]:
    port = free_port()
    argv = [sys.executable, "-m", "satbench.cli", "exporter", "--runtime-url", runtime_url, "--port", str(port),
            "--gpu", "none", "--read-max-age-s", repr(max_age)]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        wait_http(url, timeout_s=30)
        time.sleep(max_age + 0.1)
        runtime.requests.clear()
        t0 = time.monotonic()
        times = scrape_phase(url, clients, seconds)
        took = time.monotonic() - t0
        counts = Counter(runtime.requests)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    ms = [t * 1000 for t in times]
    per_s = {p: counts[p] / took for p in PATHS}
    print(f"--read-max-age-s {max_age:g}: {clients} clients, {len(times)} scrapes in {took:.1f} s "
          f"({len(times) / took:.0f}/s), scrape p50 {statistics.median(ms):.1f} ms p99 "
          f"{quantiles(ms).p99 or 0.0:.1f} ms")
    print("    node requests/s: " + ", ".join(f"{p} {v:.1f}" for p, v in per_s.items())
          + f"; per scrape {sum(counts[p] for p in PATHS) / max(1, len(times)):.3f}")
    return {"scrapes": len(times), "node": float(sum(counts[p] for p in PATHS)), "took": took,
            **{p: v for p, v in per_s.items()}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--max-age", type=float, default=0.5, help="--read-max-age-s of the second phase")
    args = parser.parse_args()
    folder = ROOT / "tests" / "fixtures" / "llamacpp" / "dense_np4"
    runtime = FixtureRuntime.from_folder(folder)
    with LoopbackRuntime(runtime) as loopback:
        floor = phase(runtime, loopback.url, 0.0, args.clients, args.seconds)
        shared = phase(runtime, loopback.url, args.max_age, args.clients, args.seconds)
    bound = 1 / args.max_age
    worst = max(shared[p] for p in PATHS)
    print(f"node requests per scrape, shared / every-scrape: "
          f"{(shared['node'] / shared['scrapes']) / (floor['node'] / floor['scrapes']):.4f}; "
          f"busiest endpoint {worst:.2f}/s against a bound of {bound:g}/s (+1 read in flight): "
          f"{'yes' if worst <= bound + 1 / shared['took'] else 'NO'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
