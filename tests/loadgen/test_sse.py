from __future__ import annotations

import json
from pathlib import Path

import pytest

from satbench.core.sse import StreamParser, parse_stream

CASES = [
    ("openai-chat", "dense_np4/chat_stream.sse", 16, 31),
    ("llamacpp", "dense_np4/completion_stream.sse", 16, 6),
    ("openai-completions", "dense_np4/v1_completions_stream.sse", 8, 6),
    ("openai-chat", "extras/chat_stream_no_include_usage.sse", 4, 29),
    ("openai-chat", "extras/chat_stream_progress_timings_per_token.sse", 8, 984),
    ("llamacpp", "extras/completion_stream_progress_timings_per_token.sse", 8, 957),
]


@pytest.mark.parametrize(("api", "name", "tokens", "prompt"), CASES)
@pytest.mark.parametrize("chunk", [1, 7, 100, 1 << 20])
def test_recorded_streams(llamacpp_fixtures: Path, api: str, name: str, tokens: int, prompt: int,
                          chunk: int) -> None:
    parser, summary = parse_stream(api, (llamacpp_fixtures / name).read_bytes(), chunk)  # type: ignore[arg-type]
    assert parser.done and parser.malformed is None
    assert len(parser.token_ns) == tokens
    assert summary.output_tokens == tokens and summary.prompt_tokens == prompt
    assert summary.prompt_ms is not None and summary.prompt_ms > 0


@pytest.mark.parametrize(("api", "name", "tokens", "prompt"), CASES)
def test_one_event_a_chunk_reads_as_the_whole_stream(llamacpp_fixtures: Path, api: str, name: str, tokens: int,
                                                     prompt: int) -> None:
    """A paced server writes one event and its blank line a chunk, which the parser reads straight as that one
    event: what it finds (tokens, their arrival per event, the server's counts, the end) is what the same bytes
    read whole, and each token carries the time of its own chunk."""
    data = (llamacpp_fixtures / name).read_bytes()
    whole, said = parse_stream(api, data, 1 << 20)  # type: ignore[arg-type]
    events = [e + b"\n\n" for e in data.split(b"\n\n") if e]
    parser = StreamParser(api)  # type: ignore[arg-type]
    for t, event in enumerate(events):
        if not parser.feed(event, t):
            break
    assert len(parser.token_ns) == len(whole.token_ns) == tokens
    assert len(set(parser.token_ns)) == tokens  # one chunk, one time: each token its own
    assert parser.summary() == said and parser.token_counts() == whole.token_counts()
    assert (parser.done, parser.malformed, parser.events) == (whole.done, whole.malformed, whole.events)


def test_meta_files_match_counts(llamacpp_fixtures: Path) -> None:
    meta = json.loads((llamacpp_fixtures / "dense_np4/completion_stream.sse.meta.json").read_text())
    assert meta["request"]["n_predict"] == 16


def test_comments_pings_and_crlf_are_skipped() -> None:
    data = (b": ping\r\n\r\nevent: message\r\nid: 1\r\n"
            b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\r\n\r\n"
            b":keepalive\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"\"}}]}\n\n"
            b"data: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\ndata: [DONE]\n\n")
    parser, _ = parse_stream("openai-chat", data, 3)
    assert parser.done and len(parser.token_ns) == 2


def test_huge_line_is_malformed_with_bounded_buffer() -> None:
    parser = StreamParser("openai-chat", max_event_bytes=4096)
    assert parser.feed(b"data: {\"x\":\"" + b"a" * 3000, 1)
    assert not parser.feed(b"a" * 3000, 2)
    assert parser.malformed and "4096" in parser.malformed
    assert not parser.feed(b"more", 3)


def test_non_json_event_is_malformed() -> None:
    parser, _ = parse_stream("llamacpp", b"data: {\"content\":\"a\",\"stop\":false}\n\ndata: oops\n\n")
    assert parser.malformed is not None and len(parser.token_ns) == 1 and not parser.done


def test_error_event_and_truncated_stream() -> None:
    err = b'data: {"error":{"message":"context full","code":400}}\n\n'
    parser, summary = parse_stream("openai-chat", err)
    assert summary.error == "context full"
    parser, summary = parse_stream("openai-chat", b'data: {"choices":[{"delta":{"content":"error"}}]}\n\n')
    assert summary.error is None and len(parser.token_ns) == 1 and not parser.done


def test_spaced_json_is_understood() -> None:
    data = (b'data: {"index": 0, "content": "a", "stop": false}\n\n'
            b'data: {"index": 0, "content": "", "stop": true, '
            b'"timings": {"predicted_n": 1, "prompt_n": 3}}\n\n')
    parser, summary = parse_stream("llamacpp", data)
    assert parser.done and len(parser.token_ns) == 1
    assert summary.output_tokens == 1 and summary.prompt_tokens == 3
    chat = b'data: {"choices": [{"delta": {"content": "x"}}]}\n\ndata: [DONE]\n\n'
    parser, _ = parse_stream("openai-chat", chat)
    assert parser.done and len(parser.token_ns) == 1


