"""Relay mode: timing from recorded real streams (pure), and the proxy on loopback before the simulator."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry

from exporter.relay import parse_listen_address, run_relay
from exporter.relay_metrics import RelayMetrics
from exporter.relay_observe import OTHER_ROUTE, route_of, timing_from_body, timing_from_stream
from loadgen.buckets import LATENCY_BUCKETS_S
from loadgen.sse import StreamParser
from tests.support.net import free_port
from tests.support.sim import SimulatorProcess

MS = 1_000_000


@pytest.mark.parametrize(
    ("path", "route", "api"),
    [
        ("/completion", "/completion", "llamacpp"),
        ("/completion/", "/completion", "llamacpp"),
        ("/v1/chat/completions?x=1", "/v1/chat/completions", "openai-chat"),
        ("/v1/completions", "/v1/completions", "openai-completions"),
        ("/health", OTHER_ROUTE, None),
        ("/anything/user-chosen/12345", OTHER_ROUTE, None),
    ],
)
def test_route_of(path: str, route: str, api: str | None) -> None:
    assert route_of(path) == (route, api)


@pytest.mark.parametrize(
    ("text", "addr"),
    [
        ("127.0.0.1:8081", ("127.0.0.1", 8081)),
        ("8081", ("127.0.0.1", 8081)),
        ("[::1]:9", ("::1", 9)),
        (":7", ("127.0.0.1", 7)),
    ],
)
def test_parse_listen_address(text: str, addr: tuple[str, int]) -> None:
    assert parse_listen_address(text) == addr


@pytest.mark.parametrize("text", ["host:", "host:http", "1:99999"])
def test_parse_listen_address_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="HOST:PORT"):
        parse_listen_address(text)


def events(path: Path) -> list[bytes]:
    return [e + b"\n\n" for e in path.read_bytes().split(b"\n\n") if e.strip()]


@pytest.mark.parametrize(
    ("name", "api"),
    [
        ("completion_stream.sse", "llamacpp"),
        ("chat_stream.sse", "openai-chat"),
        ("v1_completions_stream.sse", "openai-completions"),
    ],
)
def test_stream_timing_from_real_streams(llamacpp_fixtures: Path, name: str, api: str) -> None:
    # one event every millisecond, the first 5 ms after the request arrived
    parser = StreamParser(api)  # type: ignore[arg-type]
    t = 0
    for i, event in enumerate(events(llamacpp_fixtures / "dense_np4" / name)):
        t = (5 + i) * MS
        if not parser.feed(event, t):
            break
    timing = timing_from_stream(parser, 0, t + MS)
    meta = json.loads((llamacpp_fixtures / "dense_np4" / f"{name}.meta.json").read_text())
    n = meta["request"].get("n_predict") or meta["request"].get("max_tokens")
    assert len(parser.token_ns) == n > 0
    assert timing.ttft_s == pytest.approx(0.005 + (parser.token_ns[0] - 5 * MS) / 1e9)
    assert len(timing.itl_s) == n - 1 and all(g == pytest.approx(0.001) for g in timing.itl_s)
    assert timing.e2e_s == pytest.approx((t + MS) / 1e9)
    if api == "llamacpp":  # the final event carries timings: queue = TTFT - prompt_ms (1.947 ms)
        assert timing.queue_s == pytest.approx(timing.ttft_s - 0.001947)


def test_body_timing_from_real_answer(llamacpp_fixtures: Path) -> None:
    body = (llamacpp_fixtures / "dense_np4" / "completion_nonstream.json").read_bytes()
    timing = timing_from_body(body, 0, 30 * MS)
    assert timing.ttft_s is None and timing.itl_s == ()
    assert timing.e2e_s == pytest.approx(0.030)
    assert timing.queue_s == pytest.approx(0.030 - (7.584 + 11.44) / 1e3)
    assert timing_from_body(b"not json", 0, MS).queue_s is None
    assert timing_from_body(json.dumps({"timings": {"queue_ms": 4.0}}).encode(), 0, MS).queue_s == 0.004


def test_metrics_use_loadgen_buckets() -> None:
    from exporter.relay_observe import RelayTiming

    metrics = RelayMetrics()
    registry = CollectorRegistry()
    registry.register(metrics)
    metrics.started("/completion")
    metrics.observe("/completion", RelayTiming(e2e_s=0.5, ttft_s=0.05, itl_s=(0.01, 0.02), queue_s=0.0))
    metrics.finished("/completion", 200)
    value = registry.get_sample_value
    assert value("runtime_itl_seconds_count", {"route": "/completion"}) == 2
    assert value("runtime_ttft_seconds_sum", {"route": "/completion"}) == 0.05
    assert value("runtime_relay_requests_total", {"route": "/completion", "code": "200"}) == 1
    assert value("runtime_relay_in_flight", {"route": "/completion"}) == 0
    bounds = [
        s.labels["le"]
        for f in registry.collect()
        if f.name == "runtime_e2e_seconds"
        for s in f.samples
        if s.name.endswith("_bucket")
    ]
    assert bounds == [repr(b) for b in LATENCY_BUCKETS_S] + ["+Inf"]


class RelayThread:
    """The relay on a free loopback port, served by an event loop in a daemon thread."""

    def __init__(self, runtime_url: str) -> None:
        self.metrics = RelayMetrics()
        self.registry = CollectorRegistry()
        self.registry.register(self.metrics)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(runtime_url,), daemon=True)

    def _run(self, runtime_url: str) -> None:
        asyncio.set_event_loop(self._loop)

        async def main() -> None:
            self._stop = asyncio.Event()
            ready = asyncio.Event()
            task = asyncio.create_task(
                run_relay(runtime_url, self.metrics, "127.0.0.1", self.port, self._stop, ready)
            )
            await ready.wait()
            self._ready.set()
            await task

        self._loop.run_until_complete(main())
        self._loop.close()

    def __enter__(self) -> RelayThread:
        self._thread.start()
        assert self._ready.wait(10), "relay did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=10)


@pytest.fixture(scope="module")
def sim() -> Iterator[SimulatorProcess]:
    with SimulatorProcess("dense") as process:
        yield process


def test_relay_streams_and_times_requests(sim: SimulatorProcess) -> None:
    with RelayThread(sim.url) as relay, httpx.Client(timeout=30) as client:
        body = {"prompt": "hello", "n_predict": 12, "ignore_eos": True, "stream": True}
        with client.stream("POST", relay.url + "/completion", json=body) as resp:
            assert resp.status_code == 200
            assert resp.headers["content-type"].startswith("text/event-stream")
            data = [line for line in resp.iter_lines() if line.startswith("data: ")]
        assert len(data) >= 12 and json.loads(data[-1][6:])["stop"] is True
        chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
        answer = client.post(relay.url + "/v1/chat/completions", json=chat)
        assert answer.status_code == 200 and answer.json()["choices"][0]["message"]["content"]
        assert client.get(relay.url + "/health").json() == {"status": "ok"}
        assert client.get(relay.url + "/no-such-path").status_code == 404
        value = relay.registry.get_sample_value
    assert value("runtime_ttft_seconds_count", {"route": "/completion"}) == 1
    assert value("runtime_itl_seconds_count", {"route": "/completion"}) == 11
    assert value("runtime_e2e_seconds_count", {"route": "/completion"}) == 1
    assert value("runtime_queue_seconds_count", {"route": "/completion"}) == 1
    ttft = value("runtime_ttft_seconds_sum", {"route": "/completion"})
    e2e = value("runtime_e2e_seconds_sum", {"route": "/completion"})
    assert 0 < ttft < e2e < 5
    assert value("runtime_e2e_seconds_count", {"route": "/v1/chat/completions"}) == 1
    assert value("runtime_ttft_seconds_count", {"route": "/v1/chat/completions"}) is None  # not streamed
    assert value("runtime_relay_requests_total", {"route": "/completion", "code": "200"}) == 1
    assert value("runtime_relay_requests_total", {"route": "other", "code": "200"}) == 1
    assert value("runtime_relay_requests_total", {"route": "other", "code": "404"}) == 1
    assert value("runtime_e2e_seconds_count", {"route": "other"}) is None


def test_relay_to_a_dead_runtime_answers_502() -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    with RelayThread(dead) as relay:
        resp = httpx.post(relay.url + "/completion", json={"prompt": "x"}, timeout=10)
        value = relay.registry.get_sample_value
    assert resp.status_code == 502 and "runtime unreachable" in resp.json()["error"]["message"]
    assert value("runtime_relay_requests_total", {"route": "/completion", "code": "502"}) == 1
    assert value("runtime_e2e_seconds_count", {"route": "/completion"}) is None


def test_cli_relay_mode_serves_both(sim: SimulatorProcess) -> None:
    import signal
    import subprocess
    import sys

    from prometheus_client.parser import text_string_to_metric_families

    from tests.support.net import wait_http

    metrics_port, relay_port = free_port(), free_port()
    argv = [
        sys.executable,
        "-m",
        "satbench.cli",
        "exporter",
        "--runtime-url",
        sim.url,
        "--port",
        str(metrics_port),
        "--relay",
        f"127.0.0.1:{relay_port}",
        "--gpu",
        "none",
    ]
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(argv, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_http(f"http://127.0.0.1:{relay_port}/health", timeout_s=20)
        body = {"prompt": "hello", "n_predict": 6, "ignore_eos": True, "stream": True}
        with httpx.stream("POST", f"http://127.0.0.1:{relay_port}/completion", json=body, timeout=30) as resp:
            assert resp.status_code == 200 and sum(1 for _ in resp.iter_lines()) > 6
        text = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).text
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err.decode()[-2000:]
    assert b"relay on http://127.0.0.1:" in out
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }
    assert samples["runtime_ttft_seconds_count", (("route", "/completion"),)] == 1
    assert samples["runtime_itl_seconds_count", (("route", "/completion"),)] == 5
    assert samples["runtime_up", ()] == 1
