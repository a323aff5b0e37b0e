"""A real llama-server on the tiny models: the endpoints satbench reads, and how the server really behaves.

Each model gets one server with ``--parallel 4``. The checks are about shape and behaviour, not speed:
/health, /props (slots, per-slot context), a streamed /completion token by token, /metrics and /slots, and
two transport habits the load generator must live with (the connection closes after a streamed response;
SSE comment lines may appear). Where the other parts' parsers are installed they are run on the real bytes.
"""

from __future__ import annotations

import itertools
import json
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import httpx
import pytest

from satbench.exporter.llamacpp import LlamaCppAdapter
from satbench.runtimes import RunningRuntime
from satbench.runtimes.llamacpp import LlamaServer

pytestmark = pytest.mark.real

N_PREDICT = 24


def _stream_completion(url: str, n_predict: int = N_PREDICT, prompt: str = "Hello, my name is") -> bytes:
    body = {"prompt": prompt, "n_predict": n_predict, "ignore_eos": True, "stream": True}
    with httpx.stream("POST", f"{url}/completion", json=body, timeout=60.0) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        return b"".join(resp.iter_bytes())


def _events(raw: bytes) -> tuple[list[dict[str, object]], list[bytes]]:
    events, others = [], []
    for line in raw.split(b"\n"):
        if line.startswith(b"data:"):
            events.append(json.loads(line[5:]))
        elif line.strip():
            others.append(line)
    return events, others


def test_health_props_and_runtime_view(server: LlamaServer) -> None:
    assert isinstance(server, RunningRuntime)
    assert httpx.get(f"{server.url}/health").json() == {"status": "ok"}
    props = server.props
    assert props["total_slots"] == 4
    assert props["default_generation_settings"]["n_ctx"] == 16384 // 4
    assert str(props["model_path"]).endswith(server.spec.model.name)
    assert props["endpoint_metrics"] is True and props["endpoint_slots"] is True
    assert props["build_info"]
    evidence = server.evidence()
    assert evidence["n_ctx_slot"] == 4096 and evidence["command"][0] == str(server.binary)


def test_streamed_completion_token_by_token(server: LlamaServer) -> None:
    """One event per token, except that a token ending inside a UTF-8 character is held back and sent with
    the next one: ``tokens_predicted`` then jumps by 2 to 4. Count tokens by it, not by events."""
    events, others = _events(_stream_completion(server.url))
    assert all(line.startswith(b":") for line in others), others
    content = [e for e in events if not e.get("stop")]
    final = events[-1]
    predicted = [int(e["tokens_predicted"]) for e in content]  # type: ignore[call-overload]
    assert predicted == sorted(predicted) and predicted[-1] == N_PREDICT
    assert all(1 <= b - a <= 4 for a, b in itertools.pairwise([0, *predicted]))
    assert final["stop"] is True and final["stop_type"] == "limit"
    timings = final["timings"]
    assert isinstance(timings, dict) and timings["predicted_n"] == N_PREDICT
    assert timings["prompt_n"] >= 1 and timings["prompt_ms"] >= 0


def test_loadgen_parser_counts_the_real_stream(server: LlamaServer) -> None:
    sse = pytest.importorskip("satbench.core.sse")
    raw = _stream_completion(server.url)
    parser, summary = sse.parse_stream("llamacpp", raw, chunk=37)
    assert not parser.malformed
    assert len(parser.token_ns) == len([e for e in _events(raw)[0] if not e.get("stop")])
    assert summary.output_tokens == N_PREDICT and summary.error is None


