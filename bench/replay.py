"""How faithfully a trace is replayed: send times against the scaled trace, prompt lengths against the trace's,
and the simulator's prompt-cache hits against what the trace's ``hash_ids`` imply.

- send times: ``LadderRunner`` replays a window of the Mooncake sample (``examples/traces``) as trace rungs at
  the trace's own rate (1x) and at 10x against ``satbench sim`` in its own process (256 slots, 100x faster than
  real time, so the server never queues and the figure is the client's alone); each window request's error is
  ``sent_at`` against the first send plus the trace's offset over the factor (and the window's period for a
  later pass), its p50 and p99 beside the floor: a bare asyncio loop in this process sleeping until the same
  scaled times (the event loop's own timer precision on this machine), measured in the same run;
- prompt lengths: each answered request's prompt as the simulator's tokenizer counted it against the trace's
  ``input_length`` (one word a token there; a BOS first; a request cut at the drain has no count);
- prompt-cache hits: the dense profile (4 slots, real time) at 1x: the share of prompt tokens the simulator's
  prompt cache served (``cached_prompt_tokens``) against the share the sent sequence's ``hash_ids`` imply for an
  unbounded prefix cache (``Trace.implied_cache_share``), twice: with one prompt per slot (reused only by a
  request that lands on that slot, so short of the unbounded figure where a prefix's slot is busy or
  overwritten) and with llama-server's host-memory prompt cache (``--cache-ram``; the simulator's
  ``[server] cache_ram_tokens``), which keeps the prompts slots give up.

    .venv/bin/python bench/replay.py                   # 30 s of the sample, 1x and 10x
    .venv/bin/python bench/replay.py --length 60 --factors 1,10,20

It prints figures and ratios and exits 0 (benchmarks report, tests assert).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from satbench.core.records import RequestRecord, read_records  # noqa: E402
from satbench.core.statistics import quantile  # noqa: E402
from satbench.loadgen.config import LoadgenConfig  # noqa: E402
from satbench.loadgen.runner import LadderRunner  # noqa: E402
from satbench.loadgen.traces import Trace, read_trace  # noqa: E402
from testkit.sim import InProcessSimulator, SimulatorProcess  # noqa: E402

SAMPLE = ROOT / "examples" / "traces" / "mooncake_sample.jsonl"


async def floor_lags(trace: Trace, factor: float, seconds: float) -> list[float]:
    """How late a bare asyncio loop wakes for each scaled trace time (the timer's floor)."""
    n = len(trace.requests)
    period = n / trace.rate_rps / factor
    start = time.perf_counter()
    lags = []
    i = 0
    while (offset := (i // n) * period + trace.requests[i % n].at_s / factor) < seconds:
        delay = start + offset - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        lags.append(max(0.0, time.perf_counter() - start - offset))
        i += 1
    return lags


def _replay(url: str, trace_path: Path, length: float, factors: list[float], out: Path,
            window_s: float) -> list[RequestRecord]:
    config = LoadgenConfig.model_validate({
        "lanes": [{"name": "sim", "url": url, "api": "llamacpp"}], "ladder": {"concurrency": [1]},
        "warmup_s": 0.5, "min_window_s": window_s, "max_window_s": window_s, "min_requests": 1,
        "drain_timeout_s": 10.0, "max_loop_lag_s": 1.0, "progress": False,
        "workload": {"output_tokens": {"value": 4}, "prompt_tokens": {"value": 16}},
        "arrival": {"warmup_s": 0.5, "max_lag_s": 1.0},
        "trace": {"path": str(trace_path), "length_s": length, "factors": factors, "max_factor": max(factors),
                  "search_steps": 0}})
    runner = LadderRunner(config, out, run_id="20261204T000000Z-replay")
    try:
        asyncio.run(runner.run())
    finally:
        runner.close()
    return list(read_records(out / "records.jsonl"))


def _sent_in_order(records: list[RequestRecord], rate: float) -> list[RequestRecord]:
    """The rung's requests in the order they were scheduled: by the index that ends each request id (two
    requests recorded in the same millisecond have the same intended time)."""
    return sorted((r for r in records if r.rate_rps is not None and abs(r.rate_rps - rate) < 1e-6 * rate
                   and r.intended_at is not None), key=lambda r: int(r.request_id.rsplit("-", 1)[1]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", type=Path, default=SAMPLE)
    parser.add_argument("--length", type=float, default=30.0, help="seconds of the trace replayed")
    parser.add_argument("--factors", default="1,10")
    parser.add_argument("--window", type=float, default=12.0, help="each rung's window, seconds")
    args = parser.parse_args()
    factors = [float(f) for f in args.factors.split(",")]
    trace = read_trace(args.trace).window(0.0, args.length)
    n = len(trace.requests)
    out = Path(tempfile.mkdtemp(prefix="satbench-replay-"))
    with SimulatorProcess("dense", slots=256, time_scale=0.01) as sim:
        records = _replay(sim.url, args.trace, args.length, factors, out / "timing", args.window)
    print(f"{args.trace.name}: {n} requests in {args.length:g} s ({trace.rate_rps:.2f} req/s recorded), "
          f"{args.window:g} s windows, simulator in its own process (256 slots, 100x real time); times in ms")
    print(f"{'factor':>6} {'sent':>5} {'err p50':>8} {'err p99':>8} {'err max':>8} {'floor p99':>9} {'ratio':>6} "
          f"{'prompt = trace':>15} {'within 1':>9}")
    for factor in factors:
        sent = _sent_in_order(records, trace.rate_rps * factor)
        if not sent:
            print(f"{factor:6g} no rung")
            continue
        period = n / trace.rate_rps / factor
        first = sent[0].intended_at or 0.0
        errors = sorted(abs(r.sent_at - (first + (i // n) * period + trace.requests[i % n].at_s / factor))
                        for i, r in enumerate(sent))
        floor = sorted(asyncio.run(floor_lags(trace, factor, 0.5 + args.window)))
        counted = [(r.prompt_tokens, trace.requests[i % n].input_tokens) for i, r in enumerate(sent)
                   if r.ok and r.prompt_tokens is not None]  # a request cut at the drain has no server count
        exact = sum(got == want for got, want in counted)
        close = sum(abs(got - want) <= 1 for got, want in counted)
        p99, f99 = quantile(errors, 0.99) or 0.0, quantile(floor, 0.99) or 0.0
        print(f"{factor:6g} {len(sent):5d} {(quantile(errors, 0.5) or 0) * 1000:8.2f} {p99 * 1000:8.2f} "
              f"{errors[-1] * 1000:8.2f} {f99 * 1000:9.2f} {p99 / max(f99, 1e-6):6.1f} "
              f"{exact:>9d}/{len(counted):<5d} {close:>5d}/{len(counted):<3d}")
    for ram in (0, 1 << 20):  # 4 slots, real time: one prompt per slot, then with a host-memory prompt cache
        local = InProcessSimulator("dense")
        local.profile = dataclasses.replace(local.profile, server=dataclasses.replace(local.profile.server,
                                                                                      cache_ram_tokens=ram))
        with local:
            records = _replay(local.url, args.trace, args.length, [1.0], out / f"cache-{ram}", args.window)
        sent = _sent_in_order(records, trace.rate_rps)
        hits = sum(r.cached_prompt_tokens or 0 for r in sent)
        total = sum(r.prompt_tokens or 0 for r in sent)
        replayed = dataclasses.replace(trace, requests=tuple(trace.requests[i % n] for i in range(len(sent))))
        implied = replayed.implied_cache_share()
        measured = hits / total if total else 0.0
        said = f"--cache-ram of {ram} tokens" if ram else "one prompt per slot"
        print(f"prompt cache at 1x on the dense profile (4 slots, {said}): {measured:.1%} of {total} prompt tokens "
              f"served from the cache, {implied:.1%} implied by the hash_ids of the {len(sent)} requests sent "
              f"(ratio {measured / implied if implied else 0.0:.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
