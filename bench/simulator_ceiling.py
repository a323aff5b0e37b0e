"""How many concurrent streams and tokens/s the simulator sustains on one core, and how far it drifts.

Starts ``satbench sim`` as a subprocess pinned to one CPU core with a wide profile (many slots, a step cost
chosen so the model's throughput is the target tokens/s), drives it with a closed loop of raw-asyncio SSE
clients (no JSON parsing, so the client stays cheap) and prints:

- streams and tokens/s received inside the measurement window, against the model's analytic capacity for
  the same workload (from ``/sim/capacity``): the throughput error;
- the delivery delay of every finished request: the client's receive time of the last token minus the
  model's ``last_token`` in ``/sim/truth`` (p50/p99), and the server loop's own step lag and slips;
- the server's CPU use (fraction of one core) over the window.

Usage: ``python bench/simulator_ceiling.py [--streams 256] [--tok-s 20000] [--seconds 10] [--tokens 256]``.
The goal is ``>= 256`` streams and ``>= 20000`` tokens/s within 2% of the model; the script prints ratios
and exits 0 either way (benchmarks report, tests assert).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from satbench.core.statistics import quantiles  # noqa: E402
from testkit.net import free_port, wait_http  # noqa: E402

PATTERN = b'"stop":false'


def profile_toml(streams: int, tok_s: float) -> str:
    step_ms = streams / tok_s * 1000.0
    return f"""name = "ceiling"
[model]
name = "sim-ceiling.gguf"
[server]
slots = {streams}
ctx_tokens = {streams * 1024}
batch = {max(2048, streams * 64)}
ubatch = {max(512, streams * 64)}
[cost]
step_overhead_ms = 0.0
weights_ms = {step_ms * 0.8:.6f}
decode_ms_per_token = {step_ms * 0.2 / streams:.6f}
prefill_ms_per_token = 0.001
"""


async def user(
    host: str, port: int, uid: int, n_tokens: int, stop_at: float, received: list[tuple[float, int]],
    finished: dict[str, float],
) -> None:  # fmt: skip
    k = 0
    while time.monotonic() < stop_at:
        rid = f"u{uid}-{k}"
        k += 1
        body = json.dumps(
            {"prompt": "bench prompt " * 8, "n_predict": n_tokens, "ignore_eos": True, "stream": True}
        ).encode()
        head = (
            f"POST /completion HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nX-Request-ID: {rid}\r\nConnection: close\r\n\r\n"
        ).encode()
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(head + body)
        tail = b""
        while True:
            data = await reader.read(65536)
            if not data:
                break
            now = time.monotonic()
            chunk = tail + data
            n = chunk.count(PATTERN)
            if n:
                received.append((now, n))
            if b'"stop":true' in chunk:
                finished[rid] = time.time()
            tail = chunk[-(len(PATTERN) - 1) :]
        writer.close()


async def drive(
    host: str, port: int, streams: int, n_tokens: int, seconds: float
) -> tuple[list, dict, float]:
    received: list[tuple[float, int]] = []
    finished: dict[str, float] = {}
    t0 = time.monotonic()
    await asyncio.gather(
        *(user(host, port, i, n_tokens, t0 + seconds, received, finished) for i in range(streams))
    )
    return received, finished, t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--streams", type=int, default=256)
    ap.add_argument("--tok-s", type=float, default=20000.0)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--core", type=int, default=0, help="CPU core the simulator is pinned to")
    args = ap.parse_args()

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as tmp:
        prof = Path(tmp) / "ceiling.toml"
        prof.write_text(profile_toml(args.streams, args.tok_s), encoding="utf-8")
        cmd = [sys.executable, "-m", "satbench.cli", "sim", "--profile", str(prof), "--port", str(port)]
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL)
        try:
            if hasattr(os, "sched_setaffinity"):
                os.sched_setaffinity(proc.pid, {args.core})
                others = sorted(os.sched_getaffinity(0) - {args.core})
                if others:
                    os.sched_setaffinity(0, others)
            wait_http(url + "/health", timeout_s=30)
            ps = psutil.Process(proc.pid)
            cpu0 = ps.cpu_times()
            wall0 = time.monotonic()
            received, finished, t0 = asyncio.run(
                drive("127.0.0.1", port, args.streams, args.tokens, args.seconds)
            )
            cpu1 = ps.cpu_times()
            wall1 = time.monotonic()
            cap = httpx.get(
                url + "/sim/capacity",
                params={"prompt_tokens": 17, "output_tokens": args.tokens, "concurrency": str(args.streams)},
            ).json()["points"][0]
            truth = httpx.get(url + "/sim/truth", params={"capacity": "0"}, timeout=30).json()
        finally:
            proc.kill()
            proc.wait()

    warm = t0 + min(2.0, args.seconds / 4)
    end = t0 + args.seconds
    tokens = sum(n for t, n in received if warm < t <= end)
    tok_s = tokens / (end - warm)
    model_tok_s = cap["throughput_tok_s"]
    delays = [
        finished[r["request_id"]] - r["last_token"]
        for r in truth["requests"]
        if r["request_id"] in finished and r["last_token"] is not None
    ]
    cpu = (cpu1.user + cpu1.system - cpu0.user - cpu0.system) / (wall1 - wall0)
    timing = truth["timing"]
    print(f"streams                 {args.streams}")
    print(
        f"tokens/s (client)       {tok_s:,.0f}   model {model_tok_s:,.0f}   ratio {tok_s / model_tok_s:.4f}"
    )
    print(f"throughput error        {100 * (tok_s / model_tok_s - 1):+.2f}%  (goal within 2%)")
    if delays:
        q = quantiles(delays)
        print(
            f"delivery delay          p50 {1e3 * (q.p50 or 0.0):.2f} ms  p99 {1e3 * (q.p99 or 0.0):.2f} ms"
            f"  ({len(delays)} requests)"
        )
    print(
        f"server loop lag         mean {1e3 * timing['lag_mean_s']:.2f} ms"
        f"  p99 {1e3 * timing['lag_p99_s']:.2f} ms  "
        f"max {1e3 * timing['lag_max_s']:.2f} ms  slips {timing['slips']}"
    )
    served = sum(n for t, n in received)
    cpu_s = cpu1.user + cpu1.system - cpu0.user - cpu0.system
    per_token_us = 1e6 * cpu_s / served if served else float("nan")
    print(
        f"server CPU              {cpu:.2f} cores (pinned to core {args.core}),"
        f" {per_token_us:.1f} us per token"
    )
    print(f"implied one-core limit  {1e6 / per_token_us:,.0f} tokens/s (CPU cost only, load-independent)")
    print(
        f"host load average       {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
        " (figures need an idle host)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
