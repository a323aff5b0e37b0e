"""The dashboard's own queries, evaluated by Prometheus' engine (``promtool test rules``) on series of a small
fleet: lane ``dense`` served by two nodes (``local``, whose series carry no ``node`` label, and ``gpu1``) and
lane ``moe`` on ``gpu2``, each answer in another validity state (valid, changed, unknown).

The real session of ``test_panel_data`` proves every panel draws; here each expected sample is spelled out,
states the session does not reach included (a changed answer, an unknown one): the two ``dense`` lanes are
two series with their own figures (never their sum), each node's lane is matched with its own answer, the
node variable's All value ``.*`` keeps the node-less lane and a chosen node only that node's.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from satbench.dashboards.overview import build_overview, panel_targets
from testkit.prom import promtool_binary
from tests.grafana.panel_replay import Window, substitute

pytestmark = pytest.mark.skipif(promtool_binary() is None,
                                reason="promtool is not installed (apt-get install prometheus)")

WINDOW = Window(start=0.0, end=600.0, run_id="r1")
RATE = {"__rate_interval": "5m"}  # the series below are sampled once a minute
FOREVER = "x10"  # a value held for ten one-minute samples: the evaluation at 5m sees it

# (node, lane) -> the labels of its series: a node-less lane has no node label, as every part publishes it
LANES = {("local", "dense"): 'lane="dense"', ("gpu1", "dense"): 'node="gpu1",lane="dense"',
         ("gpu2", "moe"): 'node="gpu2",lane="moe"'}
LOCAL, GPU1, GPU2 = LANES.values()
ANSWERS = {LOCAL: 1, GPU1: 2, GPU2: 4}
VALID = {LOCAL: 1, GPU1: 0}  # gpu2's answer could not be checked: no satbench_recommendation_valid sample
STATE = {LOCAL: "valid", GPU1: "changed", GPU2: "unknown"}
THROUGHPUT = {LOCAL: {1: 100, 2: 150}, GPU1: {1: 90, 2: 170}, GPU2: {4: 300}}  # per rung of run r1
REQUESTS_PER_MIN = {LOCAL: 60, GPU1: 120}  # ok requests: 1/s and 2/s


def _series() -> list[dict[str, str]]:
    out = []
    for lane, answer in ANSWERS.items():
        out.append({"series": f"satbench_recommended_concurrency{{{lane}}}", "values": f"{answer}{FOREVER}"})
        for state in ("valid", "changed", "unknown"):
            one = 1 if STATE[lane] == state else 0
            out.append({"series": f'satbench_recommendation_validity{{{lane},state="{state}"}}',
                        "values": f"{one}{FOREVER}"})
        for c, tok_s in THROUGHPUT[lane].items():
            out.append({"series": f'loadgen_step_figure{{{lane},run_id="r1",concurrency="{c}",'
                                  f'figure="throughput_tok_s"}}', "values": f"{tok_s}{FOREVER}"})
    for lane, valid in VALID.items():
        out.append({"series": f"satbench_recommendation_valid{{{lane}}}", "values": f"{valid}{FOREVER}"})
    for lane, per_min in REQUESTS_PER_MIN.items():
        out.append({"series": f'loadgen_requests_total{{{lane},outcome="ok"}}', "values": f"0+{per_min}{FOREVER}"})
    return out


def _expr(title: str, values: dict[str, str] | None = None) -> str:
    (target,) = [t for p, t in panel_targets(build_overview()) if p["title"] == title and t["refId"] == "A"]
    return substitute(target["expr"], WINDOW, {**RATE, **(values or {})})


def _samples(expected: dict[str, float]) -> list[dict[str, Any]]:
    return [{"labels": "{" + labels + "}", "value": value} for labels, value in expected.items()]


def _named(lane: str) -> str:
    """The labels a dashboard result carries: node-less lanes are named node local."""
    ((node, name),) = [key for key, labels in LANES.items() if labels == lane]
    return f'node="{node}",lane="{name}"'


CASES: dict[str, tuple[str, dict[str, str] | None, dict[str, float]]] = {
    # name: (panel title, variables, expected samples)
    "two nodes serving dense answer apart": (
        "Recommended concurrency", None, {_named(lane): a for lane, a in ANSWERS.items()}),
    "validity: valid, changed, unknown": (
        "Answer validity", None, {_named(LOCAL): 1, _named(GPU1): 0, _named(GPU2): -1}),
    "each node's lane at its own answer": (
        "Output tok/s at the answer", None,
        {f'{_named(lane)},concurrency="{ANSWERS[lane]}"': THROUGHPUT[lane][ANSWERS[lane]] for lane in ANSWERS}),
    "rates are per node, never summed": (
        "Requests/s by outcome", None,
        {f'{_named(lane)},outcome="ok"': per_min / 60 for lane, per_min in REQUESTS_PER_MIN.items()}),
    "a chosen node: only its lanes": (
        "Recommended concurrency", {"node": "gpu1"}, {_named(GPU1): 2}),
    "a chosen node: its validity": ("Answer validity", {"node": "gpu1"}, {_named(GPU1): 0}),
    "two chosen nodes (Grafana's multi-value regex)": (
        "Answer validity", {"node": "(gpu1|gpu2)"}, {_named(GPU1): 0, _named(GPU2): -1}),
    "a lane name on every node": (
        "Answer validity", {"lane": "dense"}, {_named(LOCAL): 1, _named(GPU1): 0}),
}


def _rung_samples() -> dict[str, float]:
    """Every rung of every lane, each row naming its lane of its node in one label (node_lane)."""
    return {f'{_named(labels)},concurrency="{c}",node_lane="{node}/{name}"': tok_s
            for (node, name), labels in LANES.items() for c, tok_s in THROUGHPUT[labels].items()}


def _promtool_test(tmp_path: Path, tests: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
    spec = {"rule_files": [], "evaluation_interval": "1m", "tests": [
        {"interval": "1m", "input_series": _series(), "promql_expr_test": tests}]}
    path = tmp_path / "dashboard_test.yml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    binary = promtool_binary()
    assert binary is not None
    return subprocess.run([binary, "test", "rules", path.name], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60, check=False)


@pytest.mark.parametrize("case", sorted(CASES))
def test_panel_query_on_a_fleet(tmp_path: Path, case: str) -> None:
    title, values, expected = CASES[case]
    done = _promtool_test(tmp_path, [{"expr": _expr(title, values), "eval_time": "5m",
                                      "exp_samples": _samples(expected)}])
    assert done.returncode == 0, done.stdout + done.stderr


def test_rung_chart_has_a_column_per_lane_of_each_node(tmp_path: Path) -> None:
    done = _promtool_test(tmp_path, [{"expr": _expr("Output throughput per rung"), "eval_time": "5m",
                                      "exp_samples": _samples(_rung_samples())}])
    assert done.returncode == 0, done.stdout + done.stderr


def test_all_matches_an_absent_node_label_and_dot_plus_does_not(tmp_path: Path) -> None:
    """The reason the node variable's All value is ``.*``: ``node=~".*"`` matches a series without ``node``
    (an absent label reads as the empty string), ``node=~".+"`` does not."""
    tests = [
        {"expr": 'count(satbench_recommended_concurrency{node=~".*"})', "eval_time": "5m",
         "exp_samples": [{"labels": "{}", "value": 3}]},
        {"expr": 'count(satbench_recommended_concurrency{node=~".+"})', "eval_time": "5m",
         "exp_samples": [{"labels": "{}", "value": 2}]},
    ]
    done = _promtool_test(tmp_path, tests)
    assert done.returncode == 0, done.stdout + done.stderr
