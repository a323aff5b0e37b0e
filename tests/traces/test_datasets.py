"""Conversation datasets read as their formats write them, and replayed turn by turn against the simulator.

The truth is the generated conversations themselves (``testkit.trace_truth``: the same conversations written as
ShareGPT JSON, OpenAI chat JSONL and prompt JSONL) and what the simulator received and counted: every prompt the
users sent holds the dataset's message verbatim, a later turn resends the exchange so far, and each request asks
for as many tokens as the simulator's own tokenizer counts in the dataset's answer.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from satbench.core.records import read_records
from satbench.loadgen.config import LoadgenConfig
from satbench.loadgen.datasets import read_dataset
from satbench.loadgen.runner import LadderRunner
from satbench.loadgen.workload import PromptText, UserWorkload, build_body
from satbench.simulator.tokens import tokenize_pieces
from testkit.sim import InProcessSimulator
from testkit.trace_truth import _conversations, generate_openai, generate_prompts, generate_sharegpt

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "traces"


def test_the_three_formats_read_back_the_generated_conversations(tmp_path: Path) -> None:
    truth = _conversations(12, 4)
    share = read_dataset(generate_sharegpt(tmp_path / "s.json", 12, 4))
    chat = read_dataset(generate_openai(tmp_path / "o.jsonl", 12, 4))
    prompts = read_dataset(generate_prompts(tmp_path / "p.jsonl", 12, 4))
    assert (share.format, chat.format, prompts.format) == ("sharegpt", "openai", "prompt")
    assert [[(t.user, t.answer) for t in c.turns] for c in share.conversations] == truth
    # the system message opens the first user message
    assert [c.turns[0].user for c in chat.conversations] == [f"You answer briefly.\n\n{conv[0][0]}" for conv in truth]
    assert [t.user for c in prompts.conversations for t in c.turns] == [conv[0][0] for conv in truth]
    assert [c.turns[0].output_tokens for c in prompts.conversations] == [len(conv[0][1].split()) for conv in truth]


def test_filters_and_seeded_sampling_say_what_they_kept() -> None:
    data = read_dataset(EXAMPLES / "sharegpt_sample.json")
    short = data.filtered(max_prompt_tokens=150, max_turns=2)
    assert all(len(c.turns) <= 2 for c in short.conversations)
    assert all(len(t.user) <= 150 * 4 for c in short.conversations for t in c.turns)
    a, b = short.sampled(5, seed=7), short.sampled(5, seed=7)
    assert a.conversations == b.conversations and a.conversations != short.sampled(5, seed=8).conversations
    evidence = a.evidence()
    assert evidence["sha256"] == data.sha256 and evidence["conversations_used"] == 5
    assert evidence["sample"] == 5 and evidence["filters"][-1] == "at most 2 turns"


def test_a_user_walks_whole_conversations_turn_by_turn() -> None:
    data = read_dataset(EXAMPLES / "sharegpt_sample.json")
    config = LoadgenConfig.model_validate({"workload": {"dataset": {"path": str(EXAMPLES / "sharegpt_sample.json")}}})
    text = PromptText(64, 0, data)
    user = UserWorkload(config.workload, "x", 1, 0, text)
    first = user.next_spec()
    conv = next(c for c in data.conversations if c.turns[0].user == first.text)
    user.answered(first, "ANSWER ONE")
    if len(conv.turns) > 1:
        second = user.next_spec()
        assert second.text == conv.turns[1].user and second.turn == 2
        body = json.loads(build_body("openai-chat", "", second, text, config.workload, "u0"))
        # the opening message after its head (new to a prompt cache on every rung and run), the later turns as written
        assert first.head and not second.head
        assert [m["content"] for m in body["messages"]] == [f"{first.head} {conv.turns[0].user}", "ANSWER ONE",
                                                            conv.turns[1].user]
        assert body["max_tokens"] == conv.turns[1].output_tokens


@pytest.mark.parametrize(("text", "said"), [
    ('[{"conversations": []}]', ":1: empty conversation"),
    ('[\n {"conversations": [{"from": "human", "value": "hi"}]},\n {"conversations": [{"from": "gpt", '
     '"value": "only an answer"}]}\n]', ":3: empty conversation (no user turn"),
    ('[{"conversations": [{"from": "robot", "value": "hi"}]}]', ":1: conversations[0] is not a turn"),
    ('{"messages": [{"role": "user", "content": 5}]}\n', ":1: messages[0] is not a turn"),
    ('{"prompt": "a"}\n{"prompt": ""}\n', ":2: prompt must be non-empty text"),
    ('{"prompt": "a", "output_tokens": 0}\n', ":1: output_tokens must be a whole number"),
    ('{"timestamp": 0, "input_length": 5}\n', ":1: not a dataset satbench reads"),
    ('[{"conversations": [{"from": "human", "value": "hi"}]}', "the JSON array is not closed"),
])
def test_a_bad_dataset_is_one_line_naming_the_file_the_line_and_the_problem(tmp_path: Path, text: str,
                                                                          said: str) -> None:
    path = tmp_path / "d.json"
    path.write_text(text)
    with pytest.raises(ValueError) as caught:
        read_dataset(path)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(str(path)) and said in message, message


@pytest.mark.slow
def test_a_sharegpt_dataset_runs_end_to_end_on_the_simulator(tmp_path: Path) -> None:
    path = generate_sharegpt(tmp_path / "share.json", 20, 9)
    data = read_dataset(path)
    with InProcessSimulator("dense") as sim:
        config = LoadgenConfig.model_validate({
            "lanes": [{"name": "dense", "url": sim.url, "api": "openai-chat"}],
            "ladder": {"concurrency": [2]}, "warmup_s": 0.5, "min_window_s": 4.0, "max_window_s": 4.0,
            "min_requests": 2, "progress": False, "max_loop_lag_s": 1.0, "drain_settle_s": 1.0,
            "workload": {"dataset": {"path": str(path), "sample": 10, "seed": 1}}})
        runner = LadderRunner(config, tmp_path / "run", run_id="20261204T000000Z-data")
        try:
            manifest = asyncio.run(runner.run())
        finally:
            runner.close()
    evidence = manifest.datasets["dense"]
    assert evidence["sha256"] == data.sha256 and evidence["conversations_used"] == 10
    assert "counted by the lane's /tokenize" in evidence["lengths"]
    records = [r for r in read_records(tmp_path / "run" / "records.jsonl", strict=True) if r.ok]
    assert len(records) >= 10
    answers = {t.user: len(tokenize_pieces(t.answer or "")) for c in data.conversations for t in c.turns}
    turns = [r for r in records if r.extra.get("turn", 1) > 1]
    assert turns, "no conversation went past its first turn"
    # every request asked for the simulator's own count of the dataset's answer to its turn (ignore_eos)
    asked = {r.output_tokens for r in records}
    assert asked <= set(answers.values())
