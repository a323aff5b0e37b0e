"""The exporter against a hostile runtime, over real sockets: whatever the runtime does, a scrape stays within
its budget, the exporter's memory stays bounded, and what the runtime sent is data (a source down with the
reason), never a wedged worker or an exception.

The runtime is a raw socket server so it can misbehave below HTTP: it trickles a body a byte at a time
(slow-loris), trickles its headers, streams a gigabyte of ``/slots``, answers ``NaN`` and ``+Inf`` in
``/metrics`` and invalid UTF-8 in ``/props``, and names a model of 99,999 splits."""

from __future__ import annotations

import os
import socket
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from satbench.exporter.adapter import EndpointFetcher
from satbench.exporter.collector import RuntimeCollector
from satbench.exporter.live_fingerprint import LiveFingerprints
from satbench.exporter.llamacpp import LlamaCppAdapter
from satbench.exporter.process import FakeProcessReader, ProcessReading

Handler = Callable[[socket.socket], None]
HEALTH = b'{"status":"ok"}'
THIS_PROCESS = ProcessReading(os.getpid(), 1e8, ("python", "-m", "pytest"))  # beside the runtime, not llama-server


def _send(conn: socket.socket, body: bytes, status: bytes = b"200 OK") -> None:
    conn.sendall(b"HTTP/1.1 " + status + b"\r\nContent-Type: application/json\r\nContent-Length: "
                 + str(len(body)).encode() + b"\r\n\r\n" + body)


