"""Context with headroom: the longest request as the load generator sends it, counted by the server itself.

The truth for the count is the server's own tokenizer (the simulator's, over real HTTP): the tune must
ask it and not the nominal lengths. The audit's case: a prompt of 1000 nominal tokens and 24 output tokens
asked exactly 1024 per slot, every such request overflowing its slot.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from satbench.core.records import RequestRecord, write_records
from satbench.loadgen.config import WorkloadConfig
from satbench.tune.context import count_prompt_tokens, longest_request, need_from_count, truncated_requests
from testkit.sim import InProcessSimulator


def workload(**fields: object) -> WorkloadConfig:
    return WorkloadConfig.model_validate(fields)


def test_the_longest_request_is_the_probe_or_the_deepest_turn_at_its_longest() -> None:
    probe = longest_request(workload(prompt_tokens={"kind": "fixed", "value": 64}, prefill_probe_share=0.1,
                                     prefill_probe_tokens=1500,
                                     output_tokens={"kind": "uniform", "low": 96, "high": 160}), "llamacpp")
    assert probe["n_predict"] == 160 and probe["prompt"].startswith("0a1b2c3d u99999: ")  # the widest head sent
    assert len(probe["prompt"].split()) == 2 + 1500 - 4  # its head, then the prepared text
    chat = longest_request(workload(conversation={"turns": 3}, shared_prefix={"share": 0.5, "prefixes": 2,
                                                                              "tokens": 20}), "openai-chat")
    roles = [m["role"] for m in chat["messages"]]
    assert roles == ["system", "user", "assistant", "user", "assistant", "user"] and chat["max_tokens"] == 64


@pytest.fixture(scope="module")
def sim() -> Iterator[InProcessSimulator]:
    with InProcessSimulator("dense") as running:
        yield running


@pytest.mark.parametrize("api", ["llamacpp", "openai-chat"])
def test_the_context_per_slot_is_the_servers_count_plus_output_and_margin(sim: InProcessSimulator, api: str) -> None:
    w = workload(prompt_tokens={"kind": "fixed", "value": 1000}, output_tokens={"kind": "fixed", "value": 24})
    body = longest_request(w, api)  # type: ignore[arg-type]
    with httpx.Client(timeout=10.0) as client:
        prompt = body["prompt"] if api == "llamacpp" else client.post(
            f"{sim.url}/apply-template", json={"messages": body["messages"]}).json()["prompt"]
        truth = len(client.post(f"{sim.url}/tokenize", json={"content": prompt, "add_special": True}).json()["tokens"])
        need = need_from_count(w, 64, lambda: count_prompt_tokens(client, sim.url, api, body))  # type: ignore[arg-type]
    assert need.source == "server" and need.prompt_tokens == truth and truth >= 1000  # BOS, head, template
    assert need.ctx_per_slot >= truth + 24 + 64 and need.ctx_per_slot % 256 == 0
    assert need.ctx_per_slot > 1024  # the nominal 1000 + 24 would have been exactly one full slot
    assert "the server's count" in need.detail


def test_a_runtime_without_the_routes_falls_back_to_the_nominal_figure_and_says_so() -> None:
    w = workload(prompt_tokens={"kind": "fixed", "value": 1000}, output_tokens={"kind": "fixed", "value": 24})
    need = need_from_count(w, 64, lambda: None)
    assert need.source == "nominal" and need.ctx_per_slot == 1280 and "no /tokenize" in need.detail
    down = need_from_count(w, 64, lambda: None, unreachable="the probe server did not start")
    assert down.detail.startswith("the probe server did not start")


def record(i: int, output: int, *, asked: int | None = None, error: str | None = None) -> RequestRecord:
    extra = {} if asked is None else {"asked_output_tokens": asked}
    return RequestRecord(run_id="r", lane="l", concurrency=4, user=0, request_id=f"q{i}", phase="window",
                         sent_at=0.0, ttft_s=0.1, e2e_s=1.0, queue_s=0.0, itl_s=(), prompt_tokens=1000,
                         output_tokens=output, outcome="ok" if error is None else "http_error", error=error,
                         extra=extra)


def test_a_request_cut_short_at_the_context_is_a_finding(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    error = "request (1100 tokens) exceeds the available context size (1024 tokens), try increasing it"
    write_records(path, [record(0, 24), record(1, 7, asked=24), record(2, 0, error=error), record(3, 0, error="boom")])
    count, said = truncated_requests(path, ignore_eos=True)
    assert count == 2 and said[0] == "c=4 q1: 7 of 24 output tokens" and "available context size" in said[1]
    assert truncated_requests(path, ignore_eos=False)[0] == 1  # an early end may be EOS: only the refusal counts
    assert truncated_requests(tmp_path / "none.jsonl", True) == (0, [])
    assert json.loads(path.read_text().splitlines()[1])["extra"] == {"asked_output_tokens": 24}
