"""``satbench plan`` as a command: bad input is one line naming the setting with nothing on standard output, a
lane without a usable answer is named, and the plan reads a saved document or a recommender over real HTTP."""

from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from satbench.core.manifest import RunManifest, StepWindow
from satbench.plan import cli
from satbench.plan.planner import Plan
from satbench.recommender.app import create_app
from satbench.recommender.settings import RecommenderSettings
from testkit.net import free_port
from tests.plan.documents import document, lane, rate_block
from tests.plan.test_planner import NP4
from tests.recommender.server import serve


def fleet() -> dict[str, Any]:
    return document({"a/dense": lane("a", "dense", 4, fingerprint=NP4, rate=rate_block(5.0, [4.0, 6.0])),
                     "b/dense": lane("b", "dense", 4, fingerprint=NP4, rate=rate_block(6.0, [5.0, 7.0])),
                     "a/moe": lane("a", "moe", 2, fingerprint=NP4, state="unknown")})


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser()
    cli.configure(parser)
    code = cli.main(parser.parse_args(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    (tmp_path / "recommendations.json").write_text(json.dumps(fleet()))
    return tmp_path


@pytest.mark.parametrize(("argv", "named"), [
    (("--rate", "0"), "--rate '0'"), (("--rate", "-2"), "--rate '-2'"), (("--rate", "fast"), "--rate 'fast'"),
    (("--rate", "nan"), "--rate 'nan'"), (("--rate", "inf"), "--rate 'inf'"), (("--users", "2.5"), "--users '2.5'"),
    (("--users", "0"), "--users '0'"), ((), "--rate RPS or --users N"), (("--rate", "1", "--users", "2"), "give one"),
    (("--rate", "1", "--format", "yaml"), "--format 'yaml'"), (("--rate", "1", "--model", "llama"), "--model llama"),
    (("--users", "4", "--timeout", "0"), "--timeout '0'"),
])
def test_bad_input_is_one_line_naming_the_setting(saved: Path, capsys: pytest.CaptureFixture[str],
                                                  argv: tuple[str, ...], named: str) -> None:
    extra = ("--url", "http://127.0.0.1:1") if "--timeout" in argv else ("--file", str(saved))
    code, out, err = run(capsys, *argv, *extra)
    assert (code, out) == (2, "")
    assert err.startswith("satbench plan: ") and named in err and err.count("\n") == 1, err


def test_a_file_that_is_not_a_document_is_one_line_naming_it(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    for body in ("{not json", json.dumps({"schema": "satbench.recommendations/v2"})):
        (tmp_path / "bad.json").write_text(body)
        code, out, err = run(capsys, "--users", "4", "--file", str(tmp_path / "bad.json"))
        assert (code, out) == (2, "") and err.startswith(f"satbench plan: --file {tmp_path}") and err.count("\n") == 1
    code, out, err = run(capsys, "--users", "4", "--file", str(tmp_path / "missing"))
    assert (code, out) == (2, "") and "--file" in err


def test_a_model_lane_with_no_usable_answer_is_named_in_one_line(saved: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "--users", "4", "--file", str(saved), "--model", "moe")
    assert (code, out) == (1, "")
    assert err.startswith("satbench plan: lane moe: no usable answer (a/moe: validity unknown") and err.count("\n") == 1
    code, out, err = run(capsys, "--users", "4", "--file", str(saved), "--model", "moe", "--unchecked")
    assert code == 0 and "lane moe:" in out and err == ""


def test_the_text_plan_says_the_count_the_margin_and_what_it_rests_on(saved: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "--rate", "11", "--file", str(saved))
    assert code == 1 and err == "satbench plan: lane moe: no usable answer, no plan\n"
    lines = out.splitlines()
    assert lines[0].startswith("plan for 11 requests/s from run r-fleet") and "90% of requests" in lines[0]
    # a (4) and b (5) are one kind, planned from a's 4: ceil(11 / 4) = 3 nodes of 3.667 each
    assert any("3 nodes, -np 4, 3.667 requests/s each" in line for line in lines), out
    assert sum("rests on" in line for line in lines) == 2 and "not used: a/moe: validity unknown" in out


def test_the_json_plan_is_the_plan_model(saved: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--rate", "11", "--file", str(saved / "recommendations.json"), "--format", "json",
                       "--model", "dense")
    result = Plan.model_validate_json(out)
    assert code == 0 and [lane.lane for lane in result.lanes] == ["dense"]
    assert (result.target, result.amount, result.lanes[0].kinds[0].nodes) == ("rate", 11.0, 3)


@pytest.mark.slow
def test_the_plan_reads_a_recommender_over_http(capsys: pytest.CaptureFixture[str]) -> None:
    async def analyzer(manifest: RunManifest, run_dir: Path | None) -> dict[str, Any]:
        return copy.deepcopy(fleet())

    settings = RecommenderSettings(prometheus_url=f"http://127.0.0.1:{free_port()}", refresh_interval_s=3600,
                                   prometheus_timeout_s=1.0, write_token="plan-write-token-00")
    manifest = RunManifest(run_id="r-fleet", created_at=1.0, steps=(StepWindow("dense", 1, 10.0, 40.0),))
    with serve(create_app(settings, analyzer=analyzer, background_refresh=False)) as url:
        assert httpx.post(f"{url}/runs", json=manifest.to_dict(), timeout=30,
                          headers={"Authorization": "Bearer plan-write-token-00"}).status_code == 201
        code, out, err = run(capsys, "--rate", "11", "--url", url, "--format", "json", "--model", "dense")
    assert code == 0 and err == ""
    assert Plan.model_validate_json(out).lanes[0].kinds[0].nodes == 3
    port = free_port()
    code, out, err = run(capsys, "--rate", "11", "--url", f"http://127.0.0.1:{port}", "--timeout", "2")
    assert (code, out) == (1, "") and err.startswith("satbench plan: no answers: --url") and err.count("\n") == 1
