"""Every dashboard query returns data from a real session: a short ``satbench run`` with a relay lane, and
one lane name served by two nodes.

The session is the suite's shared one (``testkit.session``: ladder 1/2, 3 s windows); it runs four
simulator lanes: ``dense`` with one slot and ``relay = true`` (its exporter relays and the load generator sends
through the relay; one slot saturates at c=1, so the recommender answers with a saturation figure too),
``moe`` as it is (eight slots: decode stalls at c=2, no relay), both naming no node (node ``local``: their
series carry no ``node`` label), and node ``gpu1``, a router holding a second ``dense`` (its profile's slots)
and a ``moe`` (2 slots): their series carry ``node="gpu1"``. When it has ended, its Prometheus has stopped; a
Prometheus is started on a copy of the run folder's TSDB (``panel_replay``) and every target of every panel
(collapsed rows included), and the step-window annotation, is asked over the session's time range with
Grafana's variables substituted (``$node``/``$lane``/``$instance`` All, ``$run_id`` the run,
``$__rate_interval``, ``$__range``); every target names the ``${datasource}`` variable, which resolves to the
provisioned one. Each target must return at least one series with a finite value; the relay row's only for
the relay lane. The two ``dense`` lanes must draw apart (``local/dense`` and ``gpu1/dense``, never their sum),
and with ``$node`` = ``gpu1`` only that node's lanes are drawn.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from satbench.dashboards.overview import DASHBOARDS, PROVISIONED_DATASOURCE, all_panels
from testkit.session import RELAY_LANE, SECOND_NODE, SharedSession
from tests.grafana.panel_replay import (
    ReplayPrometheus,
    TargetResult,
    Window,
    replay,
    replay_prometheus,
    resolved_datasource,
    variable_values,
)

pytestmark = [
    pytest.mark.skipif(shutil.which("prometheus") is None,
                       reason="Prometheus is not installed (apt-get install prometheus)"),
    pytest.mark.timeout(300),  # the first test to ask for the shared session waits for it
]

PLAIN_LANE = "moe"
NODE = SECOND_NODE  # a second node serving lane dense
LOCAL = "local"  # the node the dashboards name for lanes that name none
RELAY_ROW = "Node vs client (relay mode)"
ANSWER_STATE = "Answer state"  # the recommender's own state: no lane, no node
# (panel, target) gpu1/dense has no series for: with its profile's slots it does not saturate at c=2, and the
# simulator in router mode (a node) models no GPU (no gpu_memory_*, gpu_power_watts or gpu_energy_* series).
ONE_NODE_ONLY = {("Saturation concurrency", "A"), ("Recommended and saturation concurrency", "B"),
                 ("Memory", "A"), ("Memory", "B"), ("GPU power", "A"), ("Energy per output token", "A")}
# The open-loop row draws runs with --arrival only (rate rungs); the shared session walks closed rungs, so its
# panels are replayed against an open-loop session in tests/rates/test_session_rates.py instead.
OPEN_LOOP_ROW = "Open-loop rates"
# Likewise the agents row draws runs with --agents only: replayed in tests/agents/test_agent_walk.py.
AGENTS_ROW = "Concurrent agents"


def _replayed_elsewhere(dashboard: dict[str, Any]) -> set[str]:
    """The panels of the rows the shared session cannot draw (open-loop rates, agents), replayed elsewhere."""
    rows = [p for p in dashboard.get("panels", []) if p.get("type") == "row"
            and p.get("title", "").startswith((OPEN_LOOP_ROW, AGENTS_ROW))]
    return {child["title"] for row in rows for child in row.get("panels", [])}


@dataclass
class Replayed:
    run_dir: Path
    manifest: dict[str, Any]
    window: Window
    results: dict[str, list[TargetResult]]  # dashboard file -> every target's result
    variables: dict[str, dict[str, list[str]]]
    on_node: dict[str, list[TargetResult]]  # the same with $node = gpu1
    node_variables: dict[str, dict[str, list[str]]]  # the variables' values with $node = gpu1
    match_absent: dict[str, int]  # node matcher -> how many loadgen_step_concurrency series it selects
    relay_ok: float
    stdout: str


@pytest.fixture(scope="module")
def relay_session(shared_session: SharedSession, tmp_path_factory: pytest.TempPathFactory) -> Replayed:
    run = shared_session.run
    assert run.returncode == 0, run.stderr[-3000:]
    run_dir, stdout = run.run_dir, run.stdout
    window = Window.of_run(run_dir)
    only = {"node": NODE}
    with replay_prometheus(run_dir, tmp_path_factory.mktemp("replay")) as prom:
        results = {name: replay(build(), prom, window) for name, build in DASHBOARDS.items()}
        variables = {name: variable_values(build(), prom, window) for name, build in DASHBOARDS.items()}
        on_node = {name: replay(build(), prom, window, only) for name, build in DASHBOARDS.items()}
        node_variables = {name: variable_values(build(), prom, window, only) for name, build in DASHBOARDS.items()}
        match_absent = {op: len(prom.query(f'count by (node, lane) (loadgen_step_concurrency{{node{op}}})', window,
                                           instant=False))
                        for op in ('=~".*"', '=~".+"', '=""')}
        relay_ok = _relay_ok(prom, window)
    return Replayed(run_dir, json.loads((run_dir / "manifest.json").read_text()), window, results, variables,
                    on_node, node_variables, match_absent, relay_ok, stdout)


def _relay_ok(prom: ReplayPrometheus, window: Window) -> float:
    query = (f'sum(last_over_time(runtime_relay_requests_total{{node="",lane="{RELAY_LANE}",route!="other",'
             'outcome="ok"}[1h]))')
    series = prom.client.get(f"{prom.url}/api/v1/query", params={"query": query, "time": window.end}).json()
    result = series["data"]["result"]
    return float(result[0]["value"][1]) if result else 0.0


def _table(results: list[TargetResult]) -> str:
    by_panel: dict[str, list[TargetResult]] = {}
    for r in results:
        by_panel.setdefault(r.panel, []).append(r)
    lines = [f"{'data' if all(r.has_data for r in rs) else 'EMPTY':5}  {title}  "
             + " ".join(f"{r.ref}:{len(r.series)}" for r in rs) for title, rs in by_panel.items()]
    return "\n".join(lines)


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_every_panel_target_returns_data(relay_session: Replayed, name: str) -> None:
    results = relay_session.results[name]
    print(f"\n{name}, run {relay_session.window.run_id}:\n{_table(results)}")
    open_loop = _replayed_elsewhere(DASHBOARDS[name]())
    # a saturation figure is there only where the run found one: the one-slot lane saturates at c=1, but a
    # loaded machine can blur its c=2 rung, and then no lane carries one (truth from the run's own document)
    doc = json.loads((relay_session.run_dir / "recommendations.json").read_text())
    saturated = any(lane.get("saturation_concurrency") is not None for lane in doc["lanes"].values())
    excused = {r.panel for r in results if not saturated and "satbench_saturation_concurrency" in r.query}
    empty = [f"{r.panel} [{r.ref}] {r.query}" for r in results
             if not r.has_data and r.panel not in open_loop and r.panel not in excused]
    said = [line for line in relay_session.stdout.splitlines() if "prometheus:" in line]  # the session's doubts
    assert not empty, "targets without data:\n" + "\n".join(empty + said)
    panels = [p for p in all_panels(DASHBOARDS[name]()) if p["type"] != "row"]
    asked = {r.panel for r in results if not r.panel.startswith("annotation ")}
    assert asked == {p["title"] for p in panels}  # every panel was asked
    assert any(r.panel == "annotation Step windows" for r in results)


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_targets_resolve_to_the_provisioned_datasource(name: str) -> None:
    dashboard = DASHBOARDS[name]()
    for panel in all_panels(dashboard):
        for ref in [panel.get("datasource"), *(t["datasource"] for t in panel.get("targets", []))]:
            if ref is not None:
                assert resolved_datasource(dashboard, ref) == {"type": "prometheus",
                                                               "name": PROVISIONED_DATASOURCE["name"]}


def test_relay_row_draws_only_the_relay_lane(relay_session: Replayed) -> None:
    (row,) = [p for p in DASHBOARDS["satbench-overview.json"]()["panels"] if p.get("title") == RELAY_ROW]
    titles = {p["title"] for p in row["panels"]}
    relay = [r for r in relay_session.results["satbench-overview.json"] if r.panel in titles]
    assert relay and all(r.has_data for r in relay)
    lanes = {_lane(s) for r in relay for s in r.series}
    assert lanes == {(LOCAL, RELAY_LANE)}, lanes  # not gpu1's dense: its exporter does not relay
    others = [r for r in relay_session.results["satbench-overview.json"] if r.panel not in titles]
    assert {_lane(s) for r in others for s in r.series} >= {(LOCAL, RELAY_LANE), (LOCAL, PLAIN_LANE),
                                                           (NODE, RELAY_LANE)}


def _lane(series: dict[str, str]) -> tuple[str | None, str | None]:
    return series.get("node"), series.get("lane")


def test_two_nodes_serving_one_lane_draw_apart(relay_session: Replayed) -> None:
    """Every panel about lanes draws local/dense and gpu1/dense as two series (never their sum), names each
    series' node (local for the lanes that name none), and keeps the series of both in one target."""
    results = relay_session.results["satbench-overview.json"]
    lane_results = [r for r in results if r.panel != ANSWER_STATE]
    for r in lane_results:
        assert all(s.get("node") in (LOCAL, NODE) and s.get("lane") for s in r.series), (r.panel, r.series)
        if (r.panel, r.ref) in ONE_NODE_ONLY or r.panel in _relay_titles() | _open_loop_titles():
            continue
        drawn = {_lane(s) for s in r.series}
        assert {(LOCAL, RELAY_LANE), (NODE, RELAY_LANE)} <= drawn, (r.panel, r.ref, sorted(drawn))
    by_title = {(r.panel, r.ref): r for r in results}
    recommended = by_title[("Recommended concurrency", "A")]
    assert sorted(_lane(s) for s in recommended.series) == [(NODE, RELAY_LANE), (NODE, PLAIN_LANE),
                                                            (LOCAL, RELAY_LANE), (LOCAL, PLAIN_LANE)]
    rungs = by_title[("Output throughput per rung", "A")]
    assert {s["node_lane"] for s in rungs.series} == {f"{LOCAL}/{RELAY_LANE}", f"{LOCAL}/{PLAIN_LANE}",
                                                      f"{NODE}/{RELAY_LANE}", f"{NODE}/{PLAIN_LANE}"}
    assert len(rungs.series) == 4 * 2  # a bar per lane of each node and rung (ladder 1/2)


