"""Streams that carry several tokens an event (vLLM/SGLang ``--stream-interval``, a speculative verify step sent
as one chunk) are judged per token: the truth is the engine's own per-token step times, drawn here, not a
figure of satbench's."""

from __future__ import annotations

import itertools
import json
import random
import statistics
from pathlib import Path

import pytest

from satbench.core.api import ApiFlavour
from satbench.core.manifest import StepWindow
from satbench.core.records import RequestRecord
from satbench.core.sse import parse_stream
from satbench.core.stalls import token_gaps
from satbench.core.step_figures import compute_step_figures, event_token_counts

WINDOW = StepWindow(lane="a", concurrency=4, start=10.0, end=70.0)


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[94]


def engine(seed: int = 1, users: int = 4, answers: int = 60, tokens: int = 64) -> list[tuple[int, float, list[float]]]:
    """(user, sent, per-token times) of a closed loop of ``users``: each token is one decode step of 20 ms with
    5 % noise and, one step in 25, a 60 ms hold (a prefill beside it)."""
    rng = random.Random(seed)
    out = []
    for user in range(users):
        t = rng.uniform(0.0, 0.5)
        for _ in range(answers):
            sent, t = t, t + 0.15
            times = []
            for _ in range(tokens):
                t += 0.020 * rng.gauss(1.0, 0.05) + (0.060 if rng.random() < 0.04 else 0.0)
                times.append(t)
            out.append((user, sent, times))
            t += 0.01
    return out


def framed(k: int, counted: bool) -> tuple[list[RequestRecord], list[float]]:
    """The engine's requests streamed at ``k`` tokens an event (the first token alone: TTFT's), with the
    runtime's per-event counts or without; and the truth: every step time of a token after the first sent in the
    window."""
    records, truth = [], []
    for i, (user, sent, times) in enumerate(engine()):
        events = [times[0]] + [times[min(j + k - 1, len(times) - 1)] for j in range(1, len(times), k)]
        counts = (1, *tuple(min(k, len(times) - j) for j in range(1, len(times), k)))
        records.append(RequestRecord(
            run_id="r", lane="a", concurrency=4, user=user, request_id=f"q{i}", phase="window", sent_at=sent,
            ttft_s=times[0] - sent, e2e_s=times[-1] - sent, queue_s=None,
            itl_s=tuple(b - a for a, b in itertools.pairwise(events)), prompt_tokens=32,
            output_tokens=len(times), outcome="ok", event_tokens=counts if counted and k > 1 else None))
        truth += [b - a for a, b in itertools.pairwise(times) if WINDOW.start <= b <= WINDOW.end]
    return records, truth


@pytest.mark.parametrize("counted", [True, False])
def test_same_engine_same_figures_at_one_to_eight_tokens_an_event(counted: bool) -> None:
    one = compute_step_figures(framed(1, counted)[0], WINDOW)
    _, truth = framed(1, counted)
    for k in (2, 4, 8):
        f = compute_step_figures(framed(k, counted)[0], WINDOW)
        assert f.tokens_per_event == pytest.approx(k, rel=0.15)
        assert f.event_tokens_estimated == (0 if counted else f.requests)
        assert f.itl_s.p95 == pytest.approx(p95(truth), rel=0.10), k
        assert f.itl_s.mean == pytest.approx(statistics.fmean(truth), rel=0.03), k
        assert f.tpot_s.p50 == pytest.approx(one.tpot_s.p50, rel=1e-9)
        assert f.throughput_tok_s == pytest.approx(one.throughput_tok_s, rel=0.03), k
        assert f.throughput_ci_tok_s is not None and one.throughput_ci_tok_s is not None
        half = (f.throughput_ci_tok_s[1] - f.throughput_ci_tok_s[0]) / 2 / f.throughput_tok_s
        assert half < 0.05, (k, half)  # not the +-13-57 % of crediting the uncounted tokens to the last event
    assert one.tokens_per_event == pytest.approx(1.0)
    assert one.event_tokens_estimated == 0


@pytest.mark.parametrize(("times", "counts", "expected"), [
    ([0.0, 0.1, 0.2], None, [(0.0, 0.1), (0.1, 0.2)]),
    ([0.0, 0.4], [1, 4], [(0.0, 0.1), (0.1, 0.2), (0.2, 0.30000000000000004), (0.30000000000000004, 0.4)]),
    ([0.0, 0.4], [3, 1], [(0.0, 0.4)]),  # the first event's extra tokens have no gap before them
    ([0.0, 0.3, 0.3002, 0.3004], None, [(0.0, 0.1), (0.1, 0.2), (0.2, 0.30000000000000004)]),  # a burst of 3
    ([0.0, 0.2, 0.2001], [1, 1, 1], [(0.0, 0.1), (0.1, 0.2)]),
    ([], None, []),
])
def test_token_gaps(times: list[float], counts: list[int] | None, expected: list[tuple[float, float]]) -> None:
    got = token_gaps(times, counts)
    assert [a for a, _ in got] == pytest.approx([a for a, _ in expected])
    assert [b for _, b in got] == pytest.approx([b for _, b in expected])


