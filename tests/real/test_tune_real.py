"""``satbench tune`` on the real llama-server (opt-in, ``real``): the tiny dense model over -np {2, 4} x
-ub {256, 512}, at the default batch (-b 2048) and chunked (-b 256), under the starvation workload
(``examples/real-tune.toml``). A 1500-token prompt in a 2048-token batch pauses every running decode for
0.30-0.44 s on this build (measured with ``examples/real-starvation.toml``), a 256-token chunk for about
0.1 s: the tune must pick the chunked setting and print its flags."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.real, pytest.mark.slow, pytest.mark.timeout(1500)]

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "examples" / "real-tune.toml"


def test_real_tune_picks_the_chunked_batch(llama_server_binary: Path, tiny_models: dict[str, Path],
                                           tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "satbench.cli", "tune", "--config", str(CONFIG), "--out", str(tmp_path),
            "--set", f'model_dir="{tiny_models["dense"].parent}"']
    env = {**os.environ, "SATBENCH_LLAMA_SERVER": str(llama_server_binary)}
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1450)
    print(done.stdout[-4000:])
    assert done.returncode == 0, f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"
    (tune_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    lane = json.loads((tune_dir / "tune.json").read_text())["lanes"]["dense"]
    winner = lane["winner"]
    assert winner["batch"] == 256 and winner["ubatch"] == 256, lane["candidates"]
    assert "-b 256 -ub 256" in lane["flags"] and lane["flags"] in done.stdout
    unchunked = [c for c in lane["candidates"] if c["batch"] == 2048 and c["state"] == "measured"]
    assert unchunked and all(c["starved_at"] for c in unchunked), unchunked
    assert lane["walked"] < lane["grid"]["size"]  # a dominated candidate was not walked
