"""Figures 2 and 3 of ``bench/fleet.py``: GET /recommendations under persistent pollers, and the document's size.

The pollers (raw asyncio streams) measure ``satbench recommender`` as its own process and, as the floor, a bare
asyncio server answering the same bytes (``serve_static``, run as ``fleet.py --serve-static FILE --port P``).
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _fleet_common import HTTP_TIMEOUT_S, child, cpu_s  # noqa: E402

from satbench.answer.document import read_document  # noqa: E402
from satbench.core.manifest import RunManifest  # noqa: E402
from satbench.core.statistics import quantile  # noqa: E402
from testkit.net import free_port, wait_http  # noqa: E402
from testkit.pacing import paced  # noqa: E402

GOAL_P99_S = 0.020
FLEET_PY = Path(__file__).resolve().with_name("fleet.py")  # the --serve-static entry point


@dataclass
class Polled:
    latencies: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0
    client_cpu_s: float = 0.0  # over the whole poll (wall_s), set-up and warm-up included
    server_cpu_s: float = 0.0
    wall_s: float = 1.0

    def cpu_note(self) -> str:
        return (f"CPU: server {100 * self.server_cpu_s / self.wall_s:.0f} %, "
                f"pollers {100 * self.client_cpu_s / self.wall_s:.0f} %")

    def pct(self, q: float) -> float | None:
        return quantile(sorted(self.latencies), q)


async def _get(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes) -> tuple[float, bytes]:
    t = time.perf_counter()
    writer.write(request)
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HTTP_TIMEOUT_S)
    length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    await asyncio.wait_for(reader.readexactly(length), HTTP_TIMEOUT_S)
    return time.perf_counter() - t, head.split(b"\r\n", 1)[0]


async def _poller(port: int, rate: float, start: asyncio.Event, until: list[float], out: Polled,
                  gzipped: bool = False, path: str = "/recommendations") -> None:
    """One persistent connection: one unmeasured request (set-up), then the measured ones at ``rate``;
    ``gzipped``: it accepts gzip, as an HTTP library does by default."""
    accept = b"Accept-Encoding: gzip\r\n" if gzipped else b""
    request = (f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: keep-alive\r\n".encode() + accept
               + b"\r\n")
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), HTTP_TIMEOUT_S)
    except (OSError, TimeoutError) as exc:
        out.errors[f"connect: {type(exc).__name__}"] += 1
        return
    try:
        await _get(reader, writer, request)
        async for _ in paced(rate, start, until):
            took, status = await _get(reader, writer, request)
            if status.startswith(b"HTTP/1.1 200"):
                out.latencies.append(took)
            else:
                out.errors[status.decode(errors="replace")] += 1
    except (OSError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
        out.errors[f"request: {type(exc).__name__}"] += 1
    finally:
        writer.close()


async def _poll(port: int, pollers: int, rate: float, seconds: float, gzipped: bool, path: str) -> Polled:
    out = Polled(seconds=seconds)
    start, until = asyncio.Event(), [0.0]
    tasks = [asyncio.create_task(_poller(port, rate, start, until, out, gzipped, path)) for _ in range(pollers)]
    await asyncio.sleep(min(5.0, 0.5 + pollers / 100))  # every connection opened and warmed
    until[0] = time.perf_counter() + seconds
    start.set()
    await asyncio.wait_for(asyncio.gather(*tasks), seconds + 2 * HTTP_TIMEOUT_S)
    return out


def poll(port: int, pollers: int, rate: float, seconds: float, server_pid: int, gzipped: bool = False,
         path: str = "/recommendations") -> Polled:
    """The pollers' latencies, and the CPU the pollers (this process) and the server spent meanwhile."""
    client0, server0, t0 = time.process_time(), cpu_s(server_pid), time.perf_counter()
    out = asyncio.run(_poll(port, pollers, rate, seconds, gzipped, path))
    out.client_cpu_s, out.server_cpu_s = time.process_time() - client0, cpu_s(server_pid) - server0
    out.wall_s = time.perf_counter() - t0
    return out


class _StaticProtocol(asyncio.Protocol):
    """HTTP/1.1 keep-alive: every request head is answered with the same prepared response."""

    def __init__(self, response: bytes) -> None:
        self.response = response
        self.buffer = b""
        self.transport: Any = None  # uvloop's transports are not asyncio.Transport subclasses

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            self.buffer = self.buffer[end + 4:]
            self.transport.write(self.response)


