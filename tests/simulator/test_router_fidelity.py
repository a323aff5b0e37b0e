"""The simulated router against the recorded real one (tests/fixtures/llamacpp/router/): the 400 bodies, the
router's /props, /v1/models' child argv, and what a busy slot's ``n_prompt_tokens`` counts."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.simulator.dropin_util import FIXTURES, DropIn

RECORDED = FIXTURES / "router"
LOADED, IDLE = "dense-a", "moe-b"


@pytest.fixture
def models_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LLAMA_CACHE", str(tmp_path / "empty-cache"))
    folder = tmp_path / "models"
    folder.mkdir()
    for name in (LOADED, IDLE):
        (folder / f"{name}.gguf").write_bytes(b"stand-in")
    return folder


def _load(url: str, model: str) -> None:
    assert httpx.post(url + "/models/load", json={"model": model}).status_code == 200
    deadline = time.monotonic() + 5
    while _status(url, model) != "loaded":
        assert time.monotonic() < deadline
        time.sleep(0.02)


def _status(url: str, model: str) -> str:
    return str(next(m for m in httpx.get(url + "/v1/models").json()["data"] if m["id"] == model)["status"]["value"])


def test_the_refusals_and_the_router_props_are_the_recorded_ones(models_dir: Path) -> None:
    argv = ("--router", "--models-dir", str(models_dir), "--no-models-autoload", "--model-load-s", "0.05",
            "--metrics", "--models-max", "2")
    with DropIn(*argv) as s:
        _load(s.url, LOADED)
        for path in ("/metrics", "/slots"):
            r = httpx.get(s.url + path)
            assert r.status_code == 400 and r.json() == json.loads((RECORDED / f"{path[1:]}_no_model.json").read_text())
        for path, recorded_file in (("/metrics", "metrics_tiny-llama-moe.txt"), ("/slots", "slots_tiny-llama-moe.json"),
                                    ("/props", "props_tiny-llama-moe.json")):
            r = httpx.get(s.url + path, params={"model": IDLE})  # the unloaded model
            assert r.status_code == 400 and r.json() == json.loads((RECORDED / recorded_file).read_text())
        props = httpx.get(s.url + "/props").json()
        recorded = json.loads((RECORDED / "props_router.json").read_text())
        assert set(props) == set(recorded)
        assert props["default_generation_settings"] == recorded["default_generation_settings"]
        assert (props["role"], props["max_instances"], props["models_autoload"]) == ("router", 2, False)
        assert httpx.get(s.url + "/health").json() == {"status": "ok"}


def test_v1_models_lists_each_childs_argv_as_the_real_router_does(models_dir: Path) -> None:
    with DropIn("--router", "--models-dir", str(models_dir), "--model-load-s", "0.05", "-c", "2048", "-np", "2") as s:
        _load(s.url, LOADED)
        listed = {m["id"]: m for m in httpx.get(s.url + "/v1/models").json()["data"]}
        args = listed[IDLE]["status"]["args"]  # listed for an unloaded model too, as recorded
        assert args[0] == "llama-server" and "--kv-unified" not in args
        assert args[args.index("--parallel") + 1] == "2" and args[args.index("--ctx-size") + 1] == "2048"
        assert "meta" in listed[LOADED] and "meta" not in listed[IDLE]
        slots = httpx.get(s.url + "/slots", params={"model": LOADED}).json()
        assert [sl["n_ctx"] for sl in slots] == [1024, 1024]  # split: what --parallel 2 without -kvu means
    with DropIn("--router", "--models-dir", str(models_dir), "--model-load-s", "0.05", "-np", "2", "-kvu") as s:
        assert "--kv-unified" in httpx.get(s.url + "/v1/models").json()["data"][0]["status"]["args"]


@pytest.mark.slow
def test_a_busy_slot_counts_its_prompt_and_decoded_tokens(models_dir: Path) -> None:
    """Recorded: n_prompt_tokens 241 = 9 processed + 1 cached + 231 decoded (slots_busy_tiny-llama-dense)."""
    with DropIn("--router", "--models-dir", str(models_dir), "--model-load-s", "0.05", "--time-scale", "20") as s:
        _load(s.url, LOADED)
        body = {"model": LOADED, "prompt": "a prompt of a few words", "n_predict": 64, "stream": True}
        done = threading.Event()

        def generate() -> None:
            with httpx.stream("POST", s.url + "/completion", json=body, timeout=60) as r:
                for _ in r.iter_bytes():
                    pass
            done.set()

        thread = threading.Thread(target=generate)
        thread.start()
        seen = None
        while not done.is_set() and seen is None:
            for slot in httpx.get(s.url + "/slots", params={"model": LOADED}).json():
                if slot["is_processing"] and slot["next_token"][0]["n_decoded"] > 0:
                    seen = slot
            time.sleep(0.005)
        thread.join()
        assert seen is not None, "never saw the slot decoding"
        prompt = seen["n_prompt_tokens_processed"] + seen["n_prompt_tokens_cache"]
        assert seen["n_prompt_tokens"] == prompt + seen["next_token"][0]["n_decoded"] > prompt
        idle = httpx.get(s.url + "/slots", params={"model": LOADED}).json()
        held = [sl["n_prompt_tokens"] for sl in idle if "n_prompt_tokens" in sl]
        assert held == [prompt + 64]  # the finished task's tokens stay, as the prompt cache
