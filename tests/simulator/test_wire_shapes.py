"""Real HTTP on loopback: every llama-server endpoint answers in the shape of the recorded fixtures."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from testkit.sim import InProcessSimulator


@pytest.fixture(scope="module")
def sim() -> Iterator[InProcessSimulator]:
    with InProcessSimulator("dense") as s:
        yield s


def shape(obj: Any) -> Any:
    """Key structure of a JSON value: dicts by keys, lists by their first element, scalars erased."""
    if isinstance(obj, dict):
        return {k: shape(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [shape(obj[0])] if obj and isinstance(obj[0], dict) else "list"
    return "*"


def sse_events(raw: str) -> list[str]:
    """Splits an SSE body into its ``data:`` payloads, checking the framing on the way."""
    assert raw.endswith("\n\n"), "every event ends with a blank line"
    events = raw[:-2].split("\n\n")
    for e in events:
        assert e.startswith("data: ") and "\n" not in e, f"bad SSE framing: {e[:80]!r}"
    return [e[len("data: ") :] for e in events]


def fixture_events(fixtures: Path, name: str) -> list[str]:
    return sse_events((fixtures / name).read_text(encoding="utf-8"))


def stream(sim: InProcessSimulator, path: str, body: dict[str, Any]) -> tuple[httpx.Response, list[str]]:
    resp = httpx.post(sim.url + path, json=body, timeout=10.0, headers={"X-Request-ID": "shape-test"})
    assert resp.status_code == 200, resp.text
    return resp, sse_events(resp.text)


def test_native_completion_stream_matches_fixture(sim: InProcessSimulator, llamacpp_fixtures: Path) -> None:
    real = fixture_events(llamacpp_fixtures, "dense_np4/completion_stream.sse")
    body = {"prompt": "Hello, my name is", "n_predict": 16, "ignore_eos": True, "stream": True}
    resp, ours = stream(sim, "/completion", body)
    assert resp.headers["content-type"] == "text/event-stream"
    assert "[DONE]" not in ours and "[DONE]" not in real  # the native endpoint never sends it
    assert len(ours) == len(real) == 17
    assert shape(json.loads(ours[0])) == shape(json.loads(real[0]))
    assert shape(json.loads(ours[-1])) == shape(json.loads(real[-1]))
    first = json.loads(ours[0])
    assert first["tokens_evaluated"] == 6 and first["tokens_predicted"] == 1
    assert json.loads(ours[-1])["timings"]["predicted_n"] == 16


@pytest.mark.parametrize(
    ("fixture", "include_usage"),
    [("dense_np4/chat_stream.sse", True), ("extras/chat_stream_no_include_usage.sse", False)],
)
def test_chat_stream_matches_fixture(
    sim: InProcessSimulator, llamacpp_fixtures: Path, fixture: str, include_usage: bool
) -> None:
    real = fixture_events(llamacpp_fixtures, fixture)
    n = sum(1 for e in real if '"content":' in e and '"role"' not in e)
    body: dict[str, Any] = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": n}
    body["stream"] = True
    if include_usage:
        body["stream_options"] = {"include_usage": True}
    _, ours = stream(sim, "/v1/chat/completions", body)
    assert ours[-1] == real[-1] == "[DONE]"
    assert len(ours) == len(real)
    for mine, theirs in zip(ours[:-1], real[:-1], strict=True):
        assert shape(json.loads(mine)) == shape(json.loads(theirs))


def test_v1_completions_stream_matches_fixture(sim: InProcessSimulator, llamacpp_fixtures: Path) -> None:
    real = fixture_events(llamacpp_fixtures, "dense_np4/v1_completions_stream.sse")
    body = {
        "prompt": "Hello, my name is",
        "max_tokens": 8,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    _, ours = stream(sim, "/v1/completions", body)
    assert ours[-1] == real[-1] == "[DONE]"
    assert [shape(json.loads(e)) for e in ours[:-1]] == [shape(json.loads(e)) for e in real[:-1]]


@pytest.mark.parametrize(
    ("path", "fixture", "body"),
    [
        ("/completion", "dense_np4/completion_nonstream.json",
         {"prompt": "Hello, my name is", "n_predict": 16, "ignore_eos": True}),
        ("/v1/chat/completions", "dense_np4/chat_nonstream.json",
         {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 16}),
    ],
)  # fmt: skip
def test_non_streaming_bodies_match_fixture(
    sim: InProcessSimulator, llamacpp_fixtures: Path, path: str, fixture: str, body: dict[str, Any]
) -> None:
    real = json.loads((llamacpp_fixtures / fixture).read_text(encoding="utf-8"))
    resp = httpx.post(sim.url + path, json=body, timeout=10.0)
    assert resp.status_code == 200
    assert shape(resp.json()) == shape(real)


def test_status_endpoints_match_fixtures(sim: InProcessSimulator, llamacpp_fixtures: Path) -> None:
    fx = llamacpp_fixtures / "dense_np4"
    health = httpx.get(sim.url + "/health")
    assert health.json() == json.loads((fx / "health_idle.json").read_text())
    models = httpx.get(sim.url + "/v1/models").json()
    assert shape(models) == shape(json.loads((fx / "models.json").read_text()))
    props = httpx.get(sim.url + "/props").json()
    real_props = json.loads((fx / "props.json").read_text())
    assert set(real_props) <= set(props)
    assert shape(props["default_generation_settings"]) == shape(real_props["default_generation_settings"])
    assert props["total_slots"] == 4
    assert "simulator" in props["build_info"] and props["simulator"]["simulated"] is True
    slots = httpx.get(sim.url + "/slots").json()
    assert len(slots) == 4
    real_idle = json.loads((fx / "slots_idle.json").read_text())[0]
    real_used = json.loads((fx / "slots_after_load.json").read_text())[0]
    for slot in slots:
        assert shape(slot) in (shape(real_idle), shape(real_used))


def test_busy_slot_matches_fixture_under_load(sim: InProcessSimulator, llamacpp_fixtures: Path) -> None:
    real_busy = json.loads((llamacpp_fixtures / "dense_np4/slots_load.json").read_text())[0]
    body = {"prompt": "x " * 20, "n_predict": 300, "ignore_eos": True, "stream": True}
    with (
        httpx.Client(timeout=10.0) as client,
        client.stream("POST", sim.url + "/completion", json=body) as resp,
    ):
        lines = resp.iter_lines()  # keep the iterator: dropping it closes the stream
        next(lines)
        slots = client.get(sim.url + "/slots").json()
        busy = [s for s in slots if s["is_processing"]]
        assert busy and shape(busy[0]) == shape(real_busy)
        full = client.get(sim.url + "/slots?fail_on_no_slot=1")
        assert full.status_code == 200  # 3 of 4 slots are still free


def test_metrics_parse_and_use_llama_server_names(sim: InProcessSimulator, llamacpp_fixtures: Path) -> None:
    httpx.post(
        sim.url + "/completion", json={"prompt": "a b c", "n_predict": 4, "ignore_eos": True}, timeout=10
    )
    resp = httpx.get(sim.url + "/metrics")
    assert resp.headers["content-type"].startswith("text/plain; version=0.0.4")
    ours = {f.name: f for f in text_string_to_metric_families(resp.text)}
    real_text = (llamacpp_fixtures / "dense_np4/metrics_load.txt").read_text()
    real = {f.name: f for f in text_string_to_metric_families(real_text)}
    assert set(ours) == set(real)
    assert {n: f.type for n, f in ours.items()} == {n: f.type for n, f in real.items()}
    assert ours["llamacpp:tokens_predicted"].samples[0].value >= 4
    assert ours["llamacpp:predicted_tokens_seconds"].samples[0].value > 0
    again = {f.name: f for f in text_string_to_metric_families(httpx.get(sim.url + "/metrics").text)}
    assert again["llamacpp:predicted_tokens_seconds"].samples[0].value == 0  # the bucket resets per scrape
    assert again["llamacpp:n_busy_slots_per_decode"].samples[0].value > 0  # a lifetime average does not


def test_errors_have_llama_server_shape(sim: InProcessSimulator) -> None:
    too_long = httpx.post(sim.url + "/completion", json={"prompt": list(range(40000))}, timeout=10)
    assert too_long.status_code == 400
    assert set(too_long.json()["error"]) == {"code", "message", "type", "n_prompt_tokens", "n_ctx"}
    bad = httpx.post(sim.url + "/completion", content=b"{not json", timeout=10)
    assert bad.status_code == 400


def test_tokenize_counts_like_the_prompt(sim: InProcessSimulator) -> None:
    resp = httpx.post(sim.url + "/tokenize", json={"content": "Hello world"}).json()
    assert len(resp["tokens"]) == 2