@pytest.mark.parametrize(("itl", "out", "events", "expected"), [
    ((1.0, 1.0), 3, None, ([1, 1, 1], False)),
    ((1.0, 1.0), 9, None, ([1, 4, 4], True)),  # 6 uncounted tokens spread over the events after the first
    ((1.0, 1.0, 1.0), 9, None, ([1, 3, 3, 2], True)),
    ((), 5, None, ([5], True)),
    ((1.0, 1.0), 9, (1, 2, 6), ([1, 2, 6], False)),  # the runtime's counts
    ((1.0, 1.0), 10, (1, 2, 6), ([1, 2, 7], False)),  # its final count beyond them: the last event's
    ((1.0, 1.0), 2, None, ([1, 1, 1], False)),  # fewer than the events (a count without the thinking): ones
])
def test_event_token_counts(itl: tuple[float, ...], out: int, events: tuple[int, ...] | None,
                            expected: tuple[list[int], bool]) -> None:
    record = RequestRecord(run_id="r", lane="a", concurrency=1, user=0, request_id="q", phase="window",
                           sent_at=0.0, ttft_s=0.5, e2e_s=3.0, queue_s=None, itl_s=itl, prompt_tokens=4,
                           output_tokens=out, outcome="ok", event_tokens=events)
    assert event_token_counts(record) == expected


def test_event_tokens_round_trip_and_old_lines_load() -> None:
    record = RequestRecord(run_id="r", lane="a", concurrency=1, user=0, request_id="q", phase="window",
                           sent_at=0.0, ttft_s=0.5, e2e_s=3.0, queue_s=None, itl_s=(1.0,), prompt_tokens=4,
                           output_tokens=5, outcome="ok", event_tokens=(1, 4))
    assert RequestRecord.from_dict(json.loads(record.to_json())).event_tokens == (1, 4)
    plain = RequestRecord.from_dict({**json.loads(record.to_json()), "event_tokens": None})
    assert plain.event_tokens is None and "event_tokens" not in plain.to_json()


def llamacpp_events(sizes: list[int], with_count: bool = True) -> bytes:
    out, total = [], 0
    for k in sizes:
        total += k
        ids = ",".join(str(100 + i) for i in range(k))
        count = f',"tokens_predicted":{total}' if with_count else ""
        out.append(f'data: {{"index":0,"content":"ab","tokens":[{ids}],"stop":false,"id_slot":-1{count}}}\n\n')
    out.append(f'data: {{"index":0,"content":"","tokens":[],"stop":true,"tokens_predicted":{total},'
               f'"timings":{{"prompt_n":3,"predicted_n":{total}}}}}\n\n')
    return "".join(out).encode()


def chat_events(sizes: list[int]) -> bytes:
    usage = '"usage":{{"prompt_tokens":5,"completion_tokens":{0},"total_tokens":{1}}}'
    out = ['data: {"id":"x","choices":[{"index":0,"delta":{"role":"assistant","content":""}}],'
           + usage.format(0, 5) + "}\n\n"]
    total = 0
    for k in sizes:
        total += k
        out.append('data: {"id":"x","choices":[{"index":0,"delta":{"content":"hi"}}],'
                   + usage.format(total, total + 5) + "}\n\n")
    out.append('data: {"id":"x","choices":[],' + usage.format(total, total + 5) + "}\n\ndata: [DONE]\n\n")
    return "".join(out).encode()


@pytest.mark.parametrize("chunk", [7, 61, 1 << 16])
@pytest.mark.parametrize(("api", "stream"), [
    ("llamacpp", llamacpp_events([1, 4, 4, 3])),  # the cumulative tokens_predicted
    ("llamacpp", llamacpp_events([1, 4, 4, 3], with_count=False)),  # the event's token ids
    ("openai-chat", chat_events([1, 4, 4, 3])),  # vLLM's continuous_usage_stats
])
def test_parser_counts_tokens_per_event(api: ApiFlavour, stream: bytes, chunk: int) -> None:
    parser, summary = parse_stream(api, stream, chunk)
    counts = parser.token_counts()
    assert summary.output_tokens == 12 and counts is not None and sum(counts) == 12
    if chunk < 100:  # each event read on its own: its own count
        assert counts == (1, 4, 4, 3)
    else:  # one read: the events arrived at one instant, only their sum is kept
        assert len(counts) == 4 and counts[0] == 1


def test_parser_says_nothing_of_one_token_events() -> None:
    stream = (Path(__file__).parents[1] / "fixtures/llamacpp/draft/completion_stream.sse").read_bytes()
    parser, summary = parse_stream("llamacpp", stream, 64)
    assert parser.counted and parser.token_counts() is None  # counted by the runtime: one each
    assert len(parser.token_ns) == summary.output_tokens
    parser, _ = parse_stream("openai-chat", chat_events([1, 1, 1]), 64)
    assert parser.token_counts() is None
