"""``satbench compare``'s judgment on runs whose truth is set here: two runs of one deployment (the same
throughput and latency distributions, each measured with its own noise) against a deployment made slower.

Each run is drawn from the scenario: throughput is the true rate plus normal noise of the run's published
standard error; latencies are lognormal samples, their p95 and tail computed from the sample as the load
generator does (``core.statistics.quantiles``, ``core.figures.Tail.of``). The expected verdict is the
scenario's (the same deployment: no regression; 30 % slower: a regression), over many seeds.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from satbench.answer.document import read_document
from satbench.compare.cli import load_document, parse_threshold
from satbench.compare.comparable import NotComparable
from satbench.compare.judge import Floor, Run, RungTails, compare_documents, compare_runs
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


def _part(values: dict[str, Any]) -> dict[str, Any]:
    return {"digest": "d" + str(sorted(values.items())), "values": values}


def run_document(seed: int, *, slow: float = 1.0, answer: int = 4, decode_ok: bool = True, build: str = "b5000",
                 prompt_tokens: int = 64, min_gain: float = 0.1, ladder: tuple[int, ...] = (1, 2, 4, 8)
                 ) -> dict[str, Any]:
    rng = random.Random(seed)
    steps = [{**_step(rng, c, slow).to_dict(), "usable": True} for c in ladder]
    fingerprint = {"runtime": {"build": build}, "model": {"path": "m.gguf"}, "settings": {"slots": 4},
                   "hardware": {"gpu": "GPU-1"}, "workload": _part({"prompt_tokens": prompt_tokens}),
                   "policy": _part({"min_gain_per_doubling": min_gain})}
    lane = {"recommended_concurrency": answer, "status": "ok", "steps": steps, "saturation_concurrency": None,
            "fingerprint": fingerprint,
            "binding_constraint": "throughput_plateau", "throughput_at_recommended_tok_s": None,
            "starvation": {"ok": decode_ok, "decode_ok": decode_ok, "prefill_ok": True, "decode_stall_max_ratio": None,
                           "prefill_wait_max_s": None},
            "fairness": {"ok": True, "jain_min": None}, "run_id": f"run-{seed}", "measured_at": None}
    return {"schema": "satbench.recommendations/v2", "generated_at": "2026-12-04T00:00:00Z", "run_id": f"run-{seed}",
            "source": {"kind": "records"}, "policy": {"confidence": 0.95, "min_gain_per_doubling": min_gain},
            "lanes": {"a/dense": lane}}


def test_two_runs_of_one_deployment_show_no_significant_change() -> None:
    # Bonferroni holds the family at 5 % (the threshold on top only lowers it): about 10 in 200 at most, where
    # three tests each at 5 % would flag about 28
    flagged = [seed for seed in range(200)
               if compare_documents(run_document(2 * seed), run_document(2 * seed + 1)).regressions()]
    assert len(flagged) <= 15, flagged


def test_a_slower_deployment_is_named_with_its_figure_under_what_changed() -> None:
    for seed in range(10):
        result = compare_documents(run_document(2 * seed), run_document(2 * seed + 1, slow=1.3, build="b5100"))
        lines = result.regressions()
        assert any(line.startswith("a/dense: output tok/s at c=4 ") and "(-2" in line for line in lines), lines
        assert any(line.startswith(("a/dense: TTFT p95 at c=4 ", "a/dense: e2e p95 at c=4 ")) for line in lines), lines
        assert result.verdict == "FAIL"
        assert result.headline().startswith("FAIL runtime.build b5000 -> b5100: a/dense c=4 "), result.headline()


def test_a_small_significant_change_is_within_the_threshold() -> None:
    a, b = run_document(1), run_document(1)
    for step in b["lanes"]["a/dense"]["steps"]:
        step["throughput_tok_s"] *= 0.97  # 3 % slower, far outside its 0.3 % interval of the difference
        step["throughput_se_tok_s"] = step["throughput_se_tok_s"] / 10
    for step in a["lanes"]["a/dense"]["steps"]:
        step["throughput_se_tok_s"] = step["throughput_se_tok_s"] / 10
    assert compare_documents(a, b).regressions() == []
    assert compare_documents(a, b).verdict == "PASS"
    assert compare_documents(a, b, threshold=0.02).regressions()[0].startswith("a/dense: output tok/s at c=4")
    assert compare_documents(a, b, floors={"throughput": Floor(0.02, 20.0)}).regressions() == []  # 12 tok/s


def test_a_lower_answer_and_a_new_flag_are_regressions_an_undecided_one_is_not() -> None:
    lines = compare_documents(run_document(1), run_document(1, answer=2, decode_ok=False)).regressions()
    assert lines == ["a/dense: recommended concurrency 4 (ok) -> 2 (ok)", "a/dense: decode starvation now flagged"]
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
    assert same.returncode == 0 and same.stdout.startswith("PASS "), same.stdout
    slower = cli(str(tmp_path / "run-a"), str(tmp_path / "b.json"))
    assert slower.returncode == 1 and "regression (" in slower.stdout, slower.stdout
    assert "a/dense: output tok/s at c=4 " in slower.stdout
    assert slower.stdout.startswith("FAIL no deployment field differs: a/dense c=4 ")
    bad_threshold = [str(tmp_path / "b.json")] * 2 + ["--threshold", "150%"]
    bad_floor = [str(tmp_path / "b.json")] * 2 + ["--floor", "tft=10%"]
    bad_allow = [str(tmp_path / "b.json")] * 2 + ["--allow", "hardware"]
    for args, said in ((["nowhere", str(tmp_path / "b.json")], "satbench compare: nowhere: no recommendations"),
                       (bad_threshold, "satbench compare: --threshold 150%: between"),
                       (bad_floor, "satbench compare: --floor 'tft=10%': FIGURE=REL[,ABS]"),
                       (bad_allow, "satbench compare: --allow hardware: one of workload, policy, ladder")):
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


@pytest.mark.parametrize(("b_kwargs", "named"), [
    ({"prompt_tokens": 256}, "workload"),
    ({"min_gain": 0.6}, "policy"),
    ({"ladder": (1, 3, 6, 12)}, "ladder"),
])
def test_runs_that_differ_beyond_the_deployment_are_refused_by_name(b_kwargs: dict[str, Any], named: str) -> None:
    a, b = run_document(1), run_document(1, **b_kwargs)
    with pytest.raises(NotComparable) as refused:
        compare_documents(a, b)
    said = str(refused.value)
    assert len(said.splitlines()) == 1 and f"differ in {named}" in said and f"--allow {named}" in said, said
    allowed = compare_documents(a, b, allow=[named])  # the difference is the point: compared, and said
    assert [name for name, _ in allowed.allowed] == [named]


def test_a_walk_that_stopped_earlier_is_the_same_ladder_and_the_build_heads_the_verdict() -> None:
    result = compare_documents(run_document(1), run_document(2, ladder=(1, 2, 4), build="b5100"))
    assert result.allowed == ()
    assert result.headline().startswith("PASS runtime.build b5000 -> b5100: nothing worse beyond its floor")


def _tail_run(values: dict[str, list[float]], *, answer: int = 8, rung: int = 8, full: bool) -> Run:
    """One run whose rung ``rung`` has these per-request TTFT / e2e / pause excess values (seconds)."""
    rng = random.Random(0)
    fig = dataclasses.replace(
        _step(rng, rung, 1.0), ttft_s=quantiles(values["ttft"]), ttft_tail=Tail.of(values["ttft"]),
        latency_s=quantiles(values["e2e"]), latency_tail=Tail.of(values["e2e"]),
        pause_excess_s=quantiles(values["pause"]), pause_excess_tail=Tail.of(values["pause"]),
        throughput_tok_s=RATE, throughput_ci_tok_s=(RATE - 2.1 * SE, RATE + 2.1 * SE))
    doc = run_document(1, answer=answer, ladder=(rung,))
    doc["lanes"]["a/dense"]["steps"] = [{**fig.to_dict(), "usable": True}]
    tails = {"a/dense": {rung: RungTails(Tail.of(values["ttft"], None), Tail.of(values["e2e"], None),
                                         Tail.of(values["pause"], None))}} if full else {}
    return Run(read_document(doc), tails)


def _values(seed: int, n: int, *, ttft_scale: float = 1.0, ttft_shift: float = 0.0, pause_scale: float = 1.0,
            pause_sigma: float = 0.4) -> dict[str, list[float]]:
    rng = random.Random(seed)
    return {"ttft": [rng.lognormvariate(math.log(0.04), 0.4) * ttft_scale + ttft_shift for _ in range(n)],
            "e2e": [rng.lognormvariate(math.log(1.7), 0.05) for _ in range(n)],
            "pause": [rng.lognormvariate(math.log(0.0112 / 1.93), pause_sigma) * pause_scale for _ in range(n)]}


def test_a_busy_rungs_tail_regression_is_found_from_documents_and_from_records() -> None:
    # 420 requests a rung: more above A's p95 than a document's 16-value tail keeps (the audit's C1)
    for seed in range(5):
        a = _values(2 * seed, 420)
        for full, b in ((False, _values(2 * seed + 1, 420, ttft_shift=0.060)),   # documents: B's p50 bounds it
                        (True, _values(2 * seed + 1, 420, ttft_scale=1.5))):     # records: counted exactly
            result = compare_runs([_tail_run(a, full=full)], [_tail_run(b, full=full)])
            ttft = next(c for c in result.lanes[0].changes if c.figure == "TTFT p95")
            assert ttft.regression(result.alpha), ttft.how
            assert result.verdict == "FAIL"
            assert " of 420 above A's p95" in ttft.how
            assert not ttft.how.startswith("16 of"), ttft.how


def test_a_significant_move_within_the_practical_floor_passes() -> None:
    # the audit's C3: pause excess p95 11.2 -> 11.8 ms, significant over 2,000 requests, under 10 % and 2 ms
    a = _values(1, 2000, pause_sigma=0.1)
    b = _values(2, 2000, pause_sigma=0.1, pause_scale=11.8 / 11.2)
    result = compare_runs([_tail_run(a, full=True)], [_tail_run(b, full=True)])
    pause = next(c for c in result.lanes[0].changes if c.figure == "pause excess p95")
    assert pause.a is not None and pause.b is not None and 0.4 < pause.b - pause.a < 0.9
    assert pause.significant(result.alpha) and not pause.regression(result.alpha)
    assert result.verdict == "PASS"
    tight = compare_runs([_tail_run(a, full=True)], [_tail_run(b, full=True)],
                         floors={"pause_excess": Floor(0.02, 0.1)})
    assert tight.verdict == "FAIL"  # the floor, configured, decides


def test_a_large_move_the_runs_cannot_show_is_inconclusive() -> None:
    # 30 requests a side: TTFT p95 +40 % is beyond the floor, and no test of 30 can show it
    a = _values(3, 30)
    b = _values(4, 30, ttft_scale=1.4)
    result = compare_runs([_tail_run(a, full=True)], [_tail_run(b, full=True)])
    ttft = next(c for c in result.lanes[0].changes if c.figure == "TTFT p95")
    assert ttft.beyond_floor and not ttft.significant(result.alpha)
    assert result.verdict == "INCONCLUSIVE" and result.headline().startswith("INCONCLUSIVE ")
    power = ttft.power(result.alpha)
    assert power is not None and power < 0.2


def test_answers_are_compared_with_their_intervals_and_repeated_runs_pooled() -> None:
    a = run_document(1, answer=8)
    a["lanes"]["a/dense"]["status"] = "undecided"
    a["lanes"]["a/dense"]["undecided"] = {"smaller": 4, "larger": 8, "gain": 0.1, "interval": [0.02, 0.2]}
    b = run_document(2, answer=4)
    assert compare_documents(a, b).regressions() == []  # 4 lies in A's undecided doubling
    assert compare_documents(run_document(1, answer=8), run_document(2, answer=4)).regressions() == [
        "a/dense: recommended concurrency 8 (ok) -> 4 (ok)"]
    pooled = compare_runs([Run(read_document(run_document(s))) for s in (1, 3)],
                          [Run(read_document(run_document(s, slow=1.3))) for s in (2, 4)])
    assert pooled.runs == (2, 2) and pooled.verdict == "FAIL"
    assert any(line.startswith("a/dense: output tok/s at c=4 ") for line in pooled.regressions())


def _rate(answer: float, bracket: list[float]) -> dict[str, Any]:
    return {"status": "settled", "reason": None, "max_rate_rps": answer, "max_rate_rpm": int(answer * 60),
            "interval": bracket, "goodput_rps": None, "goodput_tok_s": None, "attainment": None,
            "attainment_target": 0.9, "binding_objective": "ttft", "curve": [], "littles_law": None}


@pytest.mark.parametrize(("b_rate", "dropped"), [
    ((6.0, [6.0, 8.0]), True),     # B's bracket wholly below A's
    ((9.0, [9.0, 11.0]), False),   # the brackets overlap: the runs cannot tell
    ((9.5, [9.5, 9.8]), False),    # below A's bracket, by less than the answer floor (10 %)
])
def test_the_rate_answer_is_compared_with_its_bracket(b_rate: tuple[float, list[float]], dropped: bool) -> None:
    a, b = run_document(1), run_document(2)
    a["lanes"]["a/dense"]["rate"] = _rate(10.0, [10.0, 12.0])
    b["lanes"]["a/dense"]["rate"] = _rate(*b_rate)
    lines = compare_documents(a, b).regressions()
    assert any(line.startswith("a/dense: rate answer 10 [10, 12] (settled) -> ") for line in lines) is dropped, lines


def test_a_policy_setting_added_since_a_run_is_no_difference() -> None:
    """A run written before a policy setting existed (its fingerprint's policy values lack it) against one
    written after (the setting there at its default, null): the digests differ, the policy does not, so the
    runs compare. A setting that differs in value is still refused."""
    before = {"min_gain_per_doubling": 0.1, "slo": {"ttft_p95_s": 2.0, "itl_p95_s": 0.2}}
    after = {"min_gain_per_doubling": 0.1, "slo": {"ttft_p95_s": 2.0, "itl_p95_s": 0.2, "tpot_p95_s": None}}
    a, b = run_document(1), run_document(2)
    a["lanes"]["a/dense"]["fingerprint"]["policy"] = _part(before)
    b["lanes"]["a/dense"]["fingerprint"]["policy"] = _part(after)
    assert a["lanes"]["a/dense"]["fingerprint"]["policy"]["digest"] != _part(after)["digest"]
    assert compare_documents(a, b).allowed == ()
    b["lanes"]["a/dense"]["fingerprint"]["policy"] = _part({**after, "slo": {**after["slo"], "tpot_p95_s": 0.1}})
    with pytest.raises(NotComparable, match="differ in policy"):
        compare_documents(a, b)


def test_runs_that_differ_only_in_their_node_prices_compare() -> None:
    """A price turns an answer into a cost and judges nothing: another price is no policy difference."""
    a, b = run_document(1), run_document(2)
    a["policy"] = {**a["policy"], "cost": {"price_per_hour": 2.5}}
    b["policy"] = {**b["policy"], "cost": {"price_per_hour": 9.0, "currency": "EUR"}}
    assert compare_documents(a, b).allowed == ()
    b["policy"] = {**b["policy"], "min_gain_per_doubling": 0.2}
    with pytest.raises(NotComparable, match="differ in policy"):
        compare_documents(a, b)