def _synthetic(api: str, n: int) -> bytes:
    if api == "llamacpp":
        events = [b'data: {"content":"t","stop":false,"tokens_predicted":%d}\n\n' % i for i in range(n)]
        return b"".join(events) + b'data: {"content":"","stop":true,"timings":{"predicted_n":%d}}\n\n' % n
    key = b"text" if api == "openai-completions" else b"content"
    events = [b'data: {"choices":[{"delta":{"%s":"t%d"}}]}\n\n' % (key, i) for i in range(n)]
    return b"".join(events) + b'data: {"choices":[],"usage":{"completion_tokens":%d}}\n\ndata: [DONE]\n\n' % n


@pytest.mark.parametrize("api", ["openai-chat", "openai-completions", "llamacpp"])
@pytest.mark.parametrize("chunk", [13, 256, 4096, 1 << 20])
def test_batched_chunks_count_every_token(api: str, chunk: int) -> None:
    parser, summary = parse_stream(api, _synthetic(api, 500), chunk)  # type: ignore[arg-type]
    assert parser.done and len(parser.token_ns) == 500 and summary.output_tokens == 500


def test_broken_event_inside_a_batch_is_malformed() -> None:
    good = b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n'
    broken = b'data: {"choices":[{"delta":{"content":"a"\n\n'
    parser, _ = parse_stream("openai-chat", good * 10 + broken + good)
    assert parser.malformed is not None and len(parser.token_ns) == 10


@pytest.mark.parametrize(("api", "event"), [
    ("llamacpp", b'data: {"foo":1}\n\n'),
    ("openai-chat", b'data: {"bar":[]}\n\n'),
    ("openai-completions", b"data: {}\n\n"),
])
def test_events_without_known_fields_are_malformed(api: str, event: bytes) -> None:
    parser, _ = parse_stream(api, event)  # type: ignore[arg-type]
    assert parser.malformed is not None and "known field" in parser.malformed


def test_negative_server_counts_are_a_problem() -> None:
    data = (b'data: {"content":"a","stop":false}\n\n'
            b'data: {"content":"","stop":true,"timings":{"prompt_n":5,"prompt_ms":-40.0}}\n\n')
    parser, summary = parse_stream("llamacpp", data)
    assert parser.done and summary.problem is not None and "prompt_ms" in summary.problem


REUSE = [  # (api, fixture, prompt tokens, cached, drafted, accepted): the real server's final counts
    ("openai-chat", "router/chat_stream_1.sse", 78, 0, None, None),
    ("openai-chat", "router/chat_stream_2_cached.sse", 78, 58, None, None),  # cached_tokens 58, cache_n 58
    ("llamacpp", "router/completion_stream.sse", 34, 0, None, None),  # tokens_cached 41 is the slot, not a hit
    ("openai-chat", "draft/chat_stream.sse", 29, 0, 12, 12),
    ("llamacpp", "draft/completion_stream.sse", 7, 0, 18, 18),
    ("openai-chat", "dense_np4/chat_stream.sse", 31, 30, None, None),  # the capture repeated its prompt
]


@pytest.mark.parametrize(("api", "name", "prompt", "cached", "drafted", "accepted"), REUSE)
@pytest.mark.parametrize("chunk", [1, 4096])
def test_recorded_streams_say_what_the_runtime_reused(llamacpp_fixtures: Path, api: str, name: str, prompt: int,
                                                      cached: int, drafted: int | None, accepted: int | None,
                                                      chunk: int) -> None:
    parser, summary = parse_stream(api, (llamacpp_fixtures / name).read_bytes(), chunk)  # type: ignore[arg-type]
    assert parser.done and summary.problem is None
    assert (summary.prompt_tokens, summary.cached_prompt_tokens) == (prompt, cached)
    assert (summary.draft_tokens, summary.draft_accepted_tokens) == (drafted, accepted)


def test_usage_cached_tokens_wins_over_cache_n_and_silence_is_none() -> None:
    both = (b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n'
            b'data: {"choices":[],"usage":{"prompt_tokens":9,"prompt_tokens_details":{"cached_tokens":7}},'
            b'"timings":{"cache_n":6,"prompt_n":3}}\n\ndata: [DONE]\n\n')
    assert parse_stream("openai-chat", both)[1].cached_prompt_tokens == 7
    silent = b'data: {"choices":[{"delta":{"content":"a"}}]}\n\ndata: [DONE]\n\n'
    summary = parse_stream("openai-chat", silent)[1]
    assert (summary.cached_prompt_tokens, summary.draft_tokens, summary.draft_accepted_tokens) == (None, None, None)
    negative = b'data: {"content":"","stop":true,"timings":{"cache_n":-1,"prompt_n":3}}\n\n'
    assert "cache_n" in (parse_stream("llamacpp", negative)[1].problem or "")


