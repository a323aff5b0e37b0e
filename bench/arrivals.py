"""How exactly the load generator keeps an open-loop schedule: at 50, 200 and 1000 requests/s against the
simulator, the p99 of |actual send - intended send| and the inter-arrival distribution's fit to the process
asked for, beside the floor this machine's event loop allows, measured in the same run.

- the load generator: ``LadderRunner`` walks one short closed rung, then one open-loop rung per rate
  (``arrival.rates``) against ``satbench sim`` in its own process (256 slots, 100x faster than real time, 4
  output tokens, so the server never queues and the figure is the client's alone); the lag is each window
  request's ``sent_at - intended_at`` from ``records.jsonl``;
- the floor: a bare asyncio loop in this process that sleeps until each intended time of the same schedule
  and notes how late it woke (no request, no parsing: the event loop's own timer precision on this machine);
- the fit: Kolmogorov-Smirnov of the intended gaps and of the actual send gaps against the process's own
  gap distribution (exponential for Poisson, gamma of the shape asked), with the statistic D and its p-value
  (at 1000/s the actual gaps carry the client's jitter, a fraction of a mean gap of 1 ms).

    .venv/bin/python bench/arrivals.py                  # poisson at 50, 200, 1000 /s, 6 s windows
    .venv/bin/python bench/arrivals.py --process gamma --shape 0.5 --rates 50,200

It prints figures and ratios and exits 0 (benchmarks report, tests assert).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import select
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _serve import serving  # noqa: E402

from satbench.core.arrivals import ArrivalStream, schedule  # noqa: E402
from satbench.core.loops import fast_loop_factory  # noqa: E402
from satbench.core.records import read_records  # noqa: E402
from satbench.core.statistics import quantile  # noqa: E402
from satbench.loadgen.config import LoadgenConfig  # noqa: E402
from satbench.loadgen.pacer import TimerFd  # noqa: E402
from satbench.loadgen.runner import LadderRunner  # noqa: E402
from testkit.sim import SimulatorProcess  # noqa: E402


async def loop_lags(process: str, rate: float, seconds: float, shape: float) -> list[float]:
    """How late a bare asyncio loop's ``sleep`` wakes for each intended time of the schedule."""
    stream = ArrivalStream(process, rate, "floor", shape)
    start = time.perf_counter()
    lags = []
    while (offset := stream.next_offset()) < seconds:
        delay = start + offset - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        lags.append(max(0.0, time.perf_counter() - start - offset))
    return lags


def kernel_lags(process: str, rate: float, seconds: float, shape: float) -> list[float]:
    """The kernel's floor: how late a bare loop blocked on a ``timerfd`` armed at each intended time wakes (no
    event loop, no request: the kernel timer's wake-up and this process's scheduling alone)."""
    timer = TimerFd()
    stream = ArrivalStream(process, rate, "floor", shape)
    start = time.perf_counter_ns() + 1_000_000
    lags = []
    try:
        while (offset := stream.next_offset()) < seconds:
            at = start + int(offset * 1e9)
            if at > time.perf_counter_ns():
                timer.arm(at)
                select.select([timer.fd], [], [])
                timer.clear()
            lags.append(max(0, time.perf_counter_ns() - at) / 1e9)
    finally:
        timer.close()
    return lags


def _fit(gaps: list[float], process: str, rate: float, shape: float) -> tuple[float, float]:
    from scipy import stats

    dist = stats.expon(scale=1 / rate) if process == "poisson" else stats.gamma(shape, scale=1 / (rate * shape))
    result = stats.kstest(gaps, dist.cdf)
    return float(result.statistic), float(result.pvalue)


