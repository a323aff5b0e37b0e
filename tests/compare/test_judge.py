"""``satbench compare``'s judgment on runs whose truth is set here: two runs of one deployment (the same
throughput and latency distributions, each measured with its own noise) against a deployment made slower.

Each run is drawn from the scenario: throughput is the true rate plus normal noise of the run's published
standard error; latencies are lognormal samples, their p95 and tail computed from the sample as the load
generator does (``core.statistics.quantiles``, ``core.figures.Tail.of``). The expected verdict is the
scenario's (the same deployment: no regression; 30 % slower: a regression), over many seeds.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from satbench.compare.cli import load_document, parse_threshold
from satbench.compare.judge import compare_documents
from satbench.core.figures import StepFigures, Tail
from satbench.core.statistics import quantiles

ROOT = Path(__file__).resolve().parents[2]
RATE = 400.0  # tok/s, the deployment's true throughput at c=4
SE = 0.02 * RATE  # each run's standard error of it


def _step(rng: random.Random, c: int, slow: float) -> StepFigures:
    n = 60
    ttft = [rng.lognormvariate(-4.0, 0.4) * slow for _ in range(n)]
    e2e = [rng.lognormvariate(-1.2, 0.2) * slow for _ in range(n)]
    rate = rng.gauss(RATE / slow, SE / slow)
    return StepFigures(lane="a/dense", concurrency=c, window_s=10.0, requests=n, errors=0, throughput_tok_s=rate,
                       requests_per_s=n / 10.0, ttft_s=quantiles(ttft), latency_s=quantiles(e2e),
                       itl_s=quantiles([rng.lognormvariate(-5, 0.3) * slow for _ in range(200)]),
                       ttft_tail=Tail.of(ttft), latency_tail=Tail.of(e2e), throughput_se_tok_s=SE / slow,
                       throughput_dof=20.0, throughput_ci_tok_s=(rate - 2.1 * SE / slow, rate + 2.1 * SE / slow))


def run_document(seed: int, *, slow: float = 1.0, answer: int = 4, decode_ok: bool = True) -> dict[str, Any]:
    rng = random.Random(seed)
    steps = [{**_step(rng, c, slow).to_dict(), "usable": True} for c in (1, 2, 4, 8)]
    lane = {"recommended_concurrency": answer, "status": "ok", "steps": steps, "saturation_concurrency": None,
            "binding_constraint": "throughput_plateau", "throughput_at_recommended_tok_s": None,
            "starvation": {"ok": decode_ok, "decode_ok": decode_ok, "prefill_ok": True, "decode_stall_max_ratio": None,
                           "prefill_wait_max_s": None},
            "fairness": {"ok": True, "jain_min": None}, "run_id": f"run-{seed}", "measured_at": None}
    return {"schema": "satbench.recommendations/v2", "generated_at": "2026-12-04T00:00:00Z", "run_id": f"run-{seed}",
            "source": {"kind": "records"}, "policy": {"confidence": 0.95}, "lanes": {"a/dense": lane}}


def test_two_runs_of_one_deployment_show_no_significant_change() -> None:
    # Bonferroni holds the family at 5 % (the threshold on top only lowers it): about 10 in 200 at most, where
    # three tests each at 5 % would flag about 28
    flagged = [seed for seed in range(200)
               if compare_documents(run_document(2 * seed), run_document(2 * seed + 1)).regressions()]
    assert len(flagged) <= 15, flagged


def test_a_slower_deployment_is_named_with_its_figure() -> None:
    for seed in range(10):
        result = compare_documents(run_document(2 * seed), run_document(2 * seed + 1, slow=1.3))
        lines = result.regressions()
        assert any(line.startswith("a/dense: output tok/s at c=4 ") and "(-2" in line for line in lines), lines
        assert any(line.startswith(("a/dense: TTFT p95 at c=4 ", "a/dense: e2e p95 at c=4 ")) for line in lines), lines


def test_a_small_significant_change_is_within_the_threshold() -> None:
    a, b = run_document(1), run_document(1)
    for step in b["lanes"]["a/dense"]["steps"]:
        step["throughput_tok_s"] *= 0.97  # 3 % slower, far outside its 0.3 % interval of the difference
        step["throughput_se_tok_s"] = step["throughput_se_tok_s"] / 10
    for step in a["lanes"]["a/dense"]["steps"]:
        step["throughput_se_tok_s"] = step["throughput_se_tok_s"] / 10
    assert compare_documents(a, b).regressions() == []
    assert compare_documents(a, b, threshold=0.02).regressions()[0].startswith("a/dense: output tok/s at c=4")


def test_a_lower_answer_and_a_new_flag_are_regressions_an_undecided_one_is_not() -> None:
    lines = compare_documents(run_document(1), run_document(1, answer=2, decode_ok=False)).regressions()
    assert lines == ["a/dense: recommended concurrency 4 -> 2", "a/dense: decode starvation now flagged"]
    undecided = run_document(1, answer=2)
    undecided["lanes"]["a/dense"]["status"] = "undecided"
    assert compare_documents(run_document(1), undecided).regressions() == []


@pytest.mark.slow
def test_the_command_line_reads_folders_files_and_refuses_bad_input_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "run-a").mkdir()
    (tmp_path / "run-a" / "recommendations.json").write_text(json.dumps(run_document(1)))
    (tmp_path / "b.json").write_text(json.dumps(run_document(2, slow=1.5)))
    assert load_document(str(tmp_path / "run-a")).lanes["a/dense"].recommended_concurrency == 4
    assert parse_threshold("5%") == pytest.approx(0.05) and parse_threshold("0.1") == 0.1

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "satbench.cli", "compare", *args], cwd=ROOT,
                              capture_output=True, text=True, timeout=60)

    same = cli(str(tmp_path / "run-a"), str(tmp_path / "run-a"))
    assert same.returncode == 0 and same.stdout.strip().endswith("no significant change"), same.stdout
    slower = cli(str(tmp_path / "run-a"), str(tmp_path / "b.json"))
    assert slower.returncode == 1 and "regression (" in slower.stdout, slower.stdout
    assert "a/dense: output tok/s at c=4 " in slower.stdout
    bad_threshold = [str(tmp_path / "b.json")] * 2 + ["--threshold", "150%"]
    bad_threshold = [str(tmp_path / "b.json")] * 2 + ["--threshold", "150%"]
    for args, said in ((["nowhere", str(tmp_path / "b.json")], "satbench compare: nowhere: no recommendations"),
                       (bad_threshold, "satbench compare: --threshold 150%: between")):
        bad = cli(*args)
        assert bad.returncode == 2 and bad.stderr.startswith(said) and len(bad.stderr.splitlines()) == 1, bad.stderr


@pytest.mark.parametrize(("args", "se", "dof"), [
    ((1.0, 10.0, 1.0, 10.0), 2 ** 0.5, 20.0),        # equal variances and sizes: the pooled dof
    ((3.0, 5.0, 4.0, 50.0), 5.0, 1 / ((9 / 25) ** 2 / 5 + (16 / 25) ** 2 / 50)),
    ((0.0, 4.0, 0.0, 9.0), 0.0, 9.0),                # two exact means
])
def test_welch_difference(args: tuple[float, float, float, float], se: float, dof: float) -> None:
    from satbench.core.statistics import welch_difference

    assert welch_difference(*args) == pytest.approx((se, dof))


def test_exceedances_differ_is_fishers_one_sided_test() -> None:
    from satbench.core.statistics import exceedances_differ

    assert exceedances_differ(3, 60, 3, 60) > 0.5  # the same share: nothing to see
    assert exceedances_differ(3, 60, 16, 60) < 0.01  # many more above the limit
    assert exceedances_differ(16, 60, 3, 60) > 0.99  # fewer: not "greater"
    assert exceedances_differ(0, 0, 5, 10) == 1.0