def test_the_node_variable_selects_one_node(relay_session: Replayed) -> None:
    """$node = gpu1: only gpu1's lanes are drawn (a chosen node does not match the series without a node label);
    every panel about lanes still has data, but those figures gpu1/dense does not reach."""
    for r in relay_session.on_node["satbench-overview.json"]:
        if r.panel == ANSWER_STATE:
            continue
        assert {_lane(s) for s in r.series} <= {(NODE, RELAY_LANE), (NODE, PLAIN_LANE)}, (r.panel, r.ref, r.series)
        if (r.panel, r.ref) not in ONE_NODE_ONLY and r.panel not in _relay_titles() | _open_loop_titles():
            assert r.has_data, (r.panel, r.ref, r.query)
    assert relay_session.node_variables["satbench-overview.json"]["lane"] == sorted([RELAY_LANE, PLAIN_LANE])


def _relay_titles() -> set[str]:
    (row,) = [p for p in DASHBOARDS["satbench-overview.json"]()["panels"] if p.get("title") == RELAY_ROW]
    return {p["title"] for p in row["panels"]}


def _open_loop_titles() -> set[str]:
    return _replayed_elsewhere(DASHBOARDS["satbench-overview.json"]())


def test_all_matches_series_without_a_node_label(relay_session: Replayed) -> None:
    """The node variable's All value .* matches an absent node label (the empty string); .+ would drop the
    lanes that name no node, and ="" selects only them."""
    assert relay_session.match_absent == {'=~".*"': 4, '=~".+"': 2, '=""': 2}