def walk(url: str, rates: list[float], seconds: float, process: str, shape: float, max_lag_s: float,
         out: Path, workers: int = 1) -> tuple[Any, list[Any]]:
    """One open-loop walk over ``rates`` (each its own rung) on the loop ``satbench loadgen`` runs on."""
    config = LoadgenConfig.model_validate({
        "lanes": [{"name": "sim", "url": url}], "ladder": {"concurrency": [1]},
        "warmup_s": 0.5, "min_window_s": seconds, "max_window_s": seconds, "min_requests": 1,
        "drain_timeout_s": 5.0, "max_loop_lag_s": 1.0, "progress": False,
        "workload": {"output_tokens": {"value": 4}, "prompt_tokens": {"value": 16}},
        "arrival": {"process": process, "rates": rates, "search_steps": 0, "warmup_s": 0.5,
                    "max_window_s": seconds, "max_lag_s": max_lag_s, "workers": workers,
                    **({"burstiness": shape} if process == "gamma" else {})}})
    out.mkdir(parents=True, exist_ok=True)
    runner = LadderRunner(config, out, run_id="20261204T000000Z-arrivals")
    try:
        with asyncio.Runner(loop_factory=fast_loop_factory()) as loop:  # the loop `satbench loadgen` runs on
            manifest = loop.run(runner.run())
    finally:
        runner.close()
    return manifest, list(read_records(out / "records.jsonl"))


@contextlib.contextmanager
def target(kind: str, pin: bool) -> Iterator[str]:
    """The server: the simulator (256 slots, 100x real time) or the stream server (answers at once)."""
    if kind == "stream":
        with serving("testkit.stream_server", pin=pin) as url:
            yield url
        return
    with SimulatorProcess("dense", slots=256, time_scale=0.01) as sim:
        if pin:
            os.sched_setaffinity(sim.child.pid, {1})
            os.sched_setaffinity(0, {0})
        yield sim.url


def overload(url: str, rates: list[float], seconds: float, out: Path, workers: int = 1) -> None:
    """The client past its capacity: its capacity is the highest constant rate it sends within 10 ms of
    schedule at p99 (each rate its own walk, as the ascent stops at the first rung the client could not
    keep; whatever the rung's verdict on its CPU share, which counts the streaming too); then asked for twice that,
    what it sends (the share of its capacity), the longest gap between two sends in the window, and the
    rung's verdict."""
    capacity = None
    for i, rate in enumerate(rates):
        manifest, records = walk(url, [rate], seconds, "constant", 1.0, 0.01, out / f"cap{i}", workers)
        window = next((w for w in manifest.windows("sim") if w.rate_rps == rate), None)
        sent = _sent_rate(records, window)
        lags = sorted(r.sent_at - (r.intended_at or 0.0) for r in records
                      if window is not None and r.intended_at is not None and window.contains(r.intended_at))
        print(f"  constant {rate:7g}/s: sent {sent:7.0f}/s, lag p50 {(quantile(lags, 0.5) or 0) * 1000:.3f} ms, "
              f"p99 {(quantile(lags, 0.99) or 0) * 1000:.3f} ms, max {max(lags, default=0) * 1000:.1f} ms: "
              f"{window.reason or 'valid' if window is not None else 'no window'}")
        ok = bool(lags) and (quantile(lags, 0.99) or 0.0) <= 0.01
        if not ok:
            break
        capacity = sent
    if capacity is None:
        print("  no rate kept: no capacity to overload")
        return
    asked = 2 * capacity
    manifest, records = walk(url, [asked], seconds, "constant", 1.0, 0.01, out / "over", workers)
    window = next((w for w in manifest.windows("sim") if w.rate_rps == asked), None)
    sends = sorted(r.sent_at for r in records if r.rate_rps == asked and window is not None
                   and window.start <= r.sent_at <= window.end)
    sent = _sent_rate(records, window)
    gap = max((b - a for a, b in itertools.pairwise(sends)), default=0.0)
    print(f"capacity {capacity:.0f}/s; asked {asked:.0f}/s: sent {sent:.0f}/s ({sent / capacity:.0%} of capacity), "
          f"longest gap between sends {gap * 1000:.1f} ms, rung "
          f"{'valid' if window is not None and window.valid else window.reason if window is not None else 'missing'}")


