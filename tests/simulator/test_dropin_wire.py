"""Real HTTP on loopback: the shape gaps a drop-in llama-server must not have, checked against the payloads
recorded from the real build (``tests/fixtures/llamacpp/dropin/`` and ``extras/``)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from satbench.simulator.stepcost import step_seconds
from tests.simulator.dropin_util import FIXTURES, DropIn, recorded, sse_payloads

# the suite's own preset: -c 512 -np 2 -b 32 --seed 42 --alias tinyllama-2, here with --metrics
FLAGS = ("--ctx-size", "512", "--parallel", "2", "--batch-size", "32", "--seed", "42", "--alias", "tinyllama-2",
         "--metrics", "--n-predict", "64", "--temp", "0.8")  # fmt: skip


@pytest.fixture(scope="module")
def sim() -> Iterator[DropIn]:
    with DropIn(*FLAGS) as s:
        yield s


def post(sim: DropIn, path: str, body: Any, timeout: float = 20, **kw: Any) -> httpx.Response:
    return httpx.post(sim.url + path, json=body, timeout=timeout, **kw)


def keys(obj: Any) -> list[str]:
    return list(obj) if isinstance(obj, dict) else []


# 1. context exceeded --------------------------------------------------------------------------------------

def test_context_exceeded_error_names_the_sizes(sim: DropIn) -> None:
    real = recorded("exceed_context")
    resp = post(sim, "/completion", {"prompt": "x " * 600, "n_predict": 4})
    assert resp.status_code == real["status"] == 400
    err = resp.json()["error"]
    assert keys(err) == keys(real["body"]["error"])
    assert err["type"] == "exceed_context_size_error" and err["n_ctx"] == 256 and err["n_prompt_tokens"] == 601
    assert "exceeds the available context size" in err["message"]
    chat = post(sim, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi " * 600}],
                                              "stream": True})
    assert chat.status_code == 400 and chat.json()["error"]["n_ctx"] == 256


# 2. timings on every chunk, 3. prompt progress -------------------------------------------------------------

def fixture_events(name: str) -> list[dict[str, Any]]:
    return sse_payloads((FIXTURES / "extras" / name).read_text(encoding="utf-8"))


@pytest.mark.parametrize(("path", "fixture"), [
    ("/completion", "completion_stream_progress_timings_per_token.sse"),
    ("/v1/chat/completions", "chat_stream_progress_timings_per_token.sse"),
])  # fmt: skip
def test_timings_per_token_and_prompt_progress_match_fixture(sim: DropIn, path: str, fixture: str) -> None:
    real = fixture_events(fixture)
    body: dict[str, Any] = {"n_predict": 8, "max_tokens": 8, "stream": True, "timings_per_token": True,
                            "return_progress": True, "ignore_eos": True}
    prompt = "the quick brown fox jumps over the lazy dog " * 8  # 73 tokens: 3 batches of 32
    if path == "/completion":
        body["prompt"] = prompt
    else:
        body["messages"] = [{"role": "user", "content": prompt}]
        body["stream_options"] = {"include_usage": True}
    resp = post(sim, path, body)
    ours = sse_payloads(resp.text)
    progress = [e for e in ours if "prompt_progress" in e]
    real_progress = [e for e in real if "prompt_progress" in e]
    assert [keys(e) for e in progress[:1]] == [keys(e) for e in real_progress[:1]]
    assert keys(progress[0]["prompt_progress"]) == keys(real_progress[0]["prompt_progress"])
    assert progress[0]["timings"]["prompt_n"] == 0 and progress[0]["timings"]["prompt_ms"] == 0.0
    processed = [e["prompt_progress"]["processed"] for e in progress]
    total = progress[0]["prompt_progress"]["total"]
    assert processed == sorted(set(processed)) and processed[-1] == total and len(progress) == 1 + -(-total // 32)
    tokens = [e for e in ours if "prompt_progress" not in e and (e.get("content") or (
        e.get("choices") and e["choices"][0].get("delta", {}).get("content")))]
    assert len(tokens) == 8 and all("timings" in e for e in tokens)
    assert [e["timings"]["predicted_n"] for e in tokens] == list(range(1, 9))
    ms = [e["timings"]["predicted_ms"] for e in tokens]
    assert ms == sorted(ms) and ms[0] == 0.0 < ms[-1]
    real_tokens = [e for e in real if "prompt_progress" not in e and "timings" in e and (
        e.get("content") or (e.get("choices") and e["choices"][0].get("delta", {}).get("content")))]
    assert keys(tokens[0]) == keys(real_tokens[0])
    assert keys(tokens[0]["timings"]) == keys(real_tokens[0]["timings"])


def test_without_the_options_no_progress_and_timings_only_at_the_end(sim: DropIn) -> None:
    resp = post(sim, "/completion", {"prompt": "a b c", "n_predict": 4, "stream": True})
    events = sse_payloads(resp.text)
    assert not any("prompt_progress" in e for e in events)
    assert ["timings" in e for e in events] == [False, False, False, False, True]


# 4. prompt cache ------------------------------------------------------------------------------------------

def test_prompt_cache_reuses_the_slot_prefix_and_reports_it() -> None:
    with DropIn("--parallel", "1", "--metrics", "--ctx-size", "4096") as one:
        seen: list[dict[str, Any]] = []

        def complete(prompt: str, **extra: Any) -> dict[str, Any]:
            t: dict[str, Any] = post(one, "/completion", {"prompt": prompt, "n_predict": 4, **extra}).json()["timings"]
            seen.append(t)
            return t

        prompt = "the quick brown fox jumps over the lazy dog"
        first = complete(prompt)
        second = complete(prompt, cache_prompt=True)
        real = recorded("completion_cache_second")["body"]["timings"]
        assert keys(second) == keys(real)
        n = first["prompt_n"]
        assert first["cache_n"] == 0 and second["cache_n"] == n - 1 and second["prompt_n"] == 1
        assert real["prompt_n"] == 1  # the real build too: all but the last prompt token reused
        assert complete("the quick brown cat")["cache_n"] == 4  # <s> the quick brown
        assert complete(prompt, cache_prompt=False)["cache_n"] == 0
        # a cached prefix costs no prefill: the cached request's prompt step evaluates one token
        post(one, "/completion", {"prompt": prompt, "n_predict": 4}, headers={"X-Request-ID": "cached"})
        truth = httpx.get(one.url + "/sim/truth", params={"capacity": "0"}).json()
        rec = next(r for r in truth["requests"] if r["request_id"] == "cached")
        p = one.profile
        assert rec["first_token"] - rec["admitted"] == pytest.approx(
            step_seconds(p.cost, 0, 1, p.server.ubatch), abs=2e-6)
        seen.append({"prompt_n": 1, "cache_n": n - 1})
        chat = {"messages": [{"role": "user", "content": prompt}], "max_tokens": 2}
        for _ in range(2):
            body = post(one, "/v1/chat/completions", chat).json()
            seen.append(body["timings"])
        usage = body["usage"]
        assert usage["prompt_tokens_details"]["cached_tokens"] == usage["prompt_tokens"] - 1
        text = httpx.get(one.url + "/metrics").text
        fams = {f.name: f.samples[0].value for f in text_string_to_metric_families(text)}
        assert fams["llamacpp:prompt_tokens_cached"] == sum(t["cache_n"] for t in seen)
        assert fams["llamacpp:prompt_tokens"] == sum(t["prompt_n"] for t in seen)  # cached ones excluded


# 5. unknown routes, CORS, API keys ------------------------------------------------------------------------

def test_unknown_routes_answer_json_404(sim: DropIn) -> None:
    real = recorded("not_found")
    for resp in (httpx.get(sim.url + "/no-such-route"), post(sim, "/no-such-route", {}),
                 httpx.get(sim.url + "/completion")):
        assert resp.status_code == 404
        assert resp.json() == real["body"]
        assert resp.headers["content-type"] == real["headers"]["content-type"]


def test_cors_preflight_matches_fixture(sim: DropIn) -> None:
    real = recorded("preflight")
    resp = httpx.options(sim.url + "/completion", headers=real["request"]["headers"])
    assert resp.status_code == real["status"] == 200
    for name in ("access-control-allow-origin", "access-control-allow-credentials",
                 "access-control-allow-methods", "access-control-allow-headers", "content-type"):
        assert resp.headers[name] == real["headers"][name], name
    echoed = httpx.get(sim.url + "/health", headers={"Origin": "http://web.example"})
    assert echoed.headers["access-control-allow-origin"] == "http://web.example"
    assert httpx.get(sim.url + "/health").headers["access-control-allow-origin"] == ""


def test_cors_origins_and_api_key() -> None:
    with DropIn("--cors-origins", "localhost", "--api-key", "sk-a,sk-b") as s:
        pre = {"Access-Control-Request-Method": "POST"}
        ok = httpx.options(s.url + "/completion", headers={"Origin": "http://127.0.0.1:3000", **pre})
        assert ok.headers["access-control-allow-origin"] == "http://127.0.0.1:3000"
        no = httpx.options(s.url + "/completion", headers={"Origin": "http://localhost.evil.com", **pre})
        assert no.status_code == 200 and "access-control-allow-origin" not in no.headers
        real = recorded("auth_missing_key")
        missing = post(s, "/completion", {"prompt": "hi", "n_predict": 2})
        assert missing.status_code == real["status"] == 401 and missing.json() == real["body"]
        wrong = post(s, "/completion", {"prompt": "hi", "n_predict": 2}, headers={"Authorization": "Bearer no"})
        assert wrong.status_code == 401
        for headers in ({"Authorization": "Bearer sk-b"}, {"X-Api-Key": "sk-a"}):
            assert post(s, "/completion", {"prompt": "hi", "n_predict": 2}, headers=headers).status_code == 200
        assert httpx.get(s.url + "/health").status_code == 200
        assert httpx.get(s.url + "/v1/models").status_code == 200
        assert httpx.get(s.url + "/").status_code == 200 and "<!doctype html>" in httpx.get(s.url + "/").text


# 6. several choices and several prompts -------------------------------------------------------------------

def test_n_choices_and_prompt_lists(sim: DropIn) -> None:
    real_n2 = recorded("chat_n2")["body"]
    body = post(sim, "/v1/chat/completions", {"messages": [{"role": "user", "content": "Say hello."}],
                                               "max_tokens": 2, "n": 2}).json()
    assert keys(body) == keys(real_n2) and [c["index"] for c in body["choices"]] == [0, 1]
    assert body["usage"]["completion_tokens"] == 4
    real_two = recorded("completion_two_prompts")["body"]
    two = post(sim, "/completion", {"prompt": ["Hello", "World"], "n_predict": 2}).json()
    assert isinstance(two, list) and [r["index"] for r in two] == [0, 1] == [r["index"] for r in real_two]
    assert [keys(r) for r in two] == [keys(r) for r in real_two]
    ids = post(sim, "/tokenize", {"content": "Hello there", "add_special": True}).json()["tokens"]
    same = post(sim, "/completion", {"prompt": [ids, "Hello there", {"prompt_string": "Hello there"}],
                                     "n_predict": 4}).json()
    assert len({r["content"] for r in same}) == 1  # the same tokens give the same text
    stream = post(sim, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3,
                                                 "n": 2, "stream": True})
    events = sse_payloads(stream.text)
    indexes = {e["choices"][0]["index"] for e in events if e["choices"]}
    assert indexes == {0, 1}


# 7. response_fields, return_tokens, tokenize, detokenize --------------------------------------------------

def test_response_fields_and_return_tokens(sim: DropIn) -> None:
    real = recorded("completion_response_fields")
    ours = post(sim, "/completion", real["request"]["body"]).json()
    assert keys(ours) == keys(real["body"])
    assert ours["generation_settings/n_predict"] == 3 and ours["prompt"] == "<s> Hello"
    assert len(ours["tokens"]) == 3 and all(isinstance(t, int) for t in ours["tokens"])
    plain = post(sim, "/completion", {"prompt": "Hello", "n_predict": 3}).json()
    assert plain["tokens"] == []


def test_tokenize_pieces_special_and_detokenize(sim: DropIn) -> None:
    real = recorded("tokenize_pieces")
    ours = post(sim, "/tokenize", real["request"]["body"]).json()
    assert ours["tokens"][0] == real["body"]["tokens"][0] == {"id": 1, "piece": "<s>"}
    assert all(keys(t) == ["id", "piece"] and t["piece"] for t in ours["tokens"])
    content = "What is the capital of France ?"
    tokens = post(sim, "/tokenize", {"content": content}).json()["tokens"]
    assert len(tokens) == 7
    back = post(sim, "/detokenize", {"tokens": tokens}).json()
    assert keys(back) == keys(recorded("detokenize")["body"]) and back["content"] == content
    assert post(sim, "/detokenize", {"tokens": [1, *tokens]}).json()["content"] == "<s>" + content


# 8. refused with 400 --------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["chat_role_not_string", "chat_content_not_string", "chat_two_assistants",
                                  "response_format_type", "response_format_schema_type", "grammar_invalid"])
def test_refused_like_llama_server(sim: DropIn, name: str) -> None:
    real = recorded(name)
    resp = post(sim, real["request"]["path"], real["request"]["body"])
    assert resp.status_code == real["status"] == 400
    assert keys(resp.json()["error"]) == keys(real["body"]["error"])
    assert resp.json()["error"]["type"] == real["body"]["error"]["type"]


def test_valid_structured_requests_are_served(sim: DropIn) -> None:
    base = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    for extra in ({"grammar": 'root ::= "a"{5,5} ("b" | [c-d])*'}, {"response_format": {"type": "json_object"}},
                  {"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "object"}}}},
                  {"json_schema": {"type": ["string", "null"]}}):
        assert post(sim, "/v1/chat/completions", {**base, **extra}).status_code == 200, extra
    both = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}],
            "add_generation_prompt": True, "continue_final_message": True}
    assert post(sim, "/v1/chat/completions", both).status_code == 400


# 9. generation settings -----------------------------------------------------------------------------------

def test_generation_settings_echo_the_request(sim: DropIn) -> None:
    real = recorded("completion_settings")
    ours = post(sim, "/completion", real["request"]["body"]).json()["generation_settings"]
    theirs = real["body"]["generation_settings"]
    assert list(ours) == list(theirs)
    for key in ("seed", "temperature", "top_k", "top_p", "stop", "n_predict", "max_tokens"):
        assert ours[key] == theirs[key], key
    default = post(sim, "/completion", {"prompt": "Hello"}).json()["generation_settings"]
    assert default["seed"] == 42 and default["n_predict"] == 64  # the --seed and -n defaults
    asked = post(sim, "/completion", {"prompt": "Hello", "n_predict": 80, "ignore_eos": True}).json()
    assert asked["generation_settings"]["n_predict"] == asked["timings"]["predicted_n"] == 80  # not capped


# metrics semantics of this build --------------------------------------------------------------------------

def test_metrics_semantics(sim: DropIn) -> None:
    one = post(sim, "/completion", {"prompt": "I believe", "n_predict": 1}).json()["timings"]
    assert one["predicted_n"] == 1 and one["predicted_per_second"] == 0.0 and one["predicted_per_token_ms"] == 0.0
    t = post(sim, "/completion", {"prompt": "I believe", "n_predict": 16}).json()["timings"]
    assert t["predicted_per_second"] == pytest.approx(1e3 / t["predicted_ms"] * 15, abs=1e-6)
    resp = httpx.get(sim.url + "/metrics")
    assert int(resp.headers["Process-Start-Time-Unix"]) <= time.time()
    for line in (ln for ln in resp.text.splitlines() if ln.startswith("llamacpp:")):
        name = line.split(" ")[0]
        assert f"# HELP {name} " in resp.text and f"# TYPE {name} " in resp.text
    slots = httpx.get(sim.url + "/slots").json()
    for slot in slots:
        if "next_token" in slot and not slot["is_processing"]:
            assert slot["next_token"][0]["n_remain"] == -1 and slot["next_token"][0]["n_decoded"] == 0
    with DropIn("--parallel", "1") as off:
        assert httpx.get(off.url + "/metrics").status_code == 501  # llama-server without --metrics


def test_reproducible_text_and_disconnect_frees_the_slot(sim: DropIn) -> None:
    body = {"prompt": "I believe the meaning of life is", "n_predict": 8}
    streamed = "".join(e["content"] for e in sse_payloads(post(sim, "/completion", {**body, "stream": True}).text))
    assert streamed == post(sim, "/completion", body).json()["content"]
    seeds = {post(sim, "/completion", {**body, "seed": s, "temperature": 1.0}).json()["content"] for s in range(4)}
    assert len(seeds) == 4
    with DropIn("--parallel", "1", "--ctx-size", "8192") as one:  # 5000 tokens would take 20 s
        with pytest.raises(httpx.ReadTimeout):
            post(one, "/completion", {"prompt": "long", "n_predict": 5000, "ignore_eos": True}, timeout=0.2)
        deadline = time.time() + 1.5
        while time.time() < deadline and httpx.get(one.url + "/slots").json()[0]["is_processing"]:
            time.sleep(0.05)
        assert not httpx.get(one.url + "/slots").json()[0]["is_processing"]


def test_embeddings_count_their_prompt() -> None:
    with DropIn("--embedding", "--metrics") as s:
        resp = post(s, "/v1/embeddings", {"input": ["hello world", "goodbye world"]})
        assert resp.status_code == 200 and len(resp.json()["data"]) == 2
        fams = {f.name: f.samples[0].value for f in text_string_to_metric_families(httpx.get(s.url + "/metrics").text)}
        assert fams["llamacpp:prompt_tokens"] == 6 and fams["llamacpp:tokens_predicted"] == 0
        assert fams["llamacpp:n_decode"] > 0
    assert json.dumps(recorded("input_tokens")["body"])  # the recorded shape of the token count route


def test_input_tokens_route(sim: DropIn) -> None:
    real = recorded("input_tokens")
    ours = post(sim, "/v1/chat/completions/input_tokens", real["request"]["body"]).json()
    assert keys(ours) == keys(real["body"]) and ours["input_tokens"] > 5
