"""Bad configuration is refused before anything starts, with a message that names the bad field.

Each case is a dotted override on a valid base config (loadgen's own, then the session's). The refusal
must come from ``load_config``/``load_session_config`` (pure validation, nothing started), and the error
text must name the field so a person can fix the file. The CLIs turn the same errors into exit status 2.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from satbench.loadgen.config import ConfigError, load_config
from satbench.session.config import SessionConfigError, load_session_config

REPO = Path(__file__).resolve().parents[2]
LANE = {"name": "dense", "url": "http://127.0.0.1:8080", "api": "llamacpp"}

LOADGEN_BAD: list[tuple[dict[str, Any], str]] = [
    ({"ladder.concurrency": [0, 2]}, "ladder.concurrency"),
    ({"ladder.concurrency": [-1]}, "ladder.concurrency"),
    ({"ladder.concurrency": []}, "ladder.concurrency"),
    ({"lanes": [{**LANE, "url": "not a url"}]}, "lanes[dense].url"),
    ({"lanes": [{**LANE, "url": "ftp://127.0.0.1:8080"}]}, "lanes[dense].url"),
    ({"lanes": [{**LANE, "url": "http://127.0.0.1:99999"}]}, "lanes[dense].url"),
    ({"lanes": [{**LANE, "api": "grpc"}]}, "lanes[dense].api"),
    ({"lanes": [{**LANE, "name": 'x"}'}]}, "lanes[0].name"),
    ({"lanes": [{**LANE, "api_key": "sk-secret"}]}, "lanes[dense].api_key"),
    ({"lanes": [LANE, LANE]}, "duplicate lane"),
    ({"lanes": [{**LANE, "slots": 10**9}]}, "lanes[dense].slots"),
    ({"warmup_s": 10.0, "min_window_s": 2.0, "max_window_s": 5.0}, "warmup_s"),
    ({"min_window_s": 0}, "min_window_s"),
    ({"warmup_s": -1}, "warmup_s"),
    ({"request_timeout_s": 0}, "request_timeout_s"),
    ({"recommender_url": "127.0.0.1:8095"}, "recommender_url"),
    ({"unknown_knob": 1}, "unknown_knob"),
]


@pytest.mark.parametrize(("override", "field"), LOADGEN_BAD, ids=[f for _, f in LOADGEN_BAD])
def test_loadgen_config_refuses_with_the_field_named(override: dict[str, Any], field: str) -> None:
    base = {"lanes": [LANE], "ladder": {"concurrency": [1, 2]}}
    with pytest.raises(ConfigError) as info:
        load_config(None, {**{k: v for k, v in base.items() if k not in override}, **override})
    assert field in str(info.value)


def test_loadgen_cli_exits_2_before_contacting_anything(tmp_path: Path) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text('[ladder]\nconcurrency = [0]\n[[lanes]]\nname = "dense"\nurl = "http://127.0.0.1:9"\n')
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "satbench.cli", "loadgen", "--config", str(cfg),
                           "--out", str(out)], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "ladder.concurrency" in proc.stderr
    assert not out.exists(), "a refused config must not create the run folder"


SESSION_BAD: list[Any] = [
    ({"loadgen.ladder.concurrency": [0]}, "ladder.concurrency"),
    ({"loadgen.ladder.concurrency": []}, "ladder.concurrency"),
    ({"loadgen.warmup_s": 30.0}, "warmup_s"),
    ({"lanes": []}, "lane"),
    ({"lanes": [{"name": "dense", "runtime": "quantum"}]}, "runtime"),
    ({"lanes": [{"name": "dense", "runtime": "external"}]}, "url"),
    ({"lanes": [{"name": "dense", "runtime": "external", "url": "not a url"}]}, "url"),
    ({"lanes": [{"name": "dense", "parallel": 0}]}, "parallel"),
    ({"model_dir": "/home/someone/models"}, "model_dir"),
    ({"prometheus.url": "localhost:9090"}, "prometheus.url"),
    ({"recommender.url": "not a url"}, "recommender.url"),
    ({"policy.slo.ttft_p95_s": float("inf")}, "policy.slo.ttft_p95_s"),
    ({"policy.max_throughput_ci_ratio": float("nan")}, "policy.max_throughput_ci_ratio"),
    ({"policy.unbounded_stall_elasticity": float("inf")}, "policy.unbounded_stall_elasticity"),
]


@pytest.mark.parametrize(("override", "field"), SESSION_BAD)
def test_session_config_refuses_with_the_field_named(override: dict[str, Any], field: str) -> None:
    with pytest.raises(SessionConfigError) as info:
        load_session_config(None, override)
    assert field in str(info.value)


def test_session_config_refuses_an_unknown_simulator_profile() -> None:
    with pytest.raises(SessionConfigError) as info:
        load_session_config(None, {"lanes": [{"name": "dense", "profile": "no-such-profile"}]})
    assert "profile" in str(info.value)
