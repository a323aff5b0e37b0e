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
import itertools
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from satbench.core.arrivals import ArrivalStream, schedule  # noqa: E402
from satbench.core.records import read_records  # noqa: E402
from satbench.core.statistics import quantile  # noqa: E402
from satbench.loadgen.config import LoadgenConfig  # noqa: E402
from satbench.loadgen.runner import LadderRunner  # noqa: E402
from testkit.sim import SimulatorProcess  # noqa: E402


async def floor_lags(process: str, rate: float, seconds: float, shape: float) -> list[float]:
    """How late a bare asyncio loop wakes for each intended time of the schedule (the timer's floor)."""
    stream = ArrivalStream(process, rate, "floor", shape)
    start = time.perf_counter()
    lags = []
    while (offset := stream.next_offset()) < seconds:
        delay = start + offset - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        lags.append(max(0.0, time.perf_counter() - start - offset))
    return lags


def _fit(gaps: list[float], process: str, rate: float, shape: float) -> tuple[float, float]:
    from scipy import stats

    dist = stats.expon(scale=1 / rate) if process == "poisson" else stats.gamma(shape, scale=1 / (rate * shape))
    result = stats.kstest(gaps, dist.cdf)
    return float(result.statistic), float(result.pvalue)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="50,200,1000")
    parser.add_argument("--process", choices=("poisson", "gamma"), default="poisson")
    parser.add_argument("--shape", type=float, default=1.0)
    parser.add_argument("--seconds", type=float, default=6.0)
    args = parser.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    out = Path(tempfile.mkdtemp(prefix="satbench-arrivals-"))
    with SimulatorProcess("dense", slots=256, time_scale=0.01) as sim:
        config = LoadgenConfig.model_validate({
            "lanes": [{"name": "sim", "url": sim.url}], "ladder": {"concurrency": [1]},
            "warmup_s": 0.5, "min_window_s": args.seconds, "max_window_s": args.seconds, "min_requests": 1,
            "drain_timeout_s": 5.0, "max_loop_lag_s": 1.0, "progress": False,
            "workload": {"output_tokens": {"value": 4}, "prompt_tokens": {"value": 16}},
            "arrival": {"process": args.process, "rates": rates, "search_steps": 0, "warmup_s": 0.5,
                        "max_window_s": args.seconds, "max_lag_s": 1.0,
                        **({"burstiness": args.shape} if args.process == "gamma" else {})}})
        runner = LadderRunner(config, out, run_id="20261204T000000Z-arrivals")
        try:
            manifest = asyncio.run(runner.run())
        finally:
            runner.close()
    records = list(read_records(out / "records.jsonl"))
    print(f"{args.process} arrivals{'' if args.process == 'poisson' else f' (shape {args.shape:g})'}, "
          f"{args.seconds:g} s windows, simulator in its own process; lags in ms")
    print(f"{'rate/s':>7} {'sent':>6} {'lag p50':>8} {'lag p99':>8} {'floor p99':>9} {'ratio':>6} "
          f"{'KS D intended':>14} {'p':>8} {'KS D actual':>12} {'p':>8}")
    for rate in rates:
        window = next((w for w in manifest.windows("sim") if w.rate_rps == rate), None)
        if window is None:
            print(f"{rate:7g} no window (the search stopped before it)")
            continue
        mine = sorted((r for r in records if r.rate_rps == rate and r.intended_at is not None
                       and window.contains(r.intended_at)), key=lambda r: r.intended_at or 0.0)
        lags = sorted(abs(r.sent_at - (r.intended_at or 0.0)) for r in mine)
        floor = sorted(asyncio.run(floor_lags(args.process, rate, args.seconds, args.shape)))
        meant = [r.intended_at or 0.0 for r in mine]
        intended = [b - a for a, b in itertools.pairwise(meant)]
        actual = sorted(r.sent_at for r in mine)
        sent_gaps = [b - a for a, b in itertools.pairwise(actual)]
        d_i, p_i = _fit(intended, args.process, rate, args.shape)
        d_a, p_a = _fit(sent_gaps, args.process, rate, args.shape)
        p99, f99 = quantile(lags, 0.99) or 0.0, quantile(floor, 0.99) or 0.0
        print(f"{rate:7g} {len(mine):6d} {(quantile(lags, 0.5) or 0) * 1000:8.2f} {p99 * 1000:8.2f} "
              f"{f99 * 1000:9.2f} {p99 / max(f99, 1e-6):6.1f} {d_i:14.4f} {p_i:8.3f} {d_a:12.4f} {p_a:8.3f}")
    reference = schedule(args.process, rates[0], args.seconds, "reference", args.shape)
    print(f"(reference: the schedule alone draws {len(reference)} sends in {args.seconds:g} s at {rates[0]:g}/s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
