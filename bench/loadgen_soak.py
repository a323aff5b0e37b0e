"""Loadgen soak: one 256-user step against the simulator for 10 minutes, and is its memory flat?

A long window at high concurrency is where a load generator leaks: per-request objects kept for the whole
step, buffers that grow with the stream, a queue that is never drained. This script runs ``satbench
loadgen`` as its own process (one rung of ``--users`` closed-loop users, a window of ``--duration``
seconds, 10 minutes by default) against a simulator (``--slots`` slots, so many requests really run), and
samples the load generator's resident memory (psutil) every ``--sample-s`` seconds.

Printed: RSS at the start of the window, at the end and its maximum; the least-squares slope of RSS over
the window after the first ``--settle`` share of it (MiB/min); requests recorded, their rate, and the slope
per 1,000 requests (what each finished request costs in memory, if anything). "Flat" (the goal, printed
not asserted) is a slope under ``--flat-mib-per-min``.

    .venv/bin/python bench/loadgen_soak.py [--duration 600] [--users 256] [--slots 64]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from testkit.sim import SimulatorProcess  # noqa: E402

MIB = 1 << 20


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of y over x."""
    n = len(points)
    if n < 2:
        return float("nan")
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    var = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / var if var else float("nan")


def count_lines(path: Path) -> int:
    if not path.exists():
        return 0
    with path.open("rb") as fh:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 20), b""))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--duration", type=float, default=600.0, help="window length, s (default 600)")
    parser.add_argument("--users", type=int, default=256)
    parser.add_argument("--slots", type=int, default=64, help="simulator slots")
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--sample-s", type=float, default=2.0)
    parser.add_argument("--settle", type=float, default=0.2, help="share of the window left out of the slope")
    parser.add_argument("--flat-mib-per-min", type=float, default=1.0)
    parser.add_argument("--output-tokens", type=int, default=64)
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="passed to satbench loadgen --set (e.g. gc_pause=false); repeatable")
    args = parser.parse_args()

    with SimulatorProcess("dense", slots=args.slots) as sim, tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        cfg = Path(tmp) / "soak.toml"
        cfg.write_text(
            f"warmup_s = {args.warmup}\nmin_window_s = {args.duration}\nmax_window_s = {args.duration}\n"
            "drain = \"cancel\"\nmetrics_port = 0\nprogress = false\nmax_loop_lag_s = 1.0\n"
            f"[ladder]\nconcurrency = [{args.users}]\n"
            "[workload]\nprompt_tokens = { value = 64 }\n"
            f"output_tokens = {{ value = {args.output_tokens} }}\n"
            f'[[lanes]]\nname = "soak"\nurl = "{sim.url}"\napi = "llamacpp"\n')
        proc = subprocess.Popen([sys.executable, "-m", "satbench.cli", "loadgen", "--config", str(cfg),
                                 "--out", str(out), "--run-id", "soak",
                                 *(f"--set={item}" for item in args.overrides)],
                                cwd=ROOT, stdout=subprocess.DEVNULL)
        ps = psutil.Process(proc.pid)
        t0 = time.monotonic()
        samples: list[tuple[float, float, int]] = []
        try:
            while proc.poll() is None:
                try:
                    rss = ps.memory_info().rss
                except psutil.NoSuchProcess:
                    break
                t = time.monotonic() - t0
                samples.append((t, rss / MIB, count_lines(out / "records.jsonl")))
                if len(samples) % max(1, round(30 / args.sample_s)) == 0:
                    print(f"  t={t:6.0f} s  rss {rss / MIB:7.1f} MiB  records {samples[-1][2]}", flush=True)
                time.sleep(args.sample_s)
        finally:
            if proc.poll() is None:
                proc.terminate()
            proc.wait(timeout=60)
        records = count_lines(out / "records.jsonl")
    window = [(t, m, n) for t, m, n in samples if args.warmup <= t <= args.warmup + args.duration]
    if len(window) < 3:
        print("too few samples in the window")
        return 1
    settled = [s for s in window if s[0] >= args.warmup + args.settle * args.duration]
    per_min = slope([(t / 60.0, m) for t, m, _ in settled])
    per_krec = slope([(n / 1000.0, m) for _, m, n in settled])
    rate = (window[-1][2] - window[0][2]) / max(1e-9, window[-1][0] - window[0][0])
    extra = f" ({', '.join(args.overrides)})" if args.overrides else ""
    print(f"loadgen {args.users} users{extra}, {args.duration:g} s window, simulator {args.slots} slots: "
          f"{records} requests recorded ({rate:.0f}/s in the window)")
    print(f"RSS: window start {window[0][1]:.1f} MiB, end {window[-1][1]:.1f} MiB, "
          f"max {max(m for _, m, _ in samples):.1f} MiB")
    print(f"RSS slope after the first {args.settle:.0%} of the window: {per_min:+.2f} MiB/min, "
          f"{per_krec * 1024:+.1f} KiB per 1000 requests")
    flat = abs(per_min) < args.flat_mib_per_min
    verdict = "met" if flat else "NOT met"
    print(f"goal: flat memory (|slope| < {args.flat_mib_per_min:g} MiB/min) -> {verdict}")
    return 0 if flat else 1


if __name__ == "__main__":
    raise SystemExit(main())
