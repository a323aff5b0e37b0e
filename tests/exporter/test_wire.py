"""The exporter over real sockets: /metrics on loopback in front of a replayed runtime or a hung one."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from satbench.exporter.cli import configure
from satbench.exporter.collector import RuntimeCollector
from satbench.exporter.gpu import FakeGpuReader, GpuUnavailable
from satbench.exporter.llamacpp import LlamaCppAdapter
from satbench.exporter.process import PsutilProcessReader, local_port_of
from satbench.exporter.server import ExporterConfig, build_collector, serve
from testkit.exposition import samples
from testkit.fixture_runtime import FixtureRuntime, LoopbackRuntime


@pytest.fixture
def silent_server() -> Iterator[str]:
    """Accepts connections and never answers: a hung runtime."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        sock.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
                held.append(conn)
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    stop.set()
    thread.join(timeout=2)
    for conn in held:
        conn.close()
    sock.close()


def test_exporter_serves_replayed_runtime(llamacpp_fixtures: Path) -> None:
    with LoopbackRuntime(FixtureRuntime.from_folder(llamacpp_fixtures / "moe_np4")) as runtime:
        config = ExporterConfig(runtime_url=runtime.url, port=0, gpu="none")
        collector = build_collector(config)
        server = serve(collector, config.host, config.port)
        try:
            assert server.url.startswith("http://127.0.0.1:")
            got = samples(httpx.get(server.url + "/metrics", timeout=5).text)
        finally:
            server.close()
            collector.close()
    assert got["runtime_up", ()] == 1
    assert got["runtime_slots", (("state", "decode"),)] == 4
    assert got["runtime_queue_depth", ()] == 6
    assert got["runtime_output_tokens_total", ()] > 0
    # the replaying server runs in this very process, found by the port it listens on
    assert got["runtime_process_up", ()] == 1
    assert got["runtime_process_resident_memory_bytes", ()] > 1e6
    assert ("gpu_up", (("source", "simulator"),)) not in got  # a real llama-server has no /sim/gpu


def test_hung_runtime_scrape_stays_within_budget(silent_server: str) -> None:
    adapter = LlamaCppAdapter(silent_server)
    collector = RuntimeCollector(
        adapter, [FakeGpuReader(source="nvml", error=GpuUnavailable("none"))], budget_s=0.3
    )
    server = serve(collector)
    try:
        start = time.monotonic()
        got = samples(httpx.get(server.url + "/metrics", timeout=5).text)
        took = time.monotonic() - start
    finally:
        server.close()
        collector.close()
    assert got["runtime_up", ()] == 0
    assert got["runtime_metrics_up", ()] == 0
    assert got["runtime_http_status", (("source", "slots"),)] == 0
    assert took < 1.5


@pytest.mark.parametrize(
    ("url", "local"),
    [
        ("http://127.0.0.1:8080", 8080),
        ("http://localhost:9", 9),
        ("http://[::1]:81", 81),
        ("http://192.0.2.7:80", None),
    ],
)
def test_local_port_of(url: str, local: int | None) -> None:
    assert local_port_of(url) == local


def test_process_reader_by_pid_reads_this_process() -> None:
    import os

    reading = PsutilProcessReader(pid=os.getpid()).read()
    assert reading.pid == os.getpid() and reading.rss_bytes > 1e6


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"runtime_url": "localhost:8080"}, "http(s) URL"),
        ({"runtime_url": "http://h:1", "port": 70000}, "--port"),
        ({"runtime_url": "http://h:1", "runtime_pid": 0}, "--runtime-pid"),
        ({"runtime_url": "http://h:1", "flavour": "vllm"}, "--flavour"),
        ({"runtime_url": "http://h:1", "budget_s": 0}, "--budget-s"),
    ],
)
def test_config_rejects_bad_input(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ExporterConfig(**kwargs)


def test_cli_defaults_bind_loopback() -> None:
    import argparse

    parser = argparse.ArgumentParser()
    configure(parser)
    args = parser.parse_args(["--runtime-url", "http://127.0.0.1:8080"])
    assert args.host == "127.0.0.1" and args.flavour == "auto"