def test_connection_is_closed_after_a_streamed_response(server: LlamaServer) -> None:
    """Keep-alive is offered in the headers, yet the server closes the socket once the stream ends."""
    parts = urlsplit(server.url)
    body = json.dumps({"prompt": "Hi", "n_predict": 4, "ignore_eos": True, "stream": True}).encode()
    request = (f"POST /completion HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/json\r\n"
               f"Connection: keep-alive\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
        sock.sendall(request)
        received = b""
        while not received.endswith(b"\r\n0\r\n\r\n"):
            chunk = sock.recv(65536)
            assert chunk, f"closed before the terminating chunk: {received[-200:]!r}"
            received += chunk
        sock.settimeout(2.0)  # well under the advertised keep-alive timeout of 5 s
        try:
            after = sock.recv(1)
        except TimeoutError:
            after = None
    head = received.split(b"\r\n\r\n", 1)[0].lower()
    assert b"transfer-encoding: chunked" in head and b"keep-alive: timeout=" in head
    assert after == b"", "the server kept the connection open after the stream"


def _decodes(adapter: LlamaCppAdapter) -> tuple[float, float]:
    """The server's llama_decode calls and the busy slots summed over them, as the exporter reads them (the
    lifetime average ``n_busy_slots_per_decode`` times ``n_decode_total``; llama.cpp resets neither)."""
    snap = adapter.fetch(10.0)
    assert snap.decode_steps_total is not None and snap.busy_slot_decodes_total is not None, snap.sources
    return snap.decode_steps_total, snap.busy_slot_decodes_total


def test_metrics_and_slots_during_load(server: LlamaServer) -> None:
    """Six 1024-token streams on four slots run side by side: four slots busy for one request's length, then
    two, so the server's own average of busy slots per llama_decode over the load is about 3, where one by
    one it would be 1; /slots, polled every 20 ms, shows them busy. The server runs one compute thread
    (``server``): at every core, a tight poll loop beside six streams slowed the tiny MoE sevenfold and saw
    one busy slot at most, once, on a loaded machine."""
    adapter = LlamaCppAdapter(server.url)
    decodes0, busy0 = _decodes(adapter)
    with ThreadPoolExecutor(max_workers=6) as pool:
        futures = [pool.submit(_stream_completion, server.url, 1024) for _ in range(6)]
        busy = 0
        for _ in range(1000):
            slots = httpx.get(f"{server.url}/slots", timeout=10).json()
            busy = max(busy, sum(1 for s in slots if s["is_processing"]))
            metrics = httpx.get(f"{server.url}/metrics", timeout=10).text
            assert any(ln.startswith("llamacpp:requests_deferred ") for ln in metrics.splitlines())
            if busy == 4 or all(f.done() for f in futures):
                break
            time.sleep(0.02)
        results = [f.result() for f in futures]
    assert len(slots) == 4 and {s["id"] for s in slots} == {0, 1, 2, 3} and 2 <= busy <= 4
    decodes1, busy1 = _decodes(adapter)
    adapter.fetcher.close()
    per_decode = (busy1 - busy0) / max(1.0, decodes1 - decodes0)
    print(f"busy slots per llama_decode over the load: {per_decode:.2f} ({decodes1 - decodes0:.0f} decodes)")
    assert decodes1 > decodes0 and per_decode >= 1.5, (decodes1 - decodes0, busy1 - busy0)
    after = httpx.get(f"{server.url}/metrics", timeout=10).text
    finals = [_events(r)[0][-1] for r in results]
    assert all(f["stop"] and f["timings"]["predicted_n"] == 1024 for f in finals)  # type: ignore[index]
    for name in ("llamacpp:prompt_tokens_total", "llamacpp:tokens_predicted_total",
                 "llamacpp:requests_processing", "llamacpp:requests_deferred", "llamacpp:n_decode_total"):
        assert any(line.startswith(name + " ") for line in after.splitlines()), name
    parse = pytest.importorskip("satbench.exporter.llamacpp_parse")
    samples = parse.parse_exposition(after)
    assert samples["llamacpp:tokens_predicted_total"] >= 6 * 1024
    counts = parse.parse_slots(json.dumps(httpx.get(f"{server.url}/slots", timeout=10).json()))
    assert counts is not None
