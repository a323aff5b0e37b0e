"""Router mode (``simulator.router``) and conversation streams (``simulator.streams``), over real HTTP."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.simulator.dropin_util import DropIn, sse_payloads

COMMIT = "a" * 40
TINY = "ggml-org/tiny-GGUF:Q8_0"
OTHER = "ggml-org/other:F32"
CHAT = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 8, "stream": True}


def _cache(root: Path) -> Path:
    for repo, files in (("ggml-org/tiny-GGUF", ("tiny-Q8_0.gguf", "mmproj-tiny.gguf")),
                        ("ggml-org/other", ("other-F32.gguf",))):  # fmt: skip
        folder = root / ("models--" + repo.replace("/", "--"))
        (folder / "refs").mkdir(parents=True)
        (folder / "refs" / "main").write_text(COMMIT)
        for f in files:
            path = folder / "snapshots" / COMMIT / f
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"stand-in")
    return root


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LLAMA_CACHE", str(_cache(tmp_path / "hub")))
    monkeypatch.delenv("LLAMA_SERVER_DEBUG_FAKE_TIMING", raising=False)
    return tmp_path


def _status(url: str, model: str) -> str:
    data = httpx.get(url + "/models").json()["data"]
    return str(next(m["status"]["value"] for m in data if m["id"] == model))


def _wait_status(url: str, model: str, want: str, timeout_s: float = 5.0) -> None:
    deadline = time.time() + timeout_s
    while _status(url, model) != want:
        assert time.time() < deadline, f"{model} never reached {want}"
        time.sleep(0.01)


def test_router_lists_the_cache_the_models_dir_and_the_preset(cache: Path) -> None:
    models_dir = cache / "local"
    (models_dir / "sub").mkdir(parents=True)
    (models_dir / "flat-model.gguf").write_bytes(b"x")
    (models_dir / "sub" / "weights-Q4_K_M.gguf").write_bytes(b"x")
    preset = cache / "preset.ini"
    preset.write_text("[*]\nctx-size = 1024\n\n[chat-a]\nhf-repo = ggml-org/other\nalias = a1,a2\ntags = chat\n"
                      "dedup-cache-models = 1\n")
    with DropIn("--router", "-np", "2", "--models-dir", str(models_dir), "--models-preset", str(preset)) as s:
        body = httpx.get(s.url + "/v1/models").json()
        ids = {m["id"]: m for m in body["data"]}
        assert set(ids) == {TINY, "flat-model", "sub", "chat-a"}  # other:F32 hidden by the dedup preset
        assert ids[TINY]["source"] == "cache" and ids[TINY]["can_remove"] is True
        assert ids["sub"]["source"] == "models_dir" and ids["chat-a"]["source"] == "preset"
        assert ids["chat-a"]["aliases"] == ["a1", "a2"] and ids["chat-a"]["tags"] == ["chat"]
        assert all(m["status"]["value"] == "unloaded" for m in body["data"])
        props = httpx.get(s.url + "/props").json()
        assert props["role"] == "router" and props["max_instances"] == 4 and props["models_autoload"] is True
        # a hidden cache model stays usable; an alias routes to its model
        assert httpx.post(s.url + "/tokenize", json={"model": OTHER, "content": "hi"}).status_code == 200
        r = httpx.post(s.url + "/v1/chat/completions", json={**CHAT, "model": "a2", "stream": False}, timeout=10)
        assert r.status_code == 200 and r.json()["model"] == "chat-a"
        assert httpx.get(s.url + "/props", params={"model": "chat-a"}).json()["total_slots"] == 2


def test_router_autoloads_routes_and_refuses_what_it_cannot_route() -> None:
    with DropIn("--router", "--model-load-s", "0.3", "--metrics", "-np", "1") as s:
        seen: list[str] = []
        done = threading.Event()

        def poll() -> None:
            while not done.is_set():
                seen.append(_status(s.url, TINY))
                time.sleep(0.01)

        t = threading.Thread(target=poll)
        t.start()
        r = httpx.post(s.url + "/v1/chat/completions", json={**CHAT, "model": TINY}, timeout=10)
        done.set()
        t.join()
        assert r.status_code == 200 and r.text.endswith("data: [DONE]\n\n")
        assert "loading" in seen and _status(s.url, TINY) == "loaded" and _status(s.url, OTHER) == "unloaded"
        assert httpx.get(s.url + "/metrics").status_code == 400  # a router wants ?model=
        assert httpx.get(s.url + "/slots").status_code == 400
        assert "llamacpp:requests_processing" in httpx.get(s.url + "/metrics", params={"model": TINY}).text
        assert len(httpx.get(s.url + "/slots", params={"model": TINY}).json()) == 1
        bad = httpx.post(s.url + "/v1/chat/completions", json={**CHAT, "model": "no/such"})
        assert bad.status_code == 400 and "not found" in bad.json()["error"]["message"]
        missing = httpx.post(s.url + "/completion", json={"prompt": "hi"})
        assert missing.status_code == 400 and "missing" in missing.json()["error"]["message"]


def test_models_max_evicts_the_least_recently_used_and_unload_frees() -> None:
    with DropIn("--router", "--model-load-s", "0.05", "--models-max", "1") as s:
        assert httpx.post(s.url + "/models/load", json={"model": TINY}).json() == {"success": True}
        _wait_status(s.url, TINY, "loaded")
        again = httpx.post(s.url + "/models/load", json={"model": TINY})
        assert again.status_code == 400 and again.json()["error"]["message"] == "model is already running"
        assert httpx.post(s.url + "/models/load", json={"model": OTHER}).status_code == 200
        _wait_status(s.url, OTHER, "loaded")
        assert _status(s.url, TINY) == "unloaded"
        assert httpx.post(s.url + "/models/unload", json={"model": OTHER}).json() == {"success": True}
        assert _status(s.url, OTHER) == "unloaded"
        assert httpx.post(s.url + "/models/unload", json={"model": OTHER}).status_code == 400
        assert httpx.post(s.url + "/models/load", json={"model": "no/such"}).status_code == 404


def test_no_models_autoload_refuses_a_model_not_loaded() -> None:
    with DropIn("--router", "--model-load-s", "0.05", "--no-models-autoload") as s:
        assert httpx.get(s.url + "/props").json()["models_autoload"] is False
        body = {**CHAT, "model": TINY, "stream": False}
        r = httpx.post(s.url + "/v1/chat/completions", json=body)
        assert r.status_code == 400 and r.json()["error"]["message"] == "model is not loaded"
        httpx.post(s.url + "/models/load", json={"model": TINY})
        _wait_status(s.url, TINY, "loaded")
        assert httpx.post(s.url + "/v1/chat/completions", json=body, timeout=10).status_code == 200


def test_a_conversation_stream_replays_resumes_and_stops() -> None:
    conv = {"X-Conversation-Id": f"conv-1::{TINY}"}
    with DropIn("--router", "--model-load-s", "0.05") as s:
        first = httpx.post(s.url + "/v1/chat/completions", json={**CHAT, "model": TINY}, headers=conv, timeout=10)
        assert first.status_code == 200 and first.text.endswith("data: [DONE]\n\n")
        q = {"conv_id": conv["X-Conversation-Id"]}
        replay = httpx.get(s.url + "/v1/stream", params={**q, "from": 0})
        assert replay.status_code == 200 and replay.text == first.text
        assert replay.headers["Content-Type"].startswith("text/event-stream")
        assert httpx.get(s.url + "/v1/stream", params={**q, "from": 10}).text == first.text[10:]
        looked = httpx.post(s.url + "/v1/streams/lookup", json={"conversation_ids": [q["conv_id"]]}).json()
        assert looked[0]["conversation_id"] == q["conv_id"] and looked[0]["is_done"] is True
        assert looked[0]["total_bytes"] == len(first.content)
        assert httpx.delete(s.url + "/v1/stream", params=q).status_code == 204
        assert httpx.get(s.url + "/v1/stream", params={**q, "from": 0}).status_code == 404
        assert httpx.delete(s.url + "/v1/stream", params=q).status_code == 204  # idempotent
        assert httpx.get(s.url + "/v1/stream").status_code == 400
        assert httpx.get(s.url + "/v1/stream", params={"conv_id": "never"}).status_code == 404


def test_a_stop_while_the_model_loads_cancels_the_parked_request() -> None:
    conv = {"X-Conversation-Id": "conv-stop"}
    out: dict[str, Any] = {}
    with DropIn("--router", "--model-load-s", "0.6") as s:
        def post() -> None:
            out["r"] = httpx.post(s.url + "/v1/chat/completions", json={**CHAT, "model": TINY}, headers=conv,
                                  timeout=10)

        t = threading.Thread(target=post)
        t.start()
        _wait_status(s.url, TINY, "loading")
        q = {"conv_id": "conv-stop"}
        assert httpx.get(s.url + "/v1/stream", params={**q, "from": 0}).status_code == 503
        assert httpx.delete(s.url + "/v1/stream", params=q).status_code == 204
        t.join(10)
        r = out["r"]
        assert r.status_code == 400 and "cancelled" in r.json()["error"]["message"]
        assert httpx.get(s.url + "/v1/stream", params={**q, "from": 0}).status_code == 404


def test_a_session_survives_its_client_leaving() -> None:
    conv = {"X-Conversation-Id": "conv-gone"}
    with DropIn("--router", "--model-load-s", "0.05") as s:
        body = {**CHAT, "model": TINY, "max_tokens": 64}
        with httpx.stream("POST", s.url + "/v1/chat/completions", json=body, headers=conv, timeout=10) as r:
            next(r.iter_bytes())  # read a little, then hang up
        replay = httpx.get(s.url + "/v1/stream", params={"conv_id": "conv-gone", "from": 0}, timeout=10)
        payloads = sse_payloads(replay.text)
        assert replay.text.endswith("data: [DONE]\n\n")
        assert payloads[-1]["choices"][0]["finish_reason"] == "length"


def test_without_router_the_simulator_keeps_serving_its_one_model() -> None:
    with DropIn("--parallel", "1") as s:
        data = httpx.get(s.url + "/v1/models").json()["data"]
        assert len(data) == 1 and "status" not in data[0]
        assert httpx.get(s.url + "/slots").status_code == 200
        assert httpx.get(s.url + "/props").json()["total_slots"] == 1
    with DropIn("--router", "-m", "models/x.gguf") as s:  # a model source: not a router
        assert httpx.get(s.url + "/v1/models").json()["data"][0]["id"] == "models/x.gguf"
    with DropIn("--parallel", "1") as s:  # a single-model server keeps conversation streams too
        conv = {"X-Conversation-Id": "c"}
        first = httpx.post(s.url + "/v1/chat/completions", json=CHAT, headers=conv, timeout=10)
        assert httpx.get(s.url + "/v1/stream", params={"conv_id": "c"}).text == first.text


def test_a_cached_preset_repo_makes_a_router(cache: Path) -> None:
    folder = cache / "hub" / "models--org--presets"
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text(COMMIT)
    (folder / "snapshots" / COMMIT).mkdir(parents=True)
    (folder / "snapshots" / COMMIT / "preset.ini").write_text("[from-preset]\nhf-repo = ggml-org/other\n")
    with DropIn("-hf", "org/presets") as s:
        ids = {m["id"] for m in httpx.get(s.url + "/models").json()["data"]}
        assert "from-preset" in ids and TINY in ids


@pytest.mark.slow
def test_a_simulated_download_is_announced_and_listed() -> None:
    with DropIn("--router", "--model-load-s", "0.1") as s:
        events: list[dict[str, Any]] = []
        ready = threading.Event()

        def listen() -> None:
            import json

            with httpx.stream("GET", s.url + "/models/sse", timeout=10) as r:
                ready.set()
                for line in r.iter_lines():
                    if line.startswith("data: "):
                        events.append(json.loads(line[6:]))
                        if events[-1]["event"] == "download_finished":
                            return

        t = threading.Thread(target=listen, daemon=True)
        t.start()
        assert ready.wait(5)
        time.sleep(0.05)
        assert httpx.post(s.url + "/models", json={"model": "org/new:F16"}).json() == {"success": True}
        t.join(5)
        kinds = [e["event"] for e in events if e["model"] == "org/new:F16"]
        assert "download_progress" in kinds and kinds[-1] == "download_finished"
        assert "org/new:F16" in {m["id"] for m in httpx.get(s.url + "/models").json()["data"]}
        assert httpx.post(s.url + "/models", json={"model": "org/new:F16"}).status_code == 400
        assert httpx.delete(s.url + "/models", params={"model": "org/new:F16"}).json() == {"success": True}
        assert "org/new:F16" not in {m["id"] for m in httpx.get(s.url + "/models").json()["data"]}