def _sent_rate(records: list[Any], window: Any) -> float:
    if window is None or window.end <= window.start:
        return 0.0
    return sum(1 for r in records if window.start <= r.sent_at <= window.end and r.rate_rps == window.rate_rps) \
        / (window.end - window.start)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="50,200,1000")
    parser.add_argument("--process", choices=("poisson", "gamma"), default="poisson")
    parser.add_argument("--shape", type=float, default=1.0)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--server", choices=("sim", "stream"), default="sim")
    parser.add_argument("--pin", action="store_true",
                        help="the server on CPU 1, this process (the client and the floors) on CPU 0")
    parser.add_argument("--workers", type=int, default=1, help="sender processes (arrival.workers)")
    parser.add_argument("--overload", default="",
                        help="constant rates to find the client's capacity at, then twice it (e.g. 1000,2000,3000)")
    args = parser.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    out = Path(tempfile.mkdtemp(prefix="satbench-arrivals-"))
    with target(args.server, args.pin) as url:
        if args.overload:
            overload(url, [float(r) for r in args.overload.split(",")], args.seconds, out, args.workers)
            return 0
        manifest, records = walk(url, rates, args.seconds, args.process, args.shape, 1.0, out, args.workers)
    print(f"{args.process} arrivals{'' if args.process == 'poisson' else f' (shape {args.shape:g})'}, "
          f"{args.seconds:g} s windows, the {args.server} server in its own process{', pinned' if args.pin else ''}; "
          "lags in ms; kernel: a bare timerfd loop, asyncio: a bare asyncio sleep loop, both in this process after "
          "the walk")
    print(f"{'rate/s':>7} {'sent':>6} {'sent/s':>7} {'lag p50':>8} {'lag p99':>8} {'kernel p99':>10} {'ratio':>6} "
          f"{'asyncio p99':>11} {'KS D intended':>14} {'p':>8} {'KS D actual':>12} {'p':>8}")
    for rate in rates:
        window = next((w for w in manifest.windows("sim") if w.rate_rps == rate), None)
        if window is None:
            print(f"{rate:7g} no window (the search stopped before it)")
            continue
        mine = sorted((r for r in records if r.rate_rps == rate and r.intended_at is not None
                       and window.contains(r.intended_at)), key=lambda r: r.intended_at or 0.0)
        lags = sorted(abs(r.sent_at - (r.intended_at or 0.0)) for r in mine)
        kernel = sorted(kernel_lags(args.process, rate, args.seconds, args.shape))
        floor = sorted(asyncio.run(loop_lags(args.process, rate, args.seconds, args.shape)))
        meant = [r.intended_at or 0.0 for r in mine]
        intended = [b - a for a, b in itertools.pairwise(meant)]
        actual = sorted(r.sent_at for r in mine)
        sent_gaps = [b - a for a, b in itertools.pairwise(actual)]
        d_i, p_i = _fit(intended, args.process, rate, args.shape)
        d_a, p_a = _fit(sent_gaps, args.process, rate, args.shape)
        p99, k99, f99 = (quantile(x, 0.99) or 0.0 for x in (lags, kernel, floor))
        span = (actual[-1] - actual[0]) if len(actual) > 1 else 0.0
        print(f"{rate:7g} {len(mine):6d} {len(actual) / span if span else 0:7.0f} "
              f"{(quantile(lags, 0.5) or 0) * 1000:8.3f} {p99 * 1000:8.3f} {k99 * 1000:10.3f} "
              f"{p99 / max(k99, 1e-6):6.2f} {f99 * 1000:11.3f} {d_i:14.4f} {p_i:8.3f} {d_a:12.4f} {p_a:8.3f}")
    reference = schedule(args.process, rates[0], args.seconds, "reference", args.shape)
    print(f"(reference: the schedule alone draws {len(reference)} sends in {args.seconds:g} s at {rates[0]:g}/s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
