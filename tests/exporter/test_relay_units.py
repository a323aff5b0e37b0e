"""Relay mode, pure parts: which headers pass, and what an answer's bytes say (outcome, tokens, queue)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from satbench.core.sse import StreamParser
from satbench.exporter.relay_headers import request_head, response_head
from satbench.exporter.relay_observe import status_outcome, timing_from_body, timing_from_stream

MS = 1_000_000


def test_request_headers_keep_end_to_end_ones_and_drop_hop_by_hop() -> None:
    incoming = [
        (b"Host", b"relay:8081"), (b"Connection", b"keep-alive, X-Hop"), (b"Keep-Alive", b"timeout=5"),
        (b"X-Hop", b"1"), (b"TE", b"trailers"), (b"Content-Length", b"12"), (b"Transfer-Encoding", b"chunked"),
        (b"Authorization", b"Bearer k"), (b"X-Tag", b"a"), (b"x-tag", b"b"), (b"Accept", b"text/event-stream"),
        (b"X-Empty", b""),
    ]
    head, request_id = request_head(b"POST", b"/completion", incoming, b"rt:8080", 12, new_id=lambda: "fresh")
    assert head.split(b"\r\n") == [
        b"POST /completion HTTP/1.1", b"Host: rt:8080", b"Authorization: Bearer k", b"X-Tag: a", b"x-tag: b",
        b"Accept: text/event-stream", b"X-Empty: ", b"X-Request-ID: fresh", b"Content-Length: 12", b"", b"",
    ]
    assert request_id == "fresh"
    # nothing of the relay's own: no User-Agent, Accept-Encoding or Content-Type the client did not send
    assert not {b"user-agent", b"accept-encoding", b"content-type"} & {
        line.split(b":")[0].lower() for line in head.split(b"\r\n")[1:]
    }


@pytest.mark.parametrize(
    ("given", "expected"),
    [([(b"X-Request-ID", b"abc")], "abc"), ([(b"x-request-id", b"abc")], "abc"), ([(b"X-Request-ID", b"")], "new")],
)
def test_request_id_is_kept_or_added(given: list[tuple[bytes, bytes]], expected: str) -> None:
    head, request_id = request_head(b"GET", b"/", given, b"rt", None, new_id=lambda: "new")
    ids = [line.split(b": ", 1)[1] for line in head.split(b"\r\n") if line.lower().startswith(b"x-request-id:")]
    assert request_id == expected and ids == [expected.encode()]


@pytest.mark.parametrize(
    "upstream",
    [
        [(b"Content-Length", b"1816"), (b"Content-Type", b"application/json")],
        [(b"Transfer-Encoding", b"chunked"), (b"Content-Type", b"text/event-stream")],
    ],
)
def test_response_headers(upstream: list[tuple[bytes, bytes]]) -> None:
    raw = [*upstream, (b"Set-Cookie", b"a=1"), (b"Set-Cookie", b"b=2"), (b"Keep-Alive", b"x")]
    lines = response_head(200, b"OK", raw, "rid", close=False).split(b"\r\n")
    assert [v for n, _, v in (line.partition(b": ") for line in lines) if n == b"Set-Cookie"] == [b"a=1", b"b=2"]
    assert b"X-Request-ID: rid" in lines and not any(line.startswith(b"Keep-Alive") for line in lines)
    # the body is forwarded as the runtime framed it, so its framing header is kept as sent
    assert all(b"%s: %s" % pair in lines for pair in upstream)


def test_response_keeps_the_runtimes_request_id() -> None:
    lines = response_head(200, b"OK", [(b"X-Request-ID", b"theirs")], "ours", close=False).split(b"\r\n")
    assert [line for line in lines if line.lower().startswith(b"x-request-id")] == [b"X-Request-ID: theirs"]


@pytest.mark.parametrize(
    ("status", "outcome"), [(200, "ok"), (304, "ok"), (400, "http_error"), (429, "refused"), (503, "refused"),
                            (500, "http_error")],
)
def test_status_outcome(status: int, outcome: str) -> None:
    assert status_outcome(status) == outcome


def feed(api: str, data: bytes) -> StreamParser:
    parser = StreamParser(api)  # type: ignore[arg-type]
    for i, event in enumerate(e + b"\n\n" for e in data.split(b"\n\n") if e.strip()):
        if not parser.feed(event, (5 + i) * MS):
            break
    return parser


def test_stream_outcomes_and_tokens(llamacpp_fixtures: Path) -> None:
    whole = (llamacpp_fixtures / "dense_np4" / "chat_stream.sse").read_bytes()
    done = timing_from_stream(feed("openai-chat", whole), 0, 40 * MS)
    assert (done.outcome, done.output_tokens, done.prompt_tokens) == ("ok", 16, 31)
    cut = whole[: whole.index(b'"usage"')]
    cut = cut[: cut.rindex(b"\n\n") + 2]
    dropped = timing_from_stream(feed("openai-chat", cut), 0, 40 * MS)
    assert dropped.outcome == "dropped" and dropped.output_tokens == 16 and dropped.prompt_tokens is None
    bad = timing_from_stream(feed("llamacpp", b"data: not json\n\n"), 0, MS)
    assert bad.outcome == "malformed" and bad.ttft_s is None
    error = b'data: {"error":{"code":500,"message":"boom"}}\n\n'
    assert timing_from_stream(feed("openai-chat", error), 0, MS).outcome == "http_error"
    assert timing_from_stream(feed("openai-chat", whole), 0, MS, status=503).outcome == "refused"


@pytest.mark.parametrize(
    ("body", "prompt", "output", "outcome"),
    [
        ({"usage": {"prompt_tokens": 31, "completion_tokens": 16}, "choices": [{}]}, 31, 16, "ok"),
        ({"tokens_evaluated": 6, "tokens_predicted": 16}, 6, 16, "ok"),
        ({"timings": {"prompt_n": 1, "cache_n": 5, "predicted_n": 8}}, 6, 8, "ok"),
        ({"error": {"code": 400, "message": "bad"}}, None, None, "http_error"),
        ({"usage": {"prompt_tokens": -1, "completion_tokens": True}}, None, None, "ok"),
        ([1, 2], None, None, "malformed"),
    ],
)
def test_body_tokens_and_outcome(body: object, prompt: int | None, output: int | None, outcome: str) -> None:
    timing = timing_from_body(json.dumps(body).encode(), 0, MS)
    assert (timing.prompt_tokens, timing.output_tokens, timing.outcome) == (prompt, output, outcome)


def test_real_nonstream_bodies(llamacpp_fixtures: Path) -> None:
    folder = llamacpp_fixtures / "dense_np4"
    completion = timing_from_body((folder / "completion_nonstream.json").read_bytes(), 0, 30 * MS)
    chat = timing_from_body((folder / "chat_nonstream.json").read_bytes(), 0, 30 * MS)
    assert (completion.prompt_tokens, completion.output_tokens) == (6, 16)
    assert (chat.prompt_tokens, chat.output_tokens) == (31, 16)
    assert completion.outcome == chat.outcome == "ok"