def serve_static(path: Path, port: int) -> int:
    """The floor of figure 2 (run as ``fleet.py --serve-static FILE --port P``): ``FILE``'s bytes to anyone."""
    body = path.read_bytes()
    response = (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                + f"content-length: {len(body)}\r\n\r\n".encode() + body)
    try:
        import uvloop  # uvicorn's loop where installed: the floor shares the service's loop
        uvloop.install()
    except ImportError:
        pass

    async def run() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: _StaticProtocol(response), "127.0.0.1", port, backlog=1024)
        async with server:
            await server.serve_forever()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run())
    return 0


@dataclass
class ServiceFigures:
    doc_bytes: int
    doc_gzip: int
    serialise_s: float
    service: Polled
    zipped: Polled  # the same pollers accepting gzip (what an HTTP library sends by default)
    floor: Polled
    zipped_floor: Polled
    lanes: int
    schema: str
    ready_s: float
    capabilities: Polled  # GET /capabilities: each lane's capability only
    capabilities_bytes: int
    capabilities_floor: Polled


def _recommender(manifest: RunManifest, prom_url: str, tmp: Path, pollers: int, rate: float,
                 seconds: float) -> tuple[bytes, Polled, Polled, float, bytes, Polled]:
    """One ``satbench recommender`` serving the run from a runs folder, as deployed (validity ticks every
    second): its document once it serves, the pollers against it plain and accepting gzip, and how long it
    took to serve its first document after start; then ``GET /capabilities`` (its bytes, the pollers)."""
    runs = tmp / "runs-deployed"
    manifest.write(runs / manifest.run_id / "manifest.json")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [sys.executable, "-m", "satbench.cli", "recommender", "--prometheus-url", prom_url,
            "--runs-dir", str(runs), "--port", str(port), "--refresh-interval", "3600"]
    log = tmp / "recommender-deployed.log"
    with child(argv, log) as proc:
        t0 = time.perf_counter()
        wait_http(f"{url}/healthz", timeout_s=60)
        deadline = time.monotonic() + 180
        while True:  # the service analyses the run at start (its first refresh tick)
            resp = httpx.get(f"{url}/recommendations", timeout=HTTP_TIMEOUT_S)
            if resp.status_code == 200:
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the recommender never served: {resp.status_code} {resp.text[:300]}\n"
                                   f"{log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.2)
        ready_s = time.perf_counter() - t0
        time.sleep(2.0)  # a validity tick or two: the document as it is served from now on
        body = httpx.get(f"{url}/recommendations", timeout=HTTP_TIMEOUT_S).content
        plain = poll(port, pollers, rate, seconds, proc.pid)
        zipped = poll(port, pollers, rate, seconds, proc.pid, gzipped=True)
        cut = httpx.get(f"{url}/capabilities", timeout=HTTP_TIMEOUT_S).content
        capabilities = poll(port, pollers, rate, seconds, proc.pid, path="/capabilities")
        return body, plain, zipped, ready_s, cut, capabilities


def _static_floor(body: bytes, name: str, tmp: Path, pollers: int, rate: float, seconds: float) -> Polled:
    static_file = tmp / f"{name}.json"
    static_file.write_bytes(body)
    static_port = free_port()
    argv = [sys.executable, str(FLEET_PY), "--serve-static", str(static_file),
            "--port", str(static_port)]
    with child(argv, tmp / f"static-{name}.log") as static:
        wait_http(f"http://127.0.0.1:{static_port}/recommendations", timeout_s=30)
        return poll(static_port, pollers, rate, seconds, static.pid)


def measure_service(manifest: RunManifest, prom_url: str, tmp: Path, pollers: int, rate: float,
                    seconds: float) -> ServiceFigures:
    body, service, zipped, ready_s, cut, capabilities = _recommender(manifest, prom_url, tmp, pollers, rate,
                                                                     seconds)
    doc = json.loads(body)
    serialise = []
    for _ in range(5):
        t = time.perf_counter()
        json.dumps(doc, separators=(",", ":")).encode()
        serialise.append(time.perf_counter() - t)
    served = read_document(doc)  # validated once, after the timing
    packed = gzip.compress(body, compresslevel=1, mtime=0)  # what the service sends a gzip poller
    floor = _static_floor(body, "plain", tmp, pollers, rate, seconds)
    zipped_floor = _static_floor(packed, "gzip", tmp, pollers, rate, seconds)
    cut_floor = _static_floor(cut, "capabilities", tmp, pollers, rate, seconds)
    return ServiceFigures(len(body), len(packed), statistics.median(serialise), service, zipped, floor,
                          zipped_floor, len(served.lanes), served.schema_read, ready_s, capabilities,
                          len(cut), cut_floor)
