"""Trace files read as their formats publish them, and refused in one line where they are not.

The shipped samples (``examples/traces``, written by ``testkit.trace_truth``) hold the same generated arrivals
and lengths in three formats, so each reader must give back what the generator wrote: the truth is the
generator's rows, never the reader's own figures. Each bad file names the file, the line and the problem, and is
refused before anything could be sent.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from satbench.loadgen.traces import BLOCK_TOKENS, TracePrompts, TraceRequest, read_trace
from testkit.trace_truth import generate_azure, generate_burstgpt, generate_mooncake

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "traces"


def test_the_three_formats_read_back_the_generated_arrivals_and_lengths(tmp_path: Path) -> None:
    moon = read_trace(generate_mooncake(tmp_path / "m.jsonl", n=50, seed=3))
    burst = read_trace(generate_burstgpt(tmp_path / "b.csv", n=50, seed=3))
    azure = read_trace(generate_azure(tmp_path / "a.csv", n=50, seed=3))
    assert (moon.format, burst.format, azure.format) == ("mooncake", "burstgpt", "azure")
    rows = [json.loads(line) for line in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert [r.at_s for r in moon.requests] == pytest.approx([row["timestamp"] / 1000 for row in rows])
    assert [r.hash_ids for r in moon.requests] == [tuple(row["hash_ids"]) for row in rows]
    # BurstGPT's failed request (0 response tokens) is left out and counted; Azure's times keep 0.1 us
    assert len(burst.requests) == 49 and burst.skipped == 1
    written = [float(line.split(",")[0]) for line in (tmp_path / "b.csv").read_text().splitlines()[1:]]
    assert [r.at_s for r in azure.requests] == pytest.approx(written, abs=1e-6)


def test_the_shipped_samples_read_and_carry_their_evidence() -> None:
    for name in ("mooncake_sample.jsonl", "burstgpt_sample.csv", "azure_sample.csv"):
        trace = read_trace(EXAMPLES / name)
        assert len(trace.requests) >= 150 and len(trace.sha256) == 64 and trace.size_bytes > 0
        window = trace.window(10.0, 20.0)
        assert all(0 <= r.at_s < 20.0 for r in window.requests)
        assert window.evidence(2.0)["window"] == {"offset_s": 10.0, "length_s": 20.0,
                                                   "requests": len(window.requests)}
        assert window.offsets(2.0) == pytest.approx([r.at_s / 2 for r in window.requests])


def test_the_same_block_id_is_the_same_text_and_lengths_are_the_trace_s() -> None:
    prompts = TracePrompts(seed=0)
    a = TraceRequest(0.0, 2 * BLOCK_TOKENS + 100, 8, (7, 8, 9))
    b = TraceRequest(1.0, BLOCK_TOKENS + 300, 8, (7, 11))
    c = TraceRequest(2.0, 700, 8, ())
    pa, pb, pc = prompts.prompt(a, 0), prompts.prompt(b, 1), prompts.prompt(c, 2)
    words_a, words_b = pa.split(), pb.split()
    assert words_a[:BLOCK_TOKENS] == words_b[:BLOCK_TOKENS]  # block 7 shared
    assert words_a[BLOCK_TOKENS:2 * BLOCK_TOKENS] != words_b[BLOCK_TOKENS:2 * BLOCK_TOKENS]
    # one word a token in the simulator's vocabulary, the runtime's BOS the first
    assert [len(p.split()) + 1 for p in (pa, pb, pc)] == [a.input_tokens, b.input_tokens, c.input_tokens]
    assert prompts.prompt(c, 2) == pc and prompts.prompt(c, 3) != pc


def test_what_the_hash_ids_imply_a_prefix_cache_would_hit(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [
        {"timestamp": 0, "input_length": 1024, "output_length": 4, "hash_ids": [1, 2]},
        {"timestamp": 5, "input_length": 1024, "output_length": 4, "hash_ids": [1, 3]},  # block 1 seen: 512
        {"timestamp": 9, "input_length": 1024, "output_length": 4, "hash_ids": [1, 2]},  # all seen: 1023
    ]) + "\n")
    assert read_trace(path).implied_cache_share() == pytest.approx((512 + 1023) / 3072)


@pytest.mark.parametrize(("name", "text", "said"), [
    ("gone.jsonl", None, "no such trace file"),
    ("m.jsonl", '{"timestamp": 0, "input_length": 10, "output_length": 2}\n{"timestamp": 5, "output_length": 2}\n',
     ":2: missing 'input_length'"),
    ("m.jsonl", '{"timestamp": 10, "input_length": 10, "output_length": 2}\n'
                '{"timestamp": 5, "input_length": 10, "output_length": 2}\n', ":2: timestamp goes back"),
    ("m.jsonl", '{"timestamp": 0, "input_length": "ten", "output_length": 2}\n', ":1: input_length is not a number"),
    ("m.jsonl", '{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [1, "x"]}\n',
     ":1: hash_ids must be a list of whole numbers"),
    ("m.jsonl", '{"timestamp": 0, "input_length": 10, "output_length": 2}\nnot json\n', ":2: not a JSON object"),
    ("b.csv", "Timestamp,Model,Request tokens,Total tokens\n0,ChatGPT,10,12\n",
     ":1: missing column 'Response tokens' of a BurstGPT trace"),
    ("a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,10,2\nyesterday,10,2\n",
     ":3: TIMESTAMP is not a date and time"),
    ("x.csv", "name,age\nann,3\n", ":1: not a trace satbench reads"),
    ("e.jsonl", "", ":1: not a trace satbench reads"),
])
def test_a_bad_trace_is_one_line_naming_the_file_the_line_and_the_problem(tmp_path: Path, name: str,
                                                                        text: str | None, said: str) -> None:
    path = tmp_path / name
    if text is not None:
        path.write_text(text)
    with pytest.raises(ValueError) as caught:
        read_trace(path)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(str(path)) and said in message, message
