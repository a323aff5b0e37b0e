"""``examples/real-starvation.toml`` as an operator runs it: the same tiny dense model on two real llama-server
lanes, the default batch (``-b 2048 -ub 512``: a ~1500-token prompt is one step and every running decode
waits for it) against chunked prefill (``-b 256 -ub 256``). Measured before the bounded-wait definition:
each request's longest pause (p99 over requests) 0.30-0.44 s with ``-b 2048`` and 0.09-0.105 s with
``-b 256``, on either side of the 250 ms time-between-tokens objective. The first lane must be flagged
decode-starved, the second must get an answer; both lanes' pauses are printed in ms.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.real, pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "examples" / "real-starvation.toml"


def test_whole_prompt_prefill_is_starvation_and_chunked_prefill_gets_an_answer(
        llama_server_binary: Path, tiny_models: dict[str, Path], tmp_path: Path) -> None:
    if shutil.which("prometheus") is None:
        pytest.skip("the prometheus binary is not installed")
    argv = [sys.executable, "-m", "satbench.cli", "run", "--config", str(CONFIG), "--out", str(tmp_path),
            "--set", f'model_dir="{tiny_models["dense"].parent}"', "--set", "loadgen.ladder.extend=false"]
    env = {**os.environ, "SATBENCH_LLAMA_SERVER": str(llama_server_binary)}
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=850)
    assert done.returncode in (0, 1), f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    doc = json.loads((run_dir / "recommendations.json").read_text())
    pauses = {lane: [(s["concurrency"], None if s["pause_s"]["p99"] is None else round(s["pause_s"]["p99"] * 1000))
                     for s in answer["steps"]] for lane, answer in doc["lanes"].items()}
    print(f"\npause p99 per rung (ms): {pauses}")
    whole, chunked = doc["lanes"]["dense-b2048"], doc["lanes"]["dense-b256"]
    assert whole["starvation"]["decode_flagged_at"], (pauses, whole["steps"][0]["checks"])
    assert chunked["starvation"]["decode_flagged_at"] == [], (pauses, chunked["steps"][0]["checks"])
    assert chunked["recommended_concurrency"] is not None, (chunked["status"], chunked["reason"])
    readme = (run_dir / "README.md").read_text()
    assert "pause p99" in readme and "decode starved" in readme
