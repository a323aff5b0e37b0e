"""``[server] stream_interval``: the simulator streams several tokens an event, as vLLM's ``--stream-interval``,
with the same answer as one token an event; llama-server's framing (1) is unchanged."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from satbench.simulator.profile import ProfileError, load_profile
from testkit.sim import InProcessSimulator


def events(url: str, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    resp = httpx.post(url + path, json={**body, "stream": True, "ignore_eos": True}, timeout=10.0)
    assert resp.status_code == 200, resp.text
    out = []
    for block in resp.text.split("\n\n"):
        if block.startswith("data: {"):
            out.append(json.loads(block[6:]))
    return out


def test_native_events_carry_k_tokens_and_the_same_answer() -> None:
    body = {"prompt": "Hello, my name is", "n_predict": 11}
    with InProcessSimulator("dense") as one:
        plain = [e for e in events(one.url, "/completion", body) if not e["stop"]]
    with InProcessSimulator("dense", stream_interval=4) as sim:
        chunked = [e for e in events(sim.url, "/completion", body) if not e["stop"]]
        chat = events(sim.url, "/v1/chat/completions", {
            "messages": [{"role": "user", "content": "hi"}], "max_tokens": 11,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}})
    assert [len(e["tokens"]) for e in plain] == [1] * 11
    assert [len(e["tokens"]) for e in chunked] == [1, 4, 4, 2]  # the first alone, then 4, the rest last
    assert [e["tokens_predicted"] for e in chunked] == [1, 5, 9, 11]
    assert [t for e in chunked for t in e["tokens"]] == [t for e in plain for t in e["tokens"]]
    assert "".join(e["content"] for e in chunked) == "".join(e["content"] for e in plain)
    content = [e for e in chat if e["choices"] and e["choices"][0]["delta"].get("content")]
    assert [e["usage"]["completion_tokens"] for e in content] == [1, 5, 9, 11]  # vLLM's continuous usage


def test_stream_interval_must_be_positive() -> None:
    with pytest.raises(ProfileError, match="stream_interval"):
        load_profile("dense").with_overrides(stream_interval=0)
