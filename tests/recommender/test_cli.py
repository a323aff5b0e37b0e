from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from satbench.answer.policy import SLO, Policy
from satbench.recommender import cli


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli.configure(parser)
    return parser.parse_args(list(argv))


def test_flags_and_policy_file_build_the_settings(tmp_path: Path) -> None:
    policy = tmp_path / "session.toml"
    policy.write_text("[policy]\nmin_gain_per_doubling = 0.2\n[policy.slo]\nttft_p95_s = 0.5\n",
                      encoding="utf-8")
    settings = cli.build_settings(parse("--prometheus-url", "none", "--port", "0", "--policy", str(policy),
                                        "--runs-dir", str(tmp_path)))
    assert settings.prometheus_url is None and settings.port == 0 and settings.runs_dir == tmp_path
    assert settings.policy.min_gain_per_doubling == 0.2
    assert settings.policy.slo.ttft_p95_s == 0.5
    assert settings.host == "127.0.0.1"


def test_environment_feeds_the_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SATBENCH_RECOMMENDER_POLICY__JAIN_MIN", "0.75")
    assert cli.build_settings(parse()).policy.jain_min == 0.75


@pytest.mark.parametrize("text", ["{not json", '{"jain_min": 7}', '{"unknown_knob": 1}'])
def test_bad_policy_files_exit_2_with_a_message(tmp_path: Path, text: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "policy.json"
    path.write_text(text, encoding="utf-8")
    assert cli.main(parse("--policy", str(path))) == 2
    assert "policy" in capsys.readouterr().err


def test_the_policy_a_document_embeds_validates_back_to_the_same_policy() -> None:
    policy = Policy(slo=SLO(ttft_p95_s=1.0, e2e_p95_s=None), max_min_share_max=2.0, min_requests_per_step=3)
    assert Policy.model_validate(policy.model_dump()) == policy
    assert Policy.model_validate_json(policy.model_dump_json()) == policy


@pytest.mark.parametrize("changes", [{"jain_min": 1.5}, {"confidence": 1.0}, {"slo": {"itl_p95_s": 0}},
                                     {"min_requests_per_step": 0}, {"surprise": 1}])
def test_a_policy_out_of_bounds_is_refused_even_when_built_in_code(changes: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        Policy(**changes)
