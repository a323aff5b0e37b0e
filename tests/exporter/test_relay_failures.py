"""Relay mode when something breaks: the client leaves, the runtime drops, hangs or is not there.

A client that leaves must cancel the runtime's request (the simulator's ``/sim/truth`` then says
``finish_reason: "cancelled"``, or the scripted upstream sees its connection closed); a runtime that fails
must give the client its status or a truncated answer, never a hang and never a clean-looking end.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from testkit.net import free_port
from testkit.sim import SimulatorProcess
from tests.exporter.relay_support import RelayThread, ReplayUpstream, Reply


@pytest.fixture(scope="module")
def sim() -> Iterator[SimulatorProcess]:
    with SimulatorProcess("dense", slots=2) as process:
        yield process


def truth_of(sim: SimulatorProcess, request_id: str, timeout_s: float = 10.0) -> dict[str, Any]:
    """The simulator's record of a request once it has ended (raises when it has not in time)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        records = httpx.get(sim.url + "/sim/truth", params={"capacity": "0"}, timeout=5).json()["requests"]
        done = [r for r in records if r["request_id"] == request_id and r["finish_reason"]]
        if done:
            return dict(done[0])
        time.sleep(0.05)
    raise AssertionError(f"{request_id} did not end in {timeout_s}s")


def test_client_leaving_mid_stream_cancels_the_runtime_request(sim: SimulatorProcess) -> None:
    with RelayThread(sim.url) as relay:
        body = {"prompt": "hello", "n_predict": 100000, "ignore_eos": True, "stream": True}
        headers = {"X-Request-ID": "leaver-1"}
        with httpx.Client(timeout=10) as client, client.stream(
            "POST", relay.url + "/completion", json=body, headers=headers
        ) as resp:
            tokens = 0
            for line in resp.iter_lines():
                tokens += line.startswith("data: ")
                if tokens == 3:
                    break  # leaving the block closes the connection mid-stream
        record = truth_of(sim, "leaver-1")
        labels = {"route": "/completion", "code": "499", "outcome": "cancelled"}
        assert relay.value("runtime_relay_requests_total", labels) == 1
        assert relay.value("runtime_ttft_seconds_count", {"route": "/completion"}) is None
    assert record["finish_reason"] == "cancelled"
    assert 3 <= record["output_tokens"] < 100000


def test_client_leaving_before_any_byte_closes_the_runtime_connection() -> None:
    with ReplayUpstream() as upstream, RelayThread(upstream.url) as relay:
        upstream.replies[("POST", "/completion")] = Reply(hang=True)
        with socket.create_connection(("127.0.0.1", int(relay.url.rsplit(":", 1)[1]))) as sock:
            body = b'{"prompt":"x","stream":true}'
            head = b"POST /completion HTTP/1.1\r\nHost: relay\r\nX-Request-ID: silent-1\r\n"
            head += b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
            sock.sendall(head + body)
            deadline = time.monotonic() + 10
            while not upstream.seen and time.monotonic() < deadline:
                time.sleep(0.01)
        deadline = time.monotonic() + 10
        while not upstream.cancelled and time.monotonic() < deadline:
            time.sleep(0.01)
        assert upstream.cancelled == ["silent-1"]
        labels = {"route": "/completion", "code": "499", "outcome": "cancelled"}
        assert relay.value("runtime_relay_requests_total", labels) == 1


def test_runtime_dropping_mid_stream_truncates_the_clients_answer() -> None:
    events = [b'data: {"index":0,"content":"x","stop":false}\n\n'] * 6
    with ReplayUpstream() as upstream, RelayThread(upstream.url) as relay:
        upstream.replies[("POST", "/completion")] = Reply(
            headers=[("Content-Type", "text/event-stream")], chunks=events, drop_after=3
        )
        got = bytearray()
        with pytest.raises(httpx.RemoteProtocolError), httpx.Client(timeout=10) as client, client.stream(
            "POST", relay.url + "/completion", json={"prompt": "x", "stream": True}
        ) as resp:
            for chunk in resp.iter_raw():
                got += chunk
        assert bytes(got) == b"".join(events[:3])
        labels = {"route": "/completion", "code": "200", "outcome": "dropped"}
        assert relay.value("runtime_relay_requests_total", labels) == 1
        assert relay.value("runtime_relay_output_tokens_total", {"route": "/completion"}) == 3
        assert relay.value("runtime_e2e_seconds_count", {"route": "/completion"}) is None


def test_silent_runtime_gets_504_after_the_read_timeout() -> None:
    with ReplayUpstream() as upstream, RelayThread(upstream.url, read_timeout_s=0.3) as relay:
        upstream.replies[("POST", "/v1/chat/completions")] = Reply(hang=True)
        started = time.monotonic()
        resp = httpx.post(relay.url + "/v1/chat/completions", json={"messages": []}, timeout=10)
        assert time.monotonic() - started < 5
        assert resp.status_code == 504
        assert "no answer within 0.3 s" in resp.json()["error"]["message"]
        labels = {"route": "/v1/chat/completions", "code": "504", "outcome": "timeout"}
        assert relay.value("runtime_relay_requests_total", labels) == 1


def test_runtime_silent_mid_stream_is_cut_after_the_read_timeout() -> None:
    events = [b'data: {"index":0,"content":"x","stop":false}\n\n'] * 4
    with ReplayUpstream() as upstream, RelayThread(upstream.url, read_timeout_s=0.3) as relay:
        upstream.replies[("POST", "/completion")] = Reply(
            headers=[("Content-Type", "text/event-stream")], chunks=events, gate_last=True  # gate never opens
        )
        got = bytearray()
        started = time.monotonic()
        with pytest.raises(httpx.RemoteProtocolError), httpx.Client(timeout=10) as client, client.stream(
            "POST", relay.url + "/completion", json={"prompt": "x", "stream": True}
        ) as resp:
            for chunk in resp.iter_raw():
                got += chunk
        assert time.monotonic() - started < 5
        assert bytes(got) == b"".join(events[:3])
        labels = {"route": "/completion", "code": "200", "outcome": "timeout"}
        assert relay.value("runtime_relay_requests_total", labels) == 1


def test_runtime_down_gives_502_with_a_clear_body() -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    with RelayThread(dead) as relay:
        resp = httpx.post(relay.url + "/v1/completions", json={"prompt": "x"}, timeout=10)
        assert resp.status_code == 502
        error = resp.json()["error"]
        assert error["code"] == 502 and error["message"].startswith("relay: runtime unreachable: ")
        assert "127.0.0.1" in error["message"]
        assert resp.headers["content-type"].startswith("application/json")
        labels = {"route": "/v1/completions", "code": "502", "outcome": "refused"}
        assert relay.value("runtime_relay_requests_total", labels) == 1


def test_error_body_is_json_a_client_can_parse() -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    with RelayThread(dead) as relay:
        text = httpx.get(relay.url + "/health", timeout=10).text
    assert set(json.loads(text)["error"]) == {"code", "message", "type"}