def test_variables_list_the_sessions_lanes_nodes_and_run(relay_session: Replayed) -> None:
    m = relay_session.manifest
    assert sorted(m["lanes"]) == sorted([RELAY_LANE, PLAIN_LANE, f"{NODE}/{RELAY_LANE}", f"{NODE}/{PLAIN_LANE}"])
    exporters = sorted({lane["exporter_url"].removeprefix("http://") for lane in m["lanes"].values()})
    assert len(exporters) == 3  # one per node: gpu1's two lanes share its exporter
    assert relay_session.variables["satbench-overview.json"] == {
        "node": [NODE], "lane": sorted([RELAY_LANE, PLAIN_LANE]), "instance": exporters, "run_id": [m["run_id"]]}
    gpu1_exporter = m["lanes"][f"{NODE}/{RELAY_LANE}"]["exporter_url"].removeprefix("http://")
    assert relay_session.node_variables["satbench-overview.json"]["instance"] == [gpu1_exporter]


def test_the_relay_lane_went_through_the_relay_and_the_manifest_says_so(relay_session: Replayed) -> None:
    lanes, clients = relay_session.manifest["lanes"], relay_session.manifest["clients"]
    relay_url = lanes[RELAY_LANE]["relay_url"]
    assert relay_url and relay_url not in (lanes[RELAY_LANE]["url"], lanes[RELAY_LANE]["exporter_url"])
    assert clients[RELAY_LANE]["url"] == relay_url  # the load generator's own record: where it sent
    assert lanes[RELAY_LANE]["url"].startswith("http://127.0.0.1:")  # the runtime's own address
    assert lanes[PLAIN_LANE]["relay_url"] is None and clients[PLAIN_LANE]["url"] == lanes[PLAIN_LANE]["url"]
    records = [json.loads(line) for line in (relay_session.run_dir / "records.jsonl").read_text().splitlines()]
    ok = [r for r in records if r["lane"] == RELAY_LANE and r["outcome"] == "ok"]
    assert ok and relay_session.relay_ok >= len(ok)  # every answer the client got came through the relay
    assert relay_session.manifest["config"]["lanes"][0]["relay"] is True
