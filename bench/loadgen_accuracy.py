"""Load generator accuracy against server-side truth, beside a minimal plain client measured in the same run.

Goals (issue 3): per-request TTFT and e2e absolute error p95 <= 1 ms at c=1 and 8, <= 3 ms at c=64 (the
opening burst included), p50 bias <= 0.5 ms, throughput within 1% of truth.

Truth is the server's own record per ``X-Request-ID`` (``GET /sim/truth``): arrival, first token and last
token send times. The default target is ``testkit.stream_server`` with ``--record-tokens`` (every token's
send time, so throughput-in-window truth is exact); ``--sim`` uses the embedded simulator instead (token
times between first and last are then interpolated evenly). Errors are client minus server:
``ttft_s - (first_token - arrival)`` and ``e2e_s - (last_token - arrival)``; both sides are differences on
one clock each, so no clock mapping enters them. All requests count, warm-up and opening burst included.

The server's truth is its own clock reading when its handler runs: on a small host where server and client
share cores, a server kept off its core by the client records arrivals late. So by default (2+ CPUs) the
server is pinned to CPU 1 and the client to CPU 0, as if on two hosts; ``--no-pin`` shares them.

    .venv/bin/python bench/loadgen_accuracy.py [--quick] [--sim] [--no-pin] [--concurrency 1,8,64]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _serve import serving, truth_by_id  # noqa: E402

from satbench.core.loops import fast_loop_factory  # noqa: E402
from satbench.core.records import read_records  # noqa: E402
from satbench.core.statistics import quantile  # noqa: E402
from satbench.loadgen.config import LoadgenConfig  # noqa: E402
from satbench.loadgen.runner import run_ladder  # noqa: E402

OUT_TOKENS = 32


def target(sim: bool, pin: bool = False) -> contextlib.AbstractContextManager[str]:
    if sim:
        return serving("satbench.cli", "sim", "--profile", "dense", pin=pin)
    return serving("testkit.stream_server", "--ttft-ms", "20", "--itl-ms", "5", "--record-tokens", pin=pin)


def token_times(row: dict[str, Any]) -> list[float]:
    if row.get("token_times"):
        return list(row["token_times"])
    first, last, n = row.get("first_token"), row.get("last_token"), int(row.get("output_tokens") or 0)
    if first is None or last is None or n == 0:
        return []
    if n == 1:
        return [first]
    return [first + (last - first) * i / (n - 1) for i in range(n)]


def error_stats(pairs: list[tuple[float, float]]) -> dict[str, float | None]:
    errs = sorted(client - server for client, server in pairs)
    abs_errs = sorted(abs(e) for e in errs)

    def to_ms(v: float | None) -> float | None:
        return None if v is None else v * 1e3

    return {"n": len(errs), "bias_p50_ms": to_ms(quantile(errs, 0.5)),
            "abs_p95_ms": to_ms(quantile(abs_errs, 0.95)),
            "abs_max_ms": to_ms(abs_errs[-1] if abs_errs else None)}


async def loadgen_case(url: str, api: str, c: int, window_s: float, out: Path) -> dict[str, Any]:
    cfg = LoadgenConfig.model_validate({
        "lanes": [{"name": "bench", "url": url, "api": api, "model": "bench"}],
        "ladder": {"concurrency": [c]}, "warmup_s": 1.0, "min_window_s": window_s, "max_window_s": window_s,
        "min_requests": 1, "drain_timeout_s": 10.0, "progress": False, "metrics_port": None,
        "workload": {"output_tokens": {"value": OUT_TOKENS}, "prompt_tokens": {"value": 32}},
    })
    manifest = await run_ladder(cfg, out)
    truth = truth_by_id(url)
    records = [r for r in read_records(out / "records.jsonl") if r.ok and r.request_id in truth]
    ttft = [(r.ttft_s, truth[r.request_id]["first_token"] - truth[r.request_id]["arrival"]) for r in records
            if r.ttft_s is not None and truth[r.request_id]["first_token"] is not None]
    e2e = [(r.e2e_s, truth[r.request_id]["last_token"] - truth[r.request_id]["arrival"]) for r in records
           if r.e2e_s is not None and truth[r.request_id]["last_token"] is not None]
    window = manifest.steps[0]
    step = json.loads((out / "steps.json").read_text())[0]
    truth_tokens = sum(1 for row in truth.values() if row["request_id"].startswith(manifest.run_id)
                       for t in token_times(row) if window.start <= t <= window.end)
    truth_tput = truth_tokens / window.duration_s
    return {"ttft": error_stats(ttft), "e2e": error_stats(e2e), "tput": step["throughput_tok_s"],
            "tput_truth": truth_tput, "valid": window.valid, "reason": window.reason or ""}


async def plain_case(url: str, api: str, c: int, duration_s: float) -> dict[str, Any]:
    """The minimal client: c users, one aiohttp session, first chunk with a token = TTFT."""
    path = {"openai-chat": "/v1/chat/completions", "llamacpp": "/completion"}[api]
    marker = b'"content":"'
    prompt = " ".join(["word"] * 32)
    tag = f"plain{int(time.time() * 1000)}"
    results: list[tuple[str, float | None, float]] = []
    stop = time.perf_counter() + duration_s

    async def user(session: aiohttp.ClientSession, u: int) -> None:
        n = 0
        while time.perf_counter() < stop:
            rid = f"{tag}-u{u}-{n}"
            n += 1
            body: dict[str, Any] = {"max_tokens": OUT_TOKENS, "n_predict": OUT_TOKENS, "stream": True,
                                    "ignore_eos": True}
            if api == "openai-chat":
                body["messages"] = [{"role": "user", "content": prompt}]
            else:
                body["prompt"] = prompt
            t0 = time.perf_counter()
            first: float | None = None
            async with session.post(url + path, json=body, headers={"X-Request-ID": rid}) as resp:
                while chunk := await resp.content.readany():
                    if first is None and marker in chunk:
                        first = time.perf_counter() - t0
            results.append((rid, first, time.perf_counter() - t0))

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=c + 4)) as session:
        await asyncio.gather(*(user(session, u) for u in range(c)))
    truth = truth_by_id(url)
    ttft = [(f, truth[r]["first_token"] - truth[r]["arrival"]) for r, f, _ in results
            if f is not None and r in truth and truth[r]["first_token"] is not None]
    e2e = [(e, truth[r]["last_token"] - truth[r]["arrival"]) for r, _, e in results
           if r in truth and truth[r]["last_token"] is not None]
    return {"ttft": error_stats(ttft), "e2e": error_stats(e2e)}


def fmt(stats: dict[str, Any]) -> str:
    def v(x: float | None) -> str:
        return "-" if x is None else f"{x:6.3f}"
    return (f"n={stats['n']:<5} bias {v(stats['bias_p50_ms'])}  |p95| {v(stats['abs_p95_ms'])}  "
            f"max {v(stats['abs_max_ms'])}")


async def main(args: argparse.Namespace) -> None:
    window = 2.0 if args.quick else 5.0
    api = "llamacpp"
    print(f"host: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; target: "
          f"{'simulator dense' if args.sim else 'stream server (ttft 20 ms, itl 5 ms)'}"
          f"{', pinned: server CPU 1, client CPU 0' if args.pin else ', sharing CPUs'}; errors in ms")
    with target(args.sim, args.pin) as url, tempfile.TemporaryDirectory() as tmp:
        for c in [int(x) for x in args.concurrency.split(",")]:
            lg = await loadgen_case(url, api, c, window, Path(tmp) / f"c{c}")
            plain = await plain_case(url, api, c, window + 1.0)
            goal = 1.0 if c <= 8 else 3.0
            ratio = lg["tput"] / lg["tput_truth"] if lg["tput_truth"] else float("nan")
            print(f"c={c:<3} loadgen TTFT {fmt(lg['ttft'])}")
            print(f"      loadgen e2e  {fmt(lg['e2e'])}")
            print(f"      plain   TTFT {fmt(plain['ttft'])}")
            print(f"      plain   e2e  {fmt(plain['e2e'])}")
            print(f"      throughput loadgen {lg['tput']:.1f} tok/s, truth {lg['tput_truth']:.1f} tok/s, "
                  f"ratio {ratio:.4f}; goal |p95| <= {goal} ms, bias <= 0.5 ms, ratio within 1%; "
                  f"step {'valid' if lg['valid'] else 'INVALID: ' + lg['reason']}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--sim", action="store_true", help="measure against the simulator's truth")
    parser.add_argument("--concurrency", default="1,8,64")
    parser.add_argument("--no-pin", dest="pin", action="store_false",
                        help="let server and load generator share every CPU (default: server on CPU 1, load "
                             "generator on CPU 0, as on separate hosts, so the server's truth is not late "
                             "because the client holds its core)")
    parser.set_defaults(pin=(os.cpu_count() or 1) >= 2)
    with asyncio.Runner(loop_factory=fast_loop_factory()) as runner:  # as `satbench loadgen` runs
        runner.run(main(parser.parse_args()))
