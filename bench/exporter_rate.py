"""Exporter scrape rate under runtime faults: does it answer 10 scrapes/s while a runtime source misbehaves?

``bench/exporter_scrape.py`` measures the healthy cost of a scrape; this script checks the reliability
promise: one slow or disabled runtime source only drops its own series, so the scrape rate holds. It
starts the simulator and one exporter (``satbench exporter``, its own process), keeps ``--users``
closed-loop streams on the runtime, and scrapes ``/metrics`` on a fixed clock of ``--rate`` per second
(each scrape in its own task, so a slow one never delays the next tick; a scrape counts as answered when it
returns 200 within ``--timeout``). The run is cut into phases, one per fault kind injected through
``POST /sim/faults``: none, slow_metrics (``delay_s`` 3 s, above the exporter's 0.5 s budget),
slots_disabled, metrics_disabled, none again.

Printed per phase: scrapes sent/answered, achieved rate, p50/p99/max latency, and the share of scrapes
reporting ``runtime_up 1`` and the phase's source ``*_up 0``. Goal: 10 answered scrapes/s in every phase.

    .venv/bin/python bench/exporter_rate.py [--rate 10] [--phase-s 6] [--users 4]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from satbench.core.statistics import quantiles  # noqa: E402
from testkit.net import free_port, wait_http  # noqa: E402
from testkit.sim import SimulatorProcess  # noqa: E402

PHASES: list[tuple[str, dict[str, object] | None, str | None]] = [
    ("healthy", None, None),
    ("slow_metrics", {"kind": "slow_metrics", "delay_s": 3.0}, "runtime_metrics_up"),
    ("slots_disabled", {"kind": "slots_disabled"}, "runtime_slots_up"),
    ("metrics_disabled", {"kind": "metrics_disabled"}, "runtime_metrics_up"),
    ("healthy again", None, None),
]


@dataclass
class Phase:
    name: str
    sent: int = 0
    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    runtime_up: int = 0
    source_down: int = 0


def gauge(text: str, name: str) -> float | None:
    m = re.search(rf"^{name} ([0-9.eE+-]+)$", text, re.MULTILINE)
    return float(m.group(1)) if m else None


async def users(url: str, n: int, until: float) -> None:
    body = {"prompt": "the of and to in " * 8, "n_predict": 32, "stream": True, "ignore_eos": True}

    async def one(client: httpx.AsyncClient) -> None:
        while time.monotonic() < until:
            try:
                async with client.stream("POST", f"{url}/completion", json=body) as resp:
                    async for _ in resp.aiter_bytes():
                        pass
            except httpx.HTTPError:
                await asyncio.sleep(0.1)

    async with httpx.AsyncClient(timeout=30) as client:
        await asyncio.gather(*(one(client) for _ in range(n)))


async def scrape(client: httpx.AsyncClient, url: str, phase: Phase, source: str | None,
                 timeout: float) -> None:
    phase.sent += 1
    t = time.perf_counter()
    try:
        resp = await client.get(url, timeout=timeout)
    except httpx.HTTPError:
        phase.errors += 1
        return
    if resp.status_code != 200:
        phase.errors += 1
        return
    phase.latencies.append(time.perf_counter() - t)
    phase.runtime_up += gauge(resp.text, "runtime_up") == 1.0
    if source is not None:
        phase.source_down += gauge(resp.text, source) == 0.0


async def run(sim_url: str, exporter_url: str, args: argparse.Namespace) -> list[tuple[Phase, str | None]]:
    total = args.phase_s * len(PHASES)
    load = asyncio.create_task(users(sim_url, args.users, time.monotonic() + total + 1))
    out: list[tuple[Phase, str | None]] = []
    period = 1.0 / args.rate
    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=64)) as client:
        for name, fault, source in PHASES:
            faults = [] if fault is None else [{**fault, "start_s": 0, "duration_s": args.phase_s + 1}]
            await client.post(f"{sim_url}/sim/faults", json={"faults": faults})
            phase = Phase(name)
            tasks = []
            start = time.perf_counter()
            tick = 0
            while (now := time.perf_counter()) < start + args.phase_s:
                tasks.append(asyncio.create_task(scrape(client, exporter_url, phase, source, args.timeout)))
                tick += 1
                await asyncio.sleep(max(0.0, start + tick * period - now - (time.perf_counter() - now)))
            await asyncio.gather(*tasks)
            out.append((phase, source))
    await load
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rate", type=float, default=10.0, help="scrapes per second")
    parser.add_argument("--phase-s", type=float, default=6.0, help="seconds per fault phase")
    parser.add_argument("--users", type=int, default=4, help="closed-loop streams on the runtime")
    parser.add_argument("--timeout", type=float, default=1.0, help="a scrape slower than this failed, s")
    args = parser.parse_args()
    with SimulatorProcess("dense") as sim:
        port = free_port()
        argv = [sys.executable, "-m", "satbench.cli", "exporter", "--runtime-url", sim.url,
                "--port", str(port)]
        exporter = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL)
        try:
            url = f"http://127.0.0.1:{port}/metrics"
            wait_http(url, timeout_s=30)
            results = asyncio.run(run(sim.url, url, args))
        finally:
            exporter.terminate()
            exporter.wait(timeout=10)
    ok_all = True
    print(f"exporter scrapes at {args.rate:g}/s, {args.phase_s:g} s per phase, "
          f"{args.users} users on the runtime")
    for phase, source in results:
        answered = len(phase.latencies)
        rate = answered / args.phase_s
        ok = rate >= 0.95 * args.rate and phase.errors == 0
        ok_all &= ok
        down = f", {source} 0 in {phase.source_down}/{answered}" if source else ""
        lat = phase.latencies
        figures = quantiles(lat)
        print(f"  {phase.name:16s} sent {phase.sent:4d} answered {answered:4d} ({rate:5.1f}/s, "
              f"{rate / args.rate:.2f}x goal) errors {phase.errors}  p50 {(figures.p50 or math.nan) * 1e3:6.1f} ms "
              f"p99 {(figures.p99 or math.nan) * 1e3:6.1f} ms max {max(lat, default=0) * 1e3:6.1f} ms"
              f"  runtime_up 1 in {phase.runtime_up}/{answered}{down}")
    print(f"goal: {args.rate:g} answered scrapes/s in every phase -> {'met' if ok_all else 'NOT met'}")
    return 0 if ok_all else 1


if __name__ == "__main__":
    raise SystemExit(main())
