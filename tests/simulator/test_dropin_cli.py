"""``satbench sim`` started with llama-server's command line, as a script would start the binary."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import httpx

from testkit.net import free_port, wait_http

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_llama_server_command_line_is_honoured_and_the_rest_named_once() -> None:
    port = free_port()
    argv = [sys.executable, "-m", "satbench.cli", "sim", "--host", "127.0.0.1", "--port", str(port),
            "-m", "models/tiny.gguf", "--ctx-size", "512", "--parallel", "2", "-b", "32", "-ub", "16",
            "--alias", "tiny,fim", "--tags", "chat", "--api-key", "sk-1", "--n-predict", "8", "--seed", "42",
            "--temp", "0.5", "--no-slots", "--no-mmproj", "--rope-scale", "2", "--jinja"]  # fmt: skip
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=err)
        try:
            wait_http(f"http://127.0.0.1:{port}/health", timeout_s=20)
            url, key = f"http://127.0.0.1:{port}", {"Authorization": "Bearer sk-1"}
            props = httpx.get(url + "/props", headers=key).json()
            assert props["total_slots"] == 2
            assert props["default_generation_settings"]["n_ctx"] == 256  # -c 512 over 2 slots
            params = props["default_generation_settings"]["params"]
            assert params["seed"] == 42 and params["n_predict"] == 8 and params["temperature"] == 0.5
            assert props["model_path"] == "models/tiny.gguf"
            assert props["simulator"]["batch"] == 32 and props["simulator"]["ubatch"] == 16
            assert props["endpoint_metrics"] is False and props["endpoint_slots"] is False
            model = httpx.get(url + "/v1/models").json()["data"][0]  # public without the key
            assert model["id"] == "fim" and model["aliases"] == ["fim", "tiny"] and model["tags"] == ["chat"]
            assert httpx.get(url + "/metrics", headers=key).status_code == 501  # no --metrics
            assert httpx.get(url + "/slots", headers=key).status_code == 501  # --no-slots
            assert httpx.post(url + "/completion", json={"prompt": "hi"}).status_code == 401
            done = httpx.post(url + "/completion", json={"prompt": "hi", "ignore_eos": True}, headers=key).json()
            assert done["timings"]["predicted_n"] == 8  # -n is the default n_predict
        finally:
            proc.terminate()
            proc.wait(timeout=10)
        err.seek(0)
        lines = [ln for ln in err.read().decode().splitlines() if "ignoring llama-server flags" in ln]
    assert len(lines) == 1, lines
    assert "--no-mmproj" in lines[0] and "--rope-scale 2" in lines[0] and "--jinja" in lines[0]
    assert "--ctx-size" not in lines[0] and "--alias" not in lines[0]


def test_unknown_flags_are_refused_and_version_answers() -> None:
    bad = subprocess.run([sys.executable, "-m", "satbench.cli", "sim", "--no-such-flag"], cwd=REPO_ROOT,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--no-such-flag" in bad.stderr
    version = subprocess.run([sys.executable, "-m", "satbench.cli", "sim", "--version"], cwd=REPO_ROOT,
                             capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and version.stdout.startswith("version:")