def _contents(api: str, data: bytes) -> str:
    """The answer text of a recorded stream, decoded the slow way: every event's content, in order."""
    out = []
    for line in data.decode().splitlines():
        if not line.startswith("data: {"):
            continue
        event = json.loads(line[6:])
        if api == "llamacpp":
            out.append(event.get("content", ""))
        elif event.get("choices"):
            choice = event["choices"][0]
            out.append((choice.get("text") if api == "openai-completions" else choice["delta"].get("content")) or "")
    return "".join(out)


@pytest.mark.parametrize(("api", "name"), [("openai-chat", "router/chat_stream_2_cached.sse"),
                                           ("llamacpp", "draft/completion_stream.sse"),
                                           ("openai-completions", "dense_np4/v1_completions_stream.sse")])
@pytest.mark.parametrize("chunk", [1, 7, 4096])
def test_a_keep_text_parser_returns_the_answer_as_received(llamacpp_fixtures: Path, api: str, name: str,
                                                           chunk: int) -> None:
    data = (llamacpp_fixtures / name).read_bytes()
    keeping = StreamParser(api, keep_text=True)  # type: ignore[arg-type]
    plain = StreamParser(api)  # type: ignore[arg-type]
    for i in range(0, len(data), chunk):
        keeping.feed(data[i:i + chunk], i)
        plain.feed(data[i:i + chunk], i)
    expected = _contents(api, data)
    assert expected and keeping.answer_text() == expected
    assert plain.answer_text() == ""  # the hot path keeps nothing
    assert len(keeping.token_ns) == len(plain.token_ns)


HOSTILE_FINALS = [
    (b'data: {"content":"","stop":true,"timings":{"prompt_n":5,"predicted_n":3,"prompt_ms":NaN}}\n\n', "non-finite"),
    (b'data: {"content":"","stop":true,"timings":{"prompt_n":5,"predicted_n":3,"prompt_ms":Infinity}}\n\n',
     "non-finite"),
    (b'data: {"content":"","stop":true,"timings":{"prompt_n":1e400,"predicted_n":3}}\n\n', "non-finite"),
    (b'data: {"content":"","stop":true,"timings":{"prompt_n":5,"cache_n":1e308,"predicted_n":3}}\n\n', "absurd"),
    (b'data: {"content":"\xff\xfe","stop":true,"timings":{"prompt_n":5,"predicted_n":3}}\n\n', "UTF-8"),
    (b'data: {"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":1,'
     b'"prompt_tokens_details":{"cached_tokens":9}}}\n\ndata: [DONE]\n\n', "cached prompt tokens of a 4"),
]


@pytest.mark.parametrize(("final", "said"), HOSTILE_FINALS)
def test_hostile_numbers_are_a_problem_never_an_exception(final: bytes, said: str) -> None:
    api = "openai-chat" if b"choices" in final else "llamacpp"
    head = (b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n' if api == "openai-chat"
            else b'data: {"content":"a","stop":false}\n\n')
    _, summary = parse_stream(api, head + final)  # type: ignore[arg-type]
    assert summary.problem is not None
    assert said in summary.problem or (said == "absurd" and "cached" in summary.problem)
    assert summary.prompt_tokens is None and summary.cached_prompt_tokens is None


def test_reasoning_deltas_are_tokens_and_the_first_visible_one_is_kept_apart() -> None:
    stream = (b'data: {"choices":[{"delta":{"role":"assistant","content":null}}]}\n\n'
              b'data: {"choices":[{"delta":{"reasoning_content":"think"}}]}\n\n'
              b'data: {"choices":[{"delta":{"reasoning_content": "more"}}]}\n\n'
              b'data: {"choices":[{"delta":{"content":"Hi"}}]}\n\n'
              b'data: {"choices":[{"delta":{"content":" there"}}]}\n\ndata: [DONE]\n\n')
    parser = StreamParser("openai-chat")
    for i, line in enumerate(stream.split(b"\n\n")[:-1]):
        parser.feed(line + b"\n\n", 1000 * (i + 1))
    assert parser.token_ns == [2000, 3000, 4000, 5000]  # the role-only delta is no token
    assert parser.first_visible_ns == 4000 and parser.reasoning_events == 2


def test_a_conversation_keeps_a_bounded_answer() -> None:
    parser = StreamParser("llamacpp", max_event_bytes=1024, keep_text=True)
    event = b'data: {"content":"' + b"x" * 200 + b'","stop":false}\n\n'
    fed = [parser.feed(event, i) for i in range(10)]
    assert fed[:4] == [True] * 4 and not fed[-1]
    assert parser.malformed is not None and "kept for the conversation" in parser.malformed
