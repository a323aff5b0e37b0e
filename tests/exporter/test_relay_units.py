"""Relay mode, pure parts: which headers pass, and what an answer's bytes say (outcome, tokens, queue)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from multidict import CIMultiDict

from exporter.relay_headers import downstream_response_headers, upstream_request_headers
from exporter.relay_observe import status_outcome, timing_from_body, timing_from_stream
from loadgen.sse import StreamParser

MS = 1_000_000


def test_request_headers_keep_end_to_end_ones_and_drop_hop_by_hop() -> None:
    incoming = CIMultiDict([
        ("Host", "relay:8081"), ("Connection", "keep-alive, X-Hop"), ("Keep-Alive", "timeout=5"),
        ("X-Hop", "1"), ("TE", "trailers"), ("Content-Length", "12"), ("Transfer-Encoding", "chunked"),
        ("Authorization", "Bearer k"), ("X-Tag", "a"), ("x-tag", "b"), ("Accept", "text/event-stream"),
        ("X-Empty", ""),
    ])
    out, skip, request_id = upstream_request_headers(incoming, new_id=lambda: "fresh")
    assert list(out.items()) == [
        ("Authorization", "Bearer k"), ("X-Tag", "a"), ("x-tag", "b"), ("Accept", "text/event-stream"),
        ("X-Empty", ""), ("X-Request-ID", "fresh"),
    ]
    assert request_id == "fresh"
    assert skip == frozenset({"Accept-Encoding", "User-Agent", "Content-Type"})  # the client sent Accept


@pytest.mark.parametrize(
    ("given", "expected"),
    [([("X-Request-ID", "abc")], "abc"), ([("x-request-id", "abc")], "abc"), ([("X-Request-ID", "")], "new")],
)
def test_request_id_is_kept_or_added(given: list[tuple[str, str]], expected: str) -> None:
    out, _, request_id = upstream_request_headers(CIMultiDict(given), new_id=lambda: "new")
    assert request_id == expected and out.getall("X-Request-ID") == [expected]


@pytest.mark.parametrize(
    ("upstream", "length"),
    [
        ([("Content-Length", "1816"), ("Content-Type", "application/json")], 1816),
        ([("Transfer-Encoding", "chunked"), ("Content-Type", "text/event-stream")], None),
        ([("Content-Length", "nonsense")], None),
    ],
)
def test_response_headers(upstream: list[tuple[str, str]], length: int | None) -> None:
    headers = CIMultiDict([*upstream, ("Set-Cookie", "a=1"), ("Set-Cookie", "b=2"), ("Keep-Alive", "x")])
    out, declared = downstream_response_headers(headers, "rid")
    assert declared == length
    assert out.getall("Set-Cookie") == ["a=1", "b=2"] and out["X-Request-ID"] == "rid"
    assert not {"Content-Length", "Transfer-Encoding", "Keep-Alive"} & set(out.keys())


def test_response_keeps_the_runtimes_request_id() -> None:
    out, _ = downstream_response_headers(CIMultiDict([("X-Request-ID", "theirs")]), "ours")
    assert out.getall("X-Request-ID") == ["theirs"]


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
