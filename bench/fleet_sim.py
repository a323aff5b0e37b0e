"""What a virtual fleet costs: start time, memory and ``/health`` latency of ``satbench sim-fleet``, with one
``satbench sim`` process as the floor.

A fleet test used to need one simulator process per lane; ``satbench sim-fleet`` serves them all from one
process and one event loop (``simulator.fleet``). This prints, for a 50 nodes x 2 lanes fleet (by default)
and for a single ``satbench sim --profile dense``, each in its own child process:

- start: from spawning the process until every lane answers (the fleet: until its URL file appears, which
  it writes once every lane listens, and then every lane's ``/health`` answered once); the fleet's own
  figure for building and binding its apps (its log line) beside it;
- RSS of the serving process once started, the fleet's per-lane cost ((fleet - single) / (lanes - 1)) and
  what as many ``satbench sim`` processes would take;
- idle CPU: the process's CPU over a few idle seconds (idle lanes should cost nothing);
- ``/health`` latency per request from this process over keep-alive raw sockets (no HTTP library, so the
  client costs little): against the single process, against one lane of the fleet, and round-robin over
  every lane of the fleet (p50, p99, mean).

Usage: ``.venv/bin/python bench/fleet_sim.py [--nodes 50] [--lanes dense=dense,moe=moe] [--requests 2000]``.
The machine may be shared: the load average is printed; read the figures with it. Exits 0 either way
(benchmarks report, tests assert).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from satbench.core.net import free_port  # noqa: E402
from satbench.core.statistics import quantiles  # noqa: E402

REQUEST = b"GET /health HTTP/1.1\r\nHost: bench\r\n\r\n"


class RawClient:
    """One keep-alive connection to one server, ``GET /health`` by hand (Content-Length bodies only)."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.sock = socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 80), timeout=10)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = b""

    def health(self) -> float:
        """Seconds for one request and its whole answer."""
        t0 = time.perf_counter()
        self.sock.sendall(REQUEST)
        while b"\r\n\r\n" not in self.buffer:
            self.buffer += self._recv()
        head, _, rest = self.buffer.partition(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(f"/health answered {head.splitlines()[0]!r}")
        length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")[1:]
                      if line.lower().startswith(b"content-length:"))  # fmt: skip
        while len(rest) < length:
            rest += self._recv()
        self.buffer = rest[length:]
        return time.perf_counter() - t0

    def _recv(self) -> bytes:
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("server closed the connection")
        return data

    def close(self) -> None:
        self.sock.close()


@dataclass
class Started:
    proc: subprocess.Popen[bytes]
    urls: list[str]
    start_s: float
    log: str


def _wait_health(urls: Sequence[str], proc: subprocess.Popen[bytes], deadline: float) -> None:
    for url in urls:
        while True:
            with contextlib.suppress(OSError, RuntimeError):
                client = RawClient(url)
                try:
                    client.health()
                    break
                finally:
                    client.close()
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{url} did not answer /health")
            time.sleep(0.02)


@contextlib.contextmanager
def single_sim(timeout_s: float = 60.0) -> Iterator[Started]:
    port = free_port()
    argv = [sys.executable, "-m", "satbench.cli", "sim", "--profile", "dense", "--port", str(port)]
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_health([url], proc, t0 + timeout_s)
        yield Started(proc, [url], time.monotonic() - t0, "")
    finally:
        proc.kill()
        proc.wait(timeout=10)


@contextlib.contextmanager
def fleet_sim(nodes: int, lanes: str, timeout_s: float = 120.0) -> Iterator[Started]:
    with tempfile.TemporaryDirectory() as tmp:
        urls_file, log_file = Path(tmp) / "urls.json", Path(tmp) / "log.txt"
        argv = [sys.executable, "-m", "satbench.cli", "sim-fleet", "--nodes", str(nodes), "--lanes", lanes,
                "--urls-file", str(urls_file)]  # fmt: skip
        with log_file.open("wb") as log:
            t0 = time.monotonic()
            proc = subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        try:
            while not urls_file.exists():
                if proc.poll() is not None or time.monotonic() > t0 + timeout_s:
                    raise RuntimeError(f"sim-fleet did not start: {log_file.read_text()}")
                time.sleep(0.02)
            urls = [u for by_lane in json.loads(urls_file.read_text()).values() for u in by_lane.values()]
            _wait_health(urls, proc, t0 + timeout_s)
            yield Started(proc, urls, time.monotonic() - t0, log_file.read_text().strip())
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


def rss_mib(proc: subprocess.Popen[bytes]) -> float:
    return float(psutil.Process(proc.pid).memory_info().rss) / 2**20


def idle_cpu(proc: subprocess.Popen[bytes], seconds: float) -> float:
    """The process's CPU use over ``seconds`` of idleness, as a fraction of one core."""
    p = psutil.Process(proc.pid)
    before = p.cpu_times()
    time.sleep(seconds)
    after = p.cpu_times()
    return (after.user + after.system - before.user - before.system) / seconds


def latencies(urls: Sequence[str], requests: int) -> list[float]:
    """``requests`` sequential ``/health`` requests spread round-robin over ``urls`` (one connection each)."""
    clients = [RawClient(u) for u in urls]
    try:
        for c in clients:  # warm each connection once
            c.health()
        return [clients[i % len(clients)].health() for i in range(requests)]
    finally:
        for c in clients:
            c.close()


def summary(samples: Sequence[float]) -> str:
    q = quantiles(samples)
    return (f"p50 {(q.p50 or math.nan) * 1e3:.3f} ms  p99 {(q.p99 or math.nan) * 1e3:.3f} ms  "
            f"mean {(q.mean or math.nan) * 1e3:.3f} ms  (n={len(samples)})")  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--lanes", default="dense=dense,moe=moe", help="lane=profile,... per node")
    parser.add_argument("--requests", type=int, default=2000, help="/health requests per latency figure")
    parser.add_argument("--idle-s", type=float, default=3.0, help="seconds of idleness to measure CPU over")
    args = parser.parse_args(argv)
    print(f"host: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}")

    with single_sim() as one:
        one_rss = rss_mib(one.proc)
        one_cpu = max(idle_cpu(one.proc, args.idle_s), 0.0)
        one_lat = latencies(one.urls, args.requests)
    print(f"single satbench sim (floor): start {one.start_s:.2f} s, RSS {one_rss:.1f} MiB, "
          f"idle CPU {one_cpu * 100:.1f}% of a core")  # fmt: skip
    print(f"  /health: {summary(one_lat)}")

    with fleet_sim(args.nodes, args.lanes) as fleet:
        n = len(fleet.urls)
        fleet_rss = rss_mib(fleet.proc)
        fleet_cpu = max(idle_cpu(fleet.proc, args.idle_s), 0.0)
        lat_one = latencies(fleet.urls[:1], args.requests)
        lat_all = latencies(fleet.urls, args.requests)
    per_lane = (fleet_rss - one_rss) / max(n - 1, 1)
    print(f"sim-fleet {args.nodes} nodes x {args.lanes} ({n} lanes, one process): start {fleet.start_s:.2f} s "
          f"to every /health ({fleet.log.splitlines()[-1] if fleet.log else 'no log line'})")
    print(f"  RSS {fleet_rss:.1f} MiB ({per_lane:.2f} MiB per extra lane; {n} satbench sim processes: "
          f"~{n * one_rss:.0f} MiB), idle CPU {fleet_cpu * 100:.1f}% of a core")
    print(f"  /health, one lane: {summary(lat_one)}")
    print(f"  /health, round-robin over {n} lanes: {summary(lat_all)}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
