from __future__ import annotations

from pathlib import Path

import pytest

from satbench.loadgen.cli import parse_overrides
from satbench.loadgen.config import ConfigError, LoadgenConfig, load_config

LANE = {"name": "dense", "url": "http://127.0.0.1:8080", "api": "llamacpp"}


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "loadgen.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_make_a_short_session() -> None:
    cfg = LoadgenConfig()
    assert cfg.ladder.concurrency == [1, 2, 4, 8]
    assert not cfg.ladder.extend and cfg.ladder.max_rung == 8  # standalone: exactly the listed rungs
    per_step_max = cfg.warmup_s + cfg.max_window_s + 5.0  # a drain follows requests of about a second here
    per_step_min = cfg.warmup_s + cfg.min_window_s
    assert 2 * 4 * per_step_min <= 180 and 2 * 4 * per_step_max <= 240


def test_toml_file_and_overrides(tmp_path: Path) -> None:
    path = write(tmp_path, """
warmup_s = 1.0
[ladder]
concurrency = [1, 3]
[[lanes]]
name = "dense"
url = "http://127.0.0.1:8080/"
api = "openai-chat"
model = "tiny"
api_key_env = "SATBENCH_TEST_KEY"
[workload.output_tokens]
kind = "uniform"
low = 8
high = 16
""")
    cfg = load_config(path, {"ladder.concurrency": [2, 4], "workload.seed": 7})
    assert cfg.ladder.concurrency == [2, 4]
    assert cfg.workload.seed == 7 and cfg.workload.output_tokens.high == 16
    assert cfg.lanes[0].url == "http://127.0.0.1:8080"
    assert cfg.lanes[0].api == "openai-chat" and cfg.lanes[0].api_key_env == "SATBENCH_TEST_KEY"


def test_api_key_read_from_env_never_stored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SATBENCH_TEST_KEY", "s3cret")
    cfg = LoadgenConfig.model_validate({"lanes": [{**LANE, "api_key_env": "SATBENCH_TEST_KEY"}]})
    assert cfg.lanes[0].api_key() == "s3cret"
    assert "s3cret" not in cfg.model_dump_json()


@pytest.mark.parametrize(("overrides", "field"), [
    ({"ladder.concurrency": [0, 2]}, "ladder.concurrency"),
    ({"ladder.concurrency": [-1]}, "ladder.concurrency"),
    ({"ladder.concurrency": []}, "ladder.concurrency"),
    ({"ladder.concurrency": [2, 2]}, "ladder.concurrency"),
    ({"ladder.concurrency": [1, 128]}, "ladder.concurrency: [128] above max_concurrency (64)"),
    ({"ladder.max_concurrency": 0}, "ladder.max_concurrency"),
    ({"ladder.extend_min_gain": -0.1}, "ladder.extend_min_gain"),
    ({"ladder.extend_ttft_p95_s": 0}, "ladder.extend_ttft_p95_s"),
    ({"ladder.extend_itl_p95_s": -1}, "ladder.extend_itl_p95_s"),
    ({"ladder.extend_max_error_ratio": 1.5}, "ladder.extend_max_error_ratio"),
    ({"lanes": [{**LANE, "url": "localhost:8080"}]}, "lanes[dense].url"),
    ({"lanes": [{**LANE, "url": "ftp://host"}]}, "lanes[dense].url"),
    ({"lanes": [{**LANE, "api": "grpc"}]}, "lanes[dense].api"),
    ({"lanes": [LANE, LANE]}, "duplicate lane names: dense"),
    ({"min_window_s": 10, "max_window_s": 5}, "shorter than min_window_s"),
    ({"warmup_s": 30, "max_window_s": 20}, "shorter than warmup_s"),
    ({"min_requests": 0}, "min_requests"),
    ({"workload.prefill_probe_share": 1.5}, "workload.prefill_probe_share"),
    ({"workload.output_tokens": {"kind": "uniform", "low": 10, "high": 5}}, "workload.output_tokens"),
    ({"drain": "sometimes"}, "drain"),
    ({"bogus": 1}, "bogus"),
])
def test_bad_values_are_refused_naming_the_field(overrides: dict, field: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(None, overrides)
    assert field in str(err.value)


def test_every_bad_field_is_named_at_once() -> None:
    with pytest.raises(ConfigError) as err:
        load_config(None, {"ladder.concurrency": [0], "min_requests": 0, "lanes": [{**LANE, "url": "x"}]})
    text = str(err.value)
    assert "ladder.concurrency" in text and "min_requests" in text and "lanes[dense].url" in text


def test_bad_toml_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(write(tmp_path, "lanes = [[["), {})
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.toml", {})


def test_cli_overrides_parse_toml_values() -> None:
    assert parse_overrides(["ladder.concurrency=[1,2]", "warmup_s=0.5", "drain=cancel"]) == {
        "ladder.concurrency": [1, 2], "warmup_s": 0.5, "drain": "cancel"}
    with pytest.raises(ValueError):
        parse_overrides(["novalue"])


def test_example_config_loads() -> None:
    cfg = load_config(Path(__file__).parents[2] / "satbench" / "loadgen" / "example.toml", {})
    assert [lane.name for lane in cfg.lanes] == ["dense", "moe"]
    assert cfg.workload.output_tokens.kind == "lognormal"
    assert cfg.ladder == LoadgenConfig().ladder  # the example spells out the ladder's defaults
