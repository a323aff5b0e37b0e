"""Scrape cost of the runtime exporter: median and p99 time of GET /metrics, and whether 10 scrapes/s hold.

Starts a runtime (the simulator by default, or replayed llama-server payloads with ``--runtime fixtures``),
an exporter subprocess in front of it (``satbench exporter``), optionally a closed-loop load of
``--users`` on the runtime, then:

1. back-to-back: ``--scrapes`` sequential scrapes, timing each (client-side wall time of the whole GET);
2. paced: scrapes at ``--rate`` per second for ``--paced-s`` seconds; it "sustains" the rate when every
   scrape answered within the period and the achieved rate is within 5% of the target.

Usage: ``.venv/bin/python bench/exporter_scrape.py [--runtime sim|fixtures] [--users 6]``
"""

from __future__ import annotations

import argparse
import math
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from satbench.core.statistics import quantiles  # noqa: E402
from testkit.fixture_runtime import FixtureRuntime, LoopbackRuntime  # noqa: E402
from testkit.net import free_port, wait_http  # noqa: E402
from testkit.sim import SimulatorProcess  # noqa: E402


def load(url: str, users: int, stop: threading.Event) -> list[threading.Thread]:
    def user(i: int) -> None:
        body = {"prompt": f"user {i}", "n_predict": 48, "ignore_eos": True}
        with httpx.Client(timeout=30) as client:
            while not stop.is_set():
                try:
                    client.post(url + "/completion", json=body)
                except httpx.HTTPError:
                    time.sleep(0.05)

    threads = [threading.Thread(target=user, args=(i,), daemon=True) for i in range(users)]
    for t in threads:
        t.start()
    return threads


def measure(exporter_url: str, scrapes: int, rate: float, paced_s: float) -> None:
    with httpx.Client(timeout=5) as client:
        for _ in range(5):
            client.get(exporter_url)
        times = []
        for _ in range(scrapes):
            t0 = time.perf_counter()
            resp = client.get(exporter_url)
            times.append(time.perf_counter() - t0)
            assert resp.status_code == 200 and "runtime_up 1.0" in resp.text, resp.text[:300]
        period = 1.0 / rate
        paced, late = [], 0
        start = time.perf_counter()
        n = int(paced_s * rate)
        for i in range(n):
            target = start + i * period
            now = time.perf_counter()
            if now < target:
                time.sleep(target - now)
            t0 = time.perf_counter()
            client.get(exporter_url)
            took = time.perf_counter() - t0
            paced.append(took)
            late += took > period
        achieved = n / (t0 - start + period)  # n periods, the last one starting at t0
    ms = [t * 1000 for t in times]
    print(
        f"back-to-back scrapes: n={len(ms)} median={statistics.median(ms):.1f} ms "
        f"p99={quantiles(ms).p99 or math.nan:.1f} ms max={max(ms):.1f} ms"
    )
    pm = [t * 1000 for t in paced]
    sustains = late == 0 and achieved >= 0.95 * rate
    print(
        f"paced at {rate:g}/s for {paced_s:g} s: achieved {achieved:.2f}/s, "
        f"median={statistics.median(pm):.1f} ms "
        f"p99={quantiles(pm).p99 or math.nan:.1f} ms, over {period * 1000:.0f} ms: {late}"
    )
    print(
        f"sustains {rate:g} scrapes/s: {'yes' if sustains else 'NO'} "
        f"(median / period = {statistics.median(ms) / (period * 1000):.2f})"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runtime", choices=["sim", "fixtures"], default="sim")
    parser.add_argument("--profile", default="dense")
    parser.add_argument("--users", type=int, default=6, help="closed-loop users on the runtime (sim only)")
    parser.add_argument("--scrapes", type=int, default=200)
    parser.add_argument("--rate", type=float, default=10.0)
    parser.add_argument("--paced-s", type=float, default=10.0)
    args = parser.parse_args()

    def run(runtime_url: str) -> None:
        port = free_port()
        argv = [
            sys.executable,
            "-m",
            "satbench.cli",
            "exporter",
            "--runtime-url",
            runtime_url,
            "--port",
            str(port),
            "--gpu",
            "auto",
        ]
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            url = f"http://127.0.0.1:{port}/metrics"
            wait_http(url, timeout_s=20)
            stop = threading.Event()
            threads = load(runtime_url, args.users, stop) if args.runtime == "sim" and args.users else []
            time.sleep(0.5 if threads else 0)
            what = args.profile if args.runtime == "sim" else "dense_np4 payloads"
            print(
                f"runtime: {args.runtime} ({what}), "
                f"load: {len(threads)} closed-loop users"
            )
            try:
                measure(url, args.scrapes, args.rate, args.paced_s)
            finally:
                stop.set()
                for t in threads:
                    t.join(timeout=30)
        finally:
            proc.terminate()
            proc.wait(timeout=10)

    if args.runtime == "sim":
        with SimulatorProcess(args.profile) as sim:
            run(sim.url)
    else:
        folder = ROOT / "tests" / "fixtures" / "llamacpp" / "dense_np4"
        with LoopbackRuntime(FixtureRuntime.from_folder(folder)) as runtime:
            run(runtime.url)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
