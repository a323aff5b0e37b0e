"""Relay mode on the wire: what the client and the runtime see through the relay is what they see direct.

The upstream replays recorded real llama-server answers (``tests/fixtures/llamacpp/dense_np4``) for the
three completion endpoints, streamed and not, with their recorded headers plus repeated and empty ones.
The same request is sent direct and through the relay; bodies must be byte-identical, end-to-end headers
equal, and the runtime must receive the same method, path, query, headers and body.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.exporter.relay_support import RelayThread, ReplayUpstream, Reply

FOLDER = Path(__file__).resolve().parents[1] / "fixtures" / "llamacpp" / "dense_np4"
CASES = [
    ("completion_stream.sse", "/completion", 16),
    ("chat_stream.sse", "/v1/chat/completions", 16),
    ("v1_completions_stream.sse", "/v1/completions", 8),
    ("completion_nonstream.json", "/completion", 16),
    ("chat_nonstream.json", "/v1/chat/completions", 16),
]
PER_CONNECTION = {"connection", "keep-alive", "transfer-encoding", "date", "host"}


@pytest.fixture(scope="module")
def upstream() -> Iterator[ReplayUpstream]:
    with ReplayUpstream() as server:
        yield server


@pytest.fixture(scope="module")
def relay(upstream: ReplayUpstream) -> Iterator[RelayThread]:
    with RelayThread(upstream.url) as proxy:
        yield proxy


def recorded_reply(name: str) -> tuple[Reply, bytes, dict[str, object]]:
    payload = (FOLDER / name).read_bytes()
    meta = json.loads((FOLDER / f"{name}.meta.json").read_text())
    skip = ("transfer-encoding", "keep-alive", "content-length")  # the file is pretty-printed: own length
    headers = [(k, v) for k, v in meta["headers"].items() if k not in skip]
    if "content-length" in meta["headers"]:
        headers.append(("Content-Length", str(len(payload))))
    headers += [("Set-Cookie", "a=1"), ("Set-Cookie", "b=2"), ("X-Upstream-Note", "kept as is")]
    if name.endswith(".sse"):
        chunks = [e + b"\n\n" for e in payload.split(b"\n\n") if e.strip()]
        assert b"".join(chunks) == payload
    else:
        chunks = [payload[:100], payload[100:]]
    request = meta.get("request") or {"prompt": "Say hello.", "n_predict": 16}
    assert isinstance(request, dict)
    return Reply(headers=headers, chunks=chunks), payload, request


Answer = tuple[int, list[tuple[str, str]], bytes]


def exchange(url: str, body: bytes, headers: list[tuple[str, str]]) -> Answer:
    with httpx.Client(timeout=10) as client, client.stream(
        "POST", url, content=body, headers=headers
    ) as resp:
        data = b"".join(resp.iter_raw())
        raw = [(k.decode().lower(), v.decode()) for k, v in resp.headers.raw]
        return resp.status_code, raw, data


def end_to_end(headers: list[tuple[str, str]] | tuple[tuple[str, str], ...]) -> list[tuple[str, str]]:
    return sorted((k.lower(), v) for k, v in headers if k.lower() not in PER_CONNECTION)


@pytest.mark.parametrize(("name", "path", "tokens"), CASES, ids=[c[0] for c in CASES])
def test_direct_and_relayed_are_byte_identical(
    upstream: ReplayUpstream, relay: RelayThread, name: str, path: str, tokens: int
) -> None:
    reply, payload, request = recorded_reply(name)
    upstream.replies[("POST", path)] = reply
    body = json.dumps(request).encode()
    headers = [("X-Request-ID", f"rid-{name}"), ("Authorization", "Bearer k"), ("X-Custom", "a"),
               ("X-Custom", "b"), ("Content-Type", "application/json")]
    direct = exchange(f"{upstream.url}{path}?q=1&r=%2F", body, headers)
    relayed = exchange(f"{relay.url}{path}?q=1&r=%2F", body, headers)

    assert direct[0] == relayed[0] == 200
    assert direct[2] == relayed[2] == payload
    relayed_headers = end_to_end(relayed[1])
    assert ("x-request-id", f"rid-{name}") in relayed_headers  # added: the runtime does not echo it
    relayed_headers.remove(("x-request-id", f"rid-{name}"))
    assert relayed_headers == end_to_end(direct[1])
    assert [v for k, v in relayed[1] if k == "set-cookie"] == ["a=1", "b=2"]
    assert ("access-control-allow-origin", "") in relayed[1]
    if name.endswith(".json"):
        assert ("content-length", str(len(payload))) in relayed[1]
        assert not any(k == "transfer-encoding" for k, _ in relayed[1])

    seen_direct, seen_relayed = upstream.seen[-2], upstream.seen[-1]
    assert seen_relayed.method == seen_direct.method == "POST"
    assert seen_relayed.path_qs == seen_direct.path_qs == f"{path}?q=1&r=%2F"
    assert seen_relayed.body == seen_direct.body == body
    assert end_to_end(seen_relayed.headers) == end_to_end(seen_direct.headers)

    route, timing = relay.observation(f"rid-{name}")
    assert (route, timing.outcome) == (path, "ok")
    assert timing.output_tokens == tokens and timing.prompt_tokens
    assert (timing.ttft_s is not None) == name.endswith(".sse")


def test_missing_request_id_is_added_both_ways(upstream: ReplayUpstream, relay: RelayThread) -> None:
    reply = Reply(headers=[("Content-Type", "application/json")], chunks=[b"{}"])
    upstream.replies[("GET", "/props")] = reply
    resp = httpx.get(relay.url + "/props", timeout=10)
    sent = dict((k.lower(), v) for k, v in upstream.seen[-1].headers)
    request_id = sent["x-request-id"]
    assert len(request_id) == 32 and int(request_id, 16) >= 0
    assert resp.headers["x-request-id"] == request_id and resp.content == b"{}"
    assert sent["user-agent"].startswith("python-httpx")  # the client's, not the relay's HTTP client


def test_streams_are_not_buffered(upstream: ReplayUpstream, relay: RelayThread) -> None:
    reply, payload, request = recorded_reply("completion_stream.sse")
    reply.gate_last = True
    upstream.replies[("POST", "/completion")] = reply
    assert upstream.gate is not None
    upstream.gate.clear()
    got = bytearray()
    with httpx.Client(timeout=10) as client, client.stream(
        "POST", relay.url + "/completion", content=json.dumps(request).encode()
    ) as resp:
        chunks = resp.iter_raw()
        while b'"stop":false' not in got:  # a relay that buffers would block here until the read timeout
            got += next(chunks)
        upstream.open_gate()
        for chunk in chunks:
            got += chunk
    assert bytes(got) == payload


def test_runtime_errors_are_forwarded_as_they_are(upstream: ReplayUpstream, relay: RelayThread) -> None:
    error = b'{"error":{"code":500,"message":"boom","type":"server_error"}}'
    upstream.replies[("POST", "/v1/completions")] = Reply(
        status=500, headers=[("Content-Type", "application/json; charset=utf-8")], chunks=[error]
    )
    timed_before = relay.value("runtime_e2e_seconds_count", {"route": "/v1/completions"})
    resp = httpx.post(relay.url + "/v1/completions", json={"prompt": "x"}, timeout=10)
    assert resp.status_code == 500 and resp.content == error
    labels = {"route": "/v1/completions", "code": "500", "outcome": "http_error"}
    assert relay.value("runtime_relay_requests_total", labels) == 1
    assert relay.value("runtime_e2e_seconds_count", {"route": "/v1/completions"}) == timed_before
