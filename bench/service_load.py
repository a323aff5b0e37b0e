"""The recommender when its source fails: 200 pollers on a stale 60-lane fleet document, then 2,000 half-open
connections beside them.

The service runs as its own process (``satbench recommender``, records source: a synthetic fleet run of
``--nodes`` nodes x 2 lanes in a temporary ``--runs-dir``, re-analysed every ``--refresh`` s, as a fleet's
recommender does), started with a soft open-files limit of 1,024 (the common default; the hard limit as this
machine has it). Phases, each ``--seconds`` long, with ``--pollers`` persistent HTTP/1.1 clients (raw asyncio
streams, ``--rate`` req/s each, random phase; ``bench/_fleet_service.py``):

1. **fresh**: the document fresh, re-analysed every ``--refresh`` s (a 60-lane analysis is seconds of CPU):
   what the pollers see while the analysis runs beside them.
2. **stale**: the run's records moved away, so each refresh fails (``RecordsUnavailable``) and the last good
   document is served stale with its age. Goal: p99 under 100 ms.
3. **stale + half-open**: ``--half-open`` connections each send half a request head and wait, and are opened
   again whenever the service closes them, while the pollers poll, each on a new connection per request (a
   poller whose connection was dropped must be able to come back). Goal: every poll answered.

Floor: the same pollers against a bare asyncio server (uvloop, its own process) answering every request with
the stale document's bytes (``fleet.py --serve-static``), measured in the same run; the ratio to it is what
carries to other hardware, and so does the service's CPU per answer (its process' CPU over the phase divided
by the answers), which a busy machine's queueing leaves alone. ``--gzip``: the pollers accept gzip (as HTTP
libraries do by default; the floor serves the same gzipped bytes), a sixth of the bytes to move.
``--service-root DIR`` runs another checkout's service (its ``satbench`` package) with this bench, for a
before/after comparison. Goals are printed, not asserted; exit 0 unless a phase failed to run.

    .venv/bin/python bench/service_load.py [--nodes 30] [--pollers 200] [--rate 1] [--seconds 20]
        [--half-open 2000] [--refresh 3] [--gzip] [--phases fresh,stale,half-open] [--service-root DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _fleet_analysis import fleet_lanes  # noqa: E402
from _fleet_common import HTTP_TIMEOUT_S, child, cpu_s, stop_process  # noqa: E402
from _fleet_service import FLEET_PY, Polled, _get, poll  # noqa: E402

from satbench.answer.document import read_document  # noqa: E402
from satbench.core.records import write_records  # noqa: E402
from testkit.net import free_port, wait_http  # noqa: E402
from testkit.pacing import paced  # noqa: E402
from testkit.synthetic import simulate_run  # noqa: E402

GOAL_P99_S = 0.100
DEFAULT_SOFT_NOFILE = 1024


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e3:.1f} ms"


def _line(name: str, got: Polled, floor: Polled | None = None) -> str:
    p50, p99 = got.pct(0.5), got.pct(0.99)
    ratio = ""
    if floor is not None and p99 is not None and (f99 := floor.pct(0.99)):
        ratio = f", p99 {p99 / f99:.1f}x the floor's"
    errors = sum(got.errors.values())
    per_answer = f", {got.server_cpu_s / len(got.latencies) * 1e3:.2f} ms server CPU an answer" if got.latencies else ""
    return (f"{name:<26} {len(got.latencies):>6} ok {errors:>5} errors  p50 {_ms(p50):>10}  p99 {_ms(p99):>10}"
            f"{ratio}  ({got.cpu_note()}{per_answer}){'  ' + str(dict(got.errors)) if errors else ''}")


@contextlib.contextmanager
def recommender(root: Path, runs: Path, refresh_s: float, log: Path) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """``satbench recommender`` of checkout ``root`` on a free port, its soft open-files limit 1,024."""
    port = free_port()
    argv = [sys.executable, "-m", "satbench.cli", "recommender", "--prometheus-url", "none", "--runs-dir",
            str(runs), "--port", str(port), "--refresh-interval", f"{refresh_s:g}"]
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]

    def default_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(DEFAULT_SOFT_NOFILE, hard), hard))

    env = {**os.environ, "PYTHONPATH": str(root)}
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, preexec_fn=default_limit)
        try:
            yield port, proc
        finally:
            stop_process(proc)


def wait_document(url: str, proc: subprocess.Popen[bytes], log: Path, state: str, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/healthz", timeout=HTTP_TIMEOUT_S).json().get("document") == state:
                return
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the recommender never served a {state} document:\n"
                               f"{log.read_text(errors='replace')[-2000:]}")
        time.sleep(0.5)


# -- pollers on a new connection per request, and half-open connections ----------------------------------------
async def _reconnecting_poller(port: int, rate: float, start: asyncio.Event, until: list[float], out: Polled,
                               gzipped: bool) -> None:
    request = (b"GET /recommendations HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
               + (b"Accept-Encoding: gzip\r\n" if gzipped else b"") + b"\r\n")
    async for _ in paced(rate, start, until):
        t = time.perf_counter()
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), HTTP_TIMEOUT_S)
        except (OSError, TimeoutError) as exc:
            out.errors[f"connect: {type(exc).__name__}"] += 1
            continue
        try:
            _, status = await _get(reader, writer, request)
            if status.startswith(b"HTTP/1.1 200"):
                out.latencies.append(time.perf_counter() - t)
            else:
                out.errors[status.decode(errors="replace")] += 1
        except (OSError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
            out.errors[f"request: {type(exc).__name__}"] += 1
        finally:
            writer.close()


class HalfOpen:
    """``count`` connections that send half a request head and wait; each is opened again when the server
    closes it (``closed_by_server`` counts those), until ``stop``."""

    def __init__(self, port: int, count: int) -> None:
        self.port, self.count = port, count
        self.open = 0
        self.peak = 0
        self.closed_by_server = 0
        self.refused = 0
        self.stop = asyncio.Event()

    async def _one(self) -> None:
        while not self.stop.is_set():
            try:
                reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", self.port), 10)
            except (OSError, TimeoutError):
                self.refused += 1
                await asyncio.sleep(0.5)
                continue
            self.open += 1
            self.peak = max(self.peak, self.open)
            try:
                writer.write(b"GET /recommendations HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                read = asyncio.ensure_future(reader.read(1))
                stopped = asyncio.ensure_future(self.stop.wait())
                done, _ = await asyncio.wait({read, stopped}, return_when=asyncio.FIRST_COMPLETED)
                if read in done:
                    self.closed_by_server += 1
                for task in (read, stopped):
                    task.cancel()
            except OSError:
                self.closed_by_server += 1
            finally:
                self.open -= 1
                writer.close()

    async def hold(self) -> None:
        await asyncio.gather(*(self._one() for _ in range(self.count)))


async def _attacked(port: int, pollers: int, rate: float, seconds: float, half_open: int,
                   gzipped: bool) -> tuple[Polled, HalfOpen]:
    attack = HalfOpen(port, half_open)
    holder = asyncio.create_task(attack.hold())
    await asyncio.sleep(min(10.0, 1.0 + half_open / 500))  # every half-open connection made
    held_at_start = attack.open
    out = Polled(seconds=seconds)
    start, until = asyncio.Event(), [time.perf_counter() + seconds]
    tasks = [asyncio.create_task(_reconnecting_poller(port, rate, start, until, out, gzipped))
             for _ in range(pollers)]
    start.set()
    await asyncio.wait_for(asyncio.gather(*tasks), seconds + 2 * HTTP_TIMEOUT_S)
    attack.peak = max(attack.peak, held_at_start)
    attack.stop.set()
    await asyncio.wait_for(holder, 30)
    return out, attack


def attacked(port: int, pollers: int, rate: float, seconds: float, half_open: int,
             server_pid: int | None, gzipped: bool) -> tuple[Polled, HalfOpen]:
    client0, t0 = time.process_time(), time.perf_counter()
    server0 = cpu_s(server_pid) if server_pid else 0.0
    out, attack = asyncio.run(_attacked(port, pollers, rate, seconds, half_open, gzipped))
    out.client_cpu_s, out.wall_s = time.process_time() - client0, time.perf_counter() - t0
    out.server_cpu_s = cpu_s(server_pid) - server0 if server_pid else 0.0
    return out, attack


def _fresh_floor(body: bytes, tmp: Path, pollers: int, rate: float, seconds: float,
                 gzipped: bool, half_open: int) -> tuple[Polled, Polled, Polled | None]:
    static_file = tmp / "stale.json"
    static_file.write_bytes(gzip.compress(body, compresslevel=1, mtime=0) if gzipped else body)
    port = free_port()
    with child([sys.executable, str(FLEET_PY), "--serve-static", str(static_file), "--port", str(port)],
               tmp / "static.log") as static:
        wait_http(f"http://127.0.0.1:{port}/recommendations", timeout_s=30)
        kept = poll(port, pollers, rate, seconds, static.pid, gzipped=gzipped)
        renewed, _ = attacked(port, pollers, rate, seconds, 0, static.pid, gzipped)
        beside = attacked(port, pollers, rate, seconds, half_open, static.pid, gzipped)[0] if half_open else None
        return kept, renewed, beside


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=30, help="nodes of the fleet run, 2 lanes each")
    parser.add_argument("--pollers", type=int, default=200)
    parser.add_argument("--rate", type=float, default=1.0, help="requests/s per poller")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each phase")
    parser.add_argument("--half-open", type=int, default=2000, dest="half_open")
    parser.add_argument("--refresh", type=float, default=3.0, help="the service's refresh interval (s)")
    parser.add_argument("--service-root", type=Path, default=ROOT, dest="service_root",
                        help="the checkout whose service runs (default: this one)")
    parser.add_argument("--phases", default="fresh,stale,half-open")
    parser.add_argument("--gzip", action="store_true", help="the pollers accept gzip (as HTTP libraries do); the "
                        "floor then serves the gzipped bytes")
    args = parser.parse_args()
    phases = set(args.phases.split(","))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = args.half_open + args.pollers + 256
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, need), hard))

    t = time.perf_counter()
    manifest, records = simulate_run(fleet_lanes(args.nodes), (1, 2, 4, 8), t0=time.time() - 7200, window_s=10.0,
                                     parallel=True)
    tmp = Path(tempfile.mkdtemp(prefix="satbench-service-load-"))
    try:
        run_dir = tmp / "runs" / manifest.run_id
        manifest.write(run_dir / "manifest.json")
        write_records(run_dir / "records.jsonl", records)
        print(f"fleet run: {len(manifest.lane_names())} lanes, {len(records)} records "
              f"({time.perf_counter() - t:.1f} s to write); service from {args.service_root}, refresh every "
              f"{args.refresh:g} s, soft open-files limit {DEFAULT_SOFT_NOFILE} at start (hard {hard})")
        print(f"{args.pollers} pollers at {args.rate:g} req/s{' accepting gzip' if args.gzip else ''}, "
              f"{args.seconds:g} s per phase; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        log = tmp / "recommender.log"
        results: list[str] = []
        with recommender(args.service_root, tmp / "runs", args.refresh, log) as (port, proc):
            url = f"http://127.0.0.1:{port}"
            t = time.perf_counter()
            wait_document(url, proc, log, "fresh")
            body = httpx.get(f"{url}/recommendations", timeout=HTTP_TIMEOUT_S).content
            print(f"first document served {time.perf_counter() - t:.1f} s after start: "
                  f"{len(read_document(json.loads(body)).lanes)} lanes, {len(body) / 1e6:.2f} MB")
            if "fresh" in phases:
                results.append(_line("fresh, re-analysed", poll(port, args.pollers, args.rate, args.seconds,
                                                                 proc.pid, gzipped=args.gzip)))
            shutil.move(run_dir / "records.jsonl", tmp / "records.jsonl.away")
            wait_document(url, proc, log, "stale", timeout_s=120)
            stale_body = httpx.get(f"{url}/recommendations", timeout=HTTP_TIMEOUT_S).content
            stale = (poll(port, args.pollers, args.rate, args.seconds, proc.pid, gzipped=args.gzip)
                     if "stale" in phases else None)
            attack_figures = None
            if "half-open" in phases:
                attack_figures = attacked(port, args.pollers, args.rate, args.seconds, args.half_open, proc.pid,
                                          args.gzip)
            alive = proc.poll() is None
        print(f"load average after: {os.getloadavg()[0]:.1f}")
        floor, floor_renewed, floor_beside = _fresh_floor(stale_body, tmp, args.pollers, args.rate, args.seconds,
                                                          args.gzip, args.half_open if "half-open" in phases else 0)
        for line in results:
            print(line)
        if stale is not None:
            print(_line("stale", stale, floor))
            print(_line("floor (static bytes)", floor))
            met = (stale.pct(0.99) or 1e9) < GOAL_P99_S and not stale.errors
            print(f"goal: p99 under {GOAL_P99_S * 1e3:.0f} ms on the stale document, no error -> "
                  f"{'met' if met else 'NOT met'}")
        if attack_figures is not None:
            got, attack = attack_figures
            print(_line(f"stale + {args.half_open} half-open", got, floor_renewed))
            print(_line("floor, new connections", floor_renewed))
            if floor_beside is not None:  # the bare server never closes them: what holding them costs the pollers
                print(_line(f"floor + {args.half_open} half-open", floor_beside))
            print(f"half-open connections: {attack.peak} held at once, {attack.closed_by_server} closed by the "
                  f"service (at their deadline, or on arrival), {attack.refused} connects refused; service "
                  f"{'alive' if alive else 'DEAD'}")
            answered = len(got.latencies) > 0 and not got.errors
            print(f"goal: every poll answered beside {args.half_open} half-open connections -> "
                  f"{'met' if answered else 'NOT met'}")
        if log.stat().st_size:  # (the write token the service made up is left out)
            tail = [line for line in log.read_text(errors="replace").strip().splitlines()
                    if "need Authorization" not in line][-3:]
            print("service log (last lines): " + " | ".join(tail))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