def _trickle_body(conn: socket.socket) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n[")
    for _ in range(200):
        time.sleep(0.2)
        conn.sendall(b" ")


def _trickle_headers(conn: socket.socket) -> None:
    for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 400:
        time.sleep(0.2)
        conn.sendall(bytes([byte]))


def _gigabyte(conn: socket.socket) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
    chunk = b"[" + b"0," * (512 << 10)
    framed = b"%x\r\n" % len(chunk) + chunk + b"\r\n"
    for _ in range((1 << 30) // len(chunk)):
        conn.sendall(framed)


class HostileRuntime:
    """A socket server on loopback answering each path with a handler; it counts what it sent."""

    def __init__(self, routes: dict[str, Handler]) -> None:
        self.routes = routes
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self._stop = False
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with conn:
            try:
                request = conn.recv(65536).decode(errors="replace")
                path = request.split(" ")[1].split("?")[0] if " " in request else "/"
                handler = self.routes.get(path)
                if handler is None:
                    _send(conn, b'{"error":{"code":404,"message":"File Not Found"}}', b"404 Not Found")
                else:
                    handler(conn)
            except OSError:
                pass  # the exporter hung up: that is what it should do

    def close(self) -> None:
        self._stop = True
        self.sock.close()


@pytest.fixture
def hostile() -> Iterator[Callable[[dict[str, Handler]], HostileRuntime]]:
    made: list[HostileRuntime] = []

    def make(routes: dict[str, Handler]) -> HostileRuntime:
        made.append(HostileRuntime(routes))
        return made[-1]

    yield make
    for runtime in made:
        runtime.close()


def _props(model_path: str = "m.gguf") -> bytes:
    return (b'{"total_slots": 4, "build_info": "b1-evil", "default_generation_settings": {"n_ctx": 4096},'
            b' "model_path": "' + model_path.encode() + b'"}')


def _collector(url: str, budget_s: float, **kwargs: object) -> tuple[CollectorRegistry, RuntimeCollector]:
    adapter = LlamaCppAdapter(url, props_ttl_s=0, fetcher=EndpointFetcher(url, max_body_bytes=4 << 20))
    collector = RuntimeCollector(adapter, budget_s=budget_s, **kwargs)  # type: ignore[arg-type]
    registry = CollectorRegistry()
    registry.register(collector)
    return registry, collector


def _scrape(registry: CollectorRegistry) -> tuple[dict[tuple[str, tuple[tuple[str, str], ...]], float], float]:
    start = time.monotonic()
    got = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in registry.collect() for s in f.samples}
    return got, time.monotonic() - start


@pytest.mark.slow
def test_trickled_bodies_and_headers_cost_a_scrape_its_budget_and_close_is_prompt(hostile) -> None:
    runtime = hostile({"/health": lambda c: _send(c, HEALTH), "/props": lambda c: _send(c, _props()),
                       "/slots": _trickle_body, "/metrics": _trickle_headers})
    registry, collector = _collector(runtime.url, budget_s=0.5)
    took, props_up = [], []
    for _ in range(3):
        got, seconds = _scrape(registry)
        took.append(seconds)
        assert got[("runtime_up", ())] == 1
        assert got[("runtime_slots_up", ())] == 0 and got[("runtime_metrics_up", ())] == 0
        props_up.append(got[("runtime_props_up", ())])
    # the honest /props beside the trickling ones is read within the same budget: on a loaded machine (a
    # parallel suite) one scrape's /props once missed the 0.5 s itself, so it must be up in most scrapes
    assert sum(props_up) >= 2, props_up
    start = time.monotonic()
    collector.close()
    closed = time.monotonic() - start
    print(f"scrapes against a trickling runtime: {', '.join(f'{t:.2f}' for t in took)} s (budget 0.5 s); "
          f"close() {closed:.2f} s")
    assert max(took) < 1.5 and closed < 1.5


def test_a_gigabyte_of_slots_is_cut_at_the_cap_with_bounded_memory(hostile) -> None:
    runtime = hostile({"/health": lambda c: _send(c, HEALTH), "/props": lambda c: _send(c, _props()),
                       "/slots": _gigabyte, "/metrics": lambda c: _send(c, b"")})
    registry, collector = _collector(runtime.url, budget_s=2.0)
    tracemalloc.start()
    try:
        got, seconds = _scrape(registry)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        collector.close()
    print(f"a 1 GiB /slots: scrape {seconds:.2f} s, peak Python memory {peak / 2**20:.1f} MiB (cap 4 MiB)")
    assert got[("runtime_slots_up", ())] == 0 and got[("runtime_up", ())] == 1
    assert seconds < 3.0 and peak < 64 << 20


def test_hostile_numbers_and_bytes_are_data(hostile) -> None:
    metrics = (b"llamacpp:requests_processing NaN\nllamacpp:requests_deferred +Inf\n"
               b"llamacpp:prompt_tokens_total -Inf\nllamacpp:tokens_predicted_total 1e308\n")
    runtime = hostile({"/health": lambda c: _send(c, HEALTH),
                       "/props": lambda c: _send(c, _props().replace(b"b1-evil", b"b1-\xff\xfe\xc3(")),
                       "/slots": lambda c: _send(c, b'[{"id": 0, "n_ctx": NaN, "is_processing": "yes"}]'),
                       "/metrics": lambda c: _send(c, metrics)})
    registry, collector = _collector(runtime.url, budget_s=1.0)
    try:
        got, seconds = _scrape(registry)
        fp = collector.fingerprints()[None]
    finally:
        collector.close()
    assert got[("runtime_up", ())] == 1 and seconds < 2.0
    assert ("runtime_requests_processing", ()) not in got and ("runtime_queue_depth", ()) not in got
    assert fp["runtime"]["build"].startswith("b1-")  # invalid UTF-8 replaced, kept as data


def test_a_model_of_99999_splits_is_refused_without_statting_them(hostile, tmp_path: Path) -> None:
    first = tmp_path / "evil-00001-of-99999.gguf"
    first.write_bytes(b"GGUF")
    runtime = hostile({"/health": lambda c: _send(c, HEALTH), "/props": lambda c: _send(c, _props(str(first))),
                       "/slots": lambda c: _send(c, b"[]"), "/metrics": lambda c: _send(c, b"")})
    lf = LiveFingerprints(cpu=("cpu", None), models_roots=[tmp_path])
    registry, collector = _collector(runtime.url, budget_s=1.0, fingerprints=lf,
                                     process_reader=FakeProcessReader(THIS_PROCESS))
    try:
        _, seconds = _scrape(registry)
        fp = collector.fingerprints()[None]
    finally:
        collector.close()
    assert fp["model"]["files"] is None and "99999 splits" in fp["unknown"]["model.files"]
    assert seconds < 1.0


def test_a_hostile_model_path_outside_the_models_root_is_never_read(hostile, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"do not publish a hash of me")
    runtime = hostile({"/health": lambda c: _send(c, HEALTH), "/props": lambda c: _send(c, _props(str(secret))),
                       "/slots": lambda c: _send(c, b"[]"), "/metrics": lambda c: _send(c, b"")})
    lf = LiveFingerprints(cpu=("cpu", None), models_roots=[tmp_path / "models"])
    registry, collector = _collector(runtime.url, budget_s=1.0, fingerprints=lf,
                                     process_reader=FakeProcessReader(THIS_PROCESS))
    try:
        _scrape(registry)
        fp = collector.fingerprints()[None]
    finally:
        collector.close()
    assert fp["model"]["files"] is None and "not read" in fp["unknown"]["model.files"]
    assert lf.hasher.hashed == 0


def test_a_connection_closed_before_the_answer_is_tried_once_more(hostile) -> None:
    # the keep-alive race, forced: the runtime closes the connection without an answer (as when it closed an
    # idle connection the client was reusing); a GET may be sent again (RFC 9110 9.2.2), once
    calls: list[int] = []

    def flaky(conn: socket.socket) -> None:
        calls.append(1)
        if len(calls) > 1:
            _send(conn, HEALTH)

    def closing(conn: socket.socket) -> None:
        calls.append(2)

    runtime = hostile({"/health": flaky, "/props": closing})
    for path, expected in (("/health", [1, 1]), ("/props", [2, 2])):
        calls.clear()
        fetcher = EndpointFetcher(runtime.url)  # a new pool each: no kept-alive connection races the count
        try:
            reply = fetcher.get(path, path, 2.0)
        finally:
            fetcher.close()
        assert calls == expected, path
        if path == "/health":
            assert (reply.status, reply.body) == (200, HEALTH.decode())
        else:
            assert reply.status is None and "RemoteProtocolError" in (reply.error or "")
