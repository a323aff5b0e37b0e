"""Relay mode: timing from recorded real streams (pure), and the proxy on loopback before the simulator."""

from __future__ import annotations

import json
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry

from satbench.core.histograms import LATENCY_BUCKETS_S
from satbench.core.sse import StreamParser
from satbench.exporter.relay import parse_listen_address
from satbench.exporter.relay_metrics import RelayMetrics
from satbench.exporter.relay_observe import OTHER_ROUTE, route_of, timing_from_body, timing_from_stream
from testkit.net import free_port
from testkit.sim import SimulatorProcess
from tests.exporter.relay_support import RelayThread

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
        assert timing.ttft_s is not None and timing.queue_s == pytest.approx(timing.ttft_s - 0.001947)


def test_body_timing_from_real_answer(llamacpp_fixtures: Path) -> None:
    body = (llamacpp_fixtures / "dense_np4" / "completion_nonstream.json").read_bytes()
    timing = timing_from_body(body, 0, 30 * MS)
    assert timing.ttft_s is None and timing.itl_s == ()
    assert timing.e2e_s == pytest.approx(0.030)
    assert timing.queue_s == pytest.approx(0.030 - (7.584 + 11.44) / 1e3)
    assert timing_from_body(b"not json", 0, MS).queue_s is None
    assert timing_from_body(json.dumps({"timings": {"queue_ms": 4.0}}).encode(), 0, MS).queue_s == 0.004


def test_metrics_use_loadgen_buckets() -> None:
    from satbench.exporter.relay_observe import RelayTiming

    metrics = RelayMetrics()
    registry = CollectorRegistry()
    registry.register(metrics)
    metrics.started("/completion")
    metrics.observe("/completion", RelayTiming(e2e_s=0.5, ttft_s=0.05, itl_s=(0.01, 0.02), queue_s=0.0))
    metrics.finished("/completion", 200)
    value = registry.get_sample_value
    assert value("runtime_itl_seconds_count", {"route": "/completion"}) == 2
    assert value("runtime_ttft_seconds_sum", {"route": "/completion"}) == 0.05
    ok = {"route": "/completion", "code": "200", "outcome": "ok"}
    assert value("runtime_relay_requests_total", ok) == 1
    assert value("runtime_relay_in_flight", {"route": "/completion"}) == 0
    bounds = [
        s.labels["le"]
        for f in registry.collect()
        if f.name == "runtime_e2e_seconds"
        for s in f.samples
        if s.name.endswith("_bucket")
    ]
    assert bounds == [repr(b) for b in LATENCY_BUCKETS_S] + ["+Inf"]


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
        value = relay.value
    requests = partial(value, "runtime_relay_requests_total")
    assert value("runtime_ttft_seconds_count", {"route": "/completion"}) == 1
    assert value("runtime_itl_seconds_count", {"route": "/completion"}) == 11
    assert value("runtime_e2e_seconds_count", {"route": "/completion"}) == 1
    assert value("runtime_queue_seconds_count", {"route": "/completion"}) == 1
    ttft = value("runtime_ttft_seconds_sum", {"route": "/completion"})
    e2e = value("runtime_e2e_seconds_sum", {"route": "/completion"})
    assert ttft is not None and e2e is not None and 0 < ttft < e2e < 5
    assert value("runtime_e2e_seconds_count", {"route": "/v1/chat/completions"}) == 1
    assert value("runtime_ttft_seconds_count", {"route": "/v1/chat/completions"}) is None  # not streamed
    assert requests({"route": "/completion", "code": "200", "outcome": "ok"}) == 1
    assert requests({"route": "other", "code": "200", "outcome": "ok"}) == 1
    assert requests({"route": "other", "code": "404", "outcome": "http_error"}) == 1
    assert value("runtime_relay_output_tokens_total", {"route": "/completion"}) == 12
    assert value("runtime_relay_output_tokens_total", {"route": "/v1/chat/completions"}) == 5
    assert (value("runtime_relay_prompt_tokens_total", {"route": "/completion"}) or 0) >= 1
    assert value("runtime_e2e_seconds_count", {"route": "other"}) is None


def test_relay_to_a_dead_runtime_answers_502() -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    with RelayThread(dead) as relay:
        resp = httpx.post(relay.url + "/completion", json={"prompt": "x"}, timeout=10)
        value = relay.value
    requests = partial(value, "runtime_relay_requests_total")
    assert resp.status_code == 502 and "runtime unreachable" in resp.json()["error"]["message"]
    assert requests({"route": "/completion", "code": "502", "outcome": "refused"}) == 1
    assert value("runtime_e2e_seconds_count", {"route": "/completion"}) is None


def read_line_with(proc: subprocess.Popen[bytes], marker: bytes, timeout_s: float = 20.0) -> bytes:
    """The first stdout line of ``proc`` that holds ``marker`` (fails when none came in time)."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.2)
        if ready:
            line = proc.stdout.readline()
            if marker in line:
                return line
            if not line and proc.poll() is not None:
                break
    raise AssertionError(f"no line with {marker!r} from the exporter")


@pytest.mark.slow
def test_cli_relay_mode_serves_both_on_the_real_ports(sim: SimulatorProcess) -> None:
    from testkit.exposition import samples as read_samples

    argv = [sys.executable, "-m", "satbench.cli", "exporter", "--runtime-url", sim.url, "--port", "0",
            "--relay", "127.0.0.1:0", "--gpu", "none"]
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(argv, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        metrics_line = read_line_with(proc, b"/metrics for ")
        relay_line = read_line_with(proc, b"relay on ")
        metrics_url = re.search(rb"(http://127\.0\.0\.1:\d+)/metrics", metrics_line)
        relay_url = re.search(rb"relay on (http://127\.0\.0\.1:(\d+)) -> ", relay_line)
        assert metrics_url and relay_url and int(relay_url.group(2)) > 0, relay_line
        relay = relay_url.group(1).decode()
        body = {"prompt": "hello", "n_predict": 6, "ignore_eos": True, "stream": True}
        with httpx.stream("POST", relay + "/completion", json=body, timeout=30) as resp:
            assert resp.status_code == 200 and sum(1 for _ in resp.iter_lines()) > 6
        time.sleep(0.2)  # the relay counts just after the client's last byte
        text = httpx.get(metrics_url.group(1).decode() + "/metrics", timeout=10).text
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err.decode()[-2000:]
    samples = read_samples(text)
    assert samples["runtime_ttft_seconds_count", (("route", "/completion"),)] == 1
    assert samples["runtime_itl_seconds_count", (("route", "/completion"),)] == 5
    assert samples["runtime_relay_output_tokens_total", (("route", "/completion"),)] == 6
    assert samples["runtime_up", ()] == 1
