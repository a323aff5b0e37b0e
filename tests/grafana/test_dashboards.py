"""Dashboards are code: the committed JSON is what the builders write, and every panel is well formed."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from satbench import generate
from satbench.answer.policy import SLO, Policy
from satbench.dashboards.overview import (
    DASHBOARDS,
    DATASOURCE,
    IMPORT_INPUT,
    PROVISIONED_DATASOURCE,
    all_panels,
    build_overview,
    dashboard_json,
    objectives,
    panel_queries,
    panel_targets,
    variable_queries,
)

ROOT = Path(__file__).resolve().parents[2]
DESIGN_METRICS = (
    "loadgen_output_tokens_total",
    "loadgen_requests_total",
    "loadgen_ttft_seconds",
    "loadgen_itl_seconds",
    "loadgen_e2e_seconds",
    "loadgen_queue_seconds",
    "loadgen_decode_stall_seconds",
    "loadgen_in_flight",
    "loadgen_step_concurrency",
    "loadgen_step_figure",
    "runtime_up",
    "runtime_slots",
    "runtime_queue_depth",
    "runtime_batch_occupancy_ratio",
    "gpu_memory_used_bytes",
    "runtime_process_resident_memory_bytes",
    "runtime_relay_requests_total",
    "satbench_recommended_concurrency",
    "satbench_saturation_concurrency",
    "satbench_recommendations_stale",
    "satbench_recommendation_valid",
    "satbench_recommendation_validity",
)
VARIABLES = {"$lane", "$node", "$instance", "$run_id", "$__rate_interval", "$__range"}
UNITS = {"percentunit", "reqps", "s", "bytes", "short", "cps", "suffix:tok/s", "watt", "suffix:J/token"}
RELAY_ROW = "Node vs client (relay mode)"


def _panels(dashboard: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    return [p for p in all_panels(dashboard or build_overview()) if p["type"] != "row"]


def _panel(title: str) -> dict[str, Any]:
    (panel,) = [p for p in _panels() if p["title"] == title]
    return panel


def _steps(panel: dict[str, Any]) -> list[float]:
    steps = panel["fieldConfig"]["defaults"].get("thresholds", {}).get("steps", [])
    return [s["value"] for s in steps if s["value"] is not None]


def test_committed_dashboards_do_not_drift() -> None:
    stale = [p for p in generate.drift(ROOT) if p.startswith("grafana/")]
    assert not stale, f"regenerate with `python -m satbench.generate`: {stale}"


def test_generate_check_and_write(tmp_path: Path) -> None:
    assert generate.write_all(tmp_path) == sorted(generate.artefacts())
    assert generate.drift(tmp_path) == []
    target = tmp_path / "grafana/dashboards/satbench-overview.json"
    target.write_text("{}\n")
    assert generate.drift(tmp_path) == ["grafana/dashboards/satbench-overview.json"]


def test_json_is_sorted_and_stable() -> None:
    text = dashboard_json(build_overview())
    assert text == dashboard_json(json.loads(text))
    assert text.endswith("}\n") and "\n  " in text


def test_panels_cover_the_design_metrics() -> None:
    exprs = " ".join(expr for _, expr in panel_queries(build_overview()))
    missing = [m for m in DESIGN_METRICS if m.removesuffix("_total") not in exprs]  # rules drop _total
    assert not missing


def _overlaps(panels: list[dict[str, Any]]) -> list[tuple[str, str]]:
    def cells(p: dict[str, Any]) -> set[tuple[int, int]]:
        g = p["gridPos"]
        return {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}

    out = []
    for i, a in enumerate(panels):
        for b in panels[i + 1:]:
            if cells(a) & cells(b):
                out.append((a["title"], b["title"]))
    return out


def test_panel_layout_and_ids() -> None:
    dashboard = build_overview()
    everything = list(all_panels(dashboard))
    assert [p["id"] for p in everything] == list(range(1, len(everything) + 1))
    top = dashboard["panels"]
    assert not _overlaps(top), "two panels share grid cells"
    for row in (p for p in top if p["type"] == "row" and p["collapsed"]):
        assert row["panels"] and not _overlaps(row["panels"])
    for p in top:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24, p["title"]


def test_every_panel_and_target_reads_the_datasource_variable() -> None:
    dashboard = build_overview()
    assert DATASOURCE == {"type": "prometheus", "uid": "${datasource}"}
    for p in _panels(dashboard):
        assert p["datasource"] == DATASOURCE and p["targets"], p["title"]
        assert len({t["refId"] for t in p["targets"]}) == len(p["targets"])
    assert all(t["datasource"] == DATASOURCE for _, t in panel_targets(dashboard))
    assert all(v["datasource"] == DATASOURCE for v in dashboard["templating"]["list"] if v["type"] == "query")
    step_windows = [a for a in dashboard["annotations"]["list"] if "expr" in a]
    assert step_windows and all(a["datasource"] == DATASOURCE for a in step_windows)
    # nothing else names a datasource: no hard-coded uid anywhere
    text = dashboard_json(dashboard)
    assert PROVISIONED_DATASOURCE["uid"] not in text


def test_template_variables() -> None:
    variables = {v["name"]: v for v in build_overview()["templating"]["list"]}
    assert list(variables) == ["datasource", "node", "lane", "instance", "run_id"]
    ds = variables["datasource"]
    assert ds["type"] == "datasource" and ds["query"] == "prometheus"
    queries = variable_queries(build_overview())
    assert queries == {
        "node": "label_values(loadgen_step_concurrency, node)",
        "lane": 'label_values(loadgen_step_concurrency{node=~"$node"}, lane)',
        "instance": 'label_values(runtime_up{node=~"$node",lane=~"$lane"}, instance)',
        "run_id": 'label_values(loadgen_step_figure{node=~"$node",lane=~"$lane"}, run_id)',
    }
    # All is .*, never .+: a lane that names no node has no node label, and only .* matches an absent label
    for name in ("node", "lane", "instance"):
        assert variables[name]["multi"] and variables[name]["includeAll"] and variables[name]["allValue"] == ".*"
    assert variables["instance"]["label"] == "exporter instance"
    assert not variables["run_id"]["multi"] and variables["run_id"]["sort"] == 2  # newest run first


_AGGREGATION = re.compile(r"\b(?:sum|max|min|avg|count|count_values) by \(([^)]*)\)")
_JOIN = re.compile(r"\b(?:and|or|unless|[*/+-]) on \(([^)]*)\)")


def _lane_queries() -> list[tuple[str, str, str]]:
    """(panel, legend, expr) of every target that is about lanes (all but the recommender's own state)."""
    return [(p["title"], t["legendFormat"], t["expr"]) for p, t in panel_targets(build_overview())
            if "lane" in t["expr"]]


def test_every_lane_query_keeps_the_node_beside_the_lane() -> None:
    """Two nodes serving one lane name are two series: every aggregation, join and count_values over lanes
    keeps node and lane, every lane selector is filtered by both variables, every legend names both."""
    queries = _lane_queries()
    assert len(queries) > 40
    for title, legend, expr in queries:
        groups = _AGGREGATION.findall(expr) + _JOIN.findall(expr)
        lane_groups = [g for g in groups if g not in ("le", "user")]
        assert lane_groups or "lane:" in expr or "lane_quantile:" in expr, (title, expr)
        for group in lane_groups:
            labels = [x.strip() for x in group.split(",")]
            assert labels[:2] == ["node", "lane"], (title, expr)
        assert expr.count('node=~"$node"') == expr.count('lane=~"$lane"') >= 1, (title, expr)
        assert legend.startswith("{{node}}/{{lane}}"), (title, legend)
        # the result names node-less lanes' node: local/dense beside gpu1/dense, not /dense
        assert expr.startswith(("label_replace(", "label_join(label_replace(")), title
        assert ', "node", "local", "node", "")' in expr, title
    annotation = {a["name"]: a for a in build_overview()["annotations"]["list"]}["Step windows"]
    assert "max by (node, lane)" in annotation["expr"] and 'node=~"$node"' in annotation["expr"]
    assert annotation["titleFormat"] == "step window {{node}}/{{lane}}"


def test_exporter_series_are_filtered_by_the_instance_variable() -> None:
    exporter = ("runtime_up", "runtime_output_tokens_total", "runtime_queue_depth", "runtime_slots{",
                "gpu_memory_used_bytes", "runtime_relay_requests_total", "runtime_kv_cache_usage_ratio")
    for title, _, expr in _lane_queries():
        for metric in exporter:
            if metric in expr:
                assert 'instance=~"$instance"' in expr, (title, metric)
    # recording rules and the load generator's and recommender's series have no exporter instance
    assert not [t for t, _, e in _lane_queries() if "loadgen_" in e and "runtime_" not in e and "$instance" in e]


def test_import_inputs_and_provisioning_resolve_the_datasource() -> None:
    dashboard = build_overview()
    (inp,) = dashboard["__inputs"]
    assert inp["name"] == IMPORT_INPUT and inp["type"] == "datasource" and inp["pluginId"] == "prometheus"
    ds = dashboard["templating"]["list"][0]
    # import replaces ${DS_PROMETHEUS} with the chosen datasource's uid; provisioning matches by name
    assert ds["current"]["value"] == "${" + IMPORT_INPUT + "}"
    prov = yaml.safe_load((ROOT / "grafana/provisioning/datasources/prometheus.yml").read_text())
    (source,) = prov["datasources"]
    assert source["type"] == "prometheus" and source["isDefault"] is True
    assert {"name": source["name"], "uid": source["uid"]} == PROVISIONED_DATASOURCE
    assert ds["current"]["text"] == source["name"]
    dashboards = yaml.safe_load((ROOT / "grafana/provisioning/dashboards/satbench.yml").read_text())
    assert dashboards["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_queries_only_use_known_variables(name: str) -> None:
    for title, expr in panel_queries(DASHBOARDS[name]()):
        assert set(re.findall(r"\$\w+", expr)) <= VARIABLES, title
        assert expr.count("(") == expr.count(")"), title


def test_units() -> None:
    for p in _panels():
        defaults = p["fieldConfig"]["defaults"]
        units = [defaults["unit"]] + [
            prop["value"] for o in p["fieldConfig"]["overrides"] for prop in o["properties"] if prop["id"] == "unit"]
        assert set(units) <= UNITS, (p["title"], units)
    for title in ("Time to first token", "Inter-token latency", "End-to-end latency", "Queue time",
                  "TTFT p95 per rung", "ITL p95 per rung", "Longest pause p99 per rung", "TTFT p95 at the answer"):
        assert _panel(title)["fieldConfig"]["defaults"]["unit"] == "s", title
    assert _panel("Batch occupancy")["fieldConfig"]["defaults"]["unit"] == "percentunit"
    assert _panel("Memory")["fieldConfig"]["defaults"]["unit"] == "bytes"
    # a second quantity on a panel gets its own unit and axis: the error ratios, the stall rate
    for title, ref, unit in (("Requests/s by outcome", "B", "percentunit"), ("Decode stalls", "B", "cps"),
                             ("Requests/s at the node vs the client", "B", "percentunit")):
        (override,) = [o for o in _panel(title)["fieldConfig"]["overrides"] if o["matcher"]["options"] == ref]
        props = {prop["id"]: prop["value"] for prop in override["properties"]}
        assert props["unit"] == unit and props["custom.axisPlacement"] == "right", title


def test_thresholds_come_from_the_policy() -> None:
    policy = Policy()
    found = objectives()
    assert found["ttft"].limit == policy.slo.ttft_p95_s and found["itl"].limit == policy.slo.itl_p95_s
    assert found["pause"].limit == policy.slo.tbt_p99_s and found["errors"].limit == policy.max_error_ratio
    assert ("jain" in found) == (policy.jain_min is not None) and ("e2e" in found) == (policy.slo.e2e_p95_s is not None)
    assert objectives(Policy(jain_min=0.8))["jain"].thresholds()["steps"] == [
        {"color": "red", "value": None}, {"color": "green", "value": 0.8}]
    assert "ttft" not in objectives(Policy(slo=SLO(ttft_p95_s=None)))
    drawn = {
        "Time to first token": policy.slo.ttft_p95_s, "TTFT p95 per rung": policy.slo.ttft_p95_s,
        "TTFT p95 at the answer": policy.slo.ttft_p95_s, "TTFT at the node vs the client": policy.slo.ttft_p95_s,
        "Inter-token latency": policy.slo.itl_p95_s, "ITL p95 per rung": policy.slo.itl_p95_s,
        "ITL p95 at the answer": policy.slo.itl_p95_s, "Decode stalls": policy.slo.tbt_p99_s,
        "Longest pause p99 per rung": policy.slo.tbt_p99_s, "Longest pause p99 at the answer": policy.slo.tbt_p99_s,
    }
    for title, limit in drawn.items():
        panel = _panel(title)
        assert _steps(panel) == [limit], title
        if panel["type"] != "stat":
            assert panel["fieldConfig"]["defaults"]["custom"]["thresholdsStyle"] == {"mode": "dashed"}, title
    (errors,) = [o for o in _panel("Requests/s by outcome")["fieldConfig"]["overrides"]]
    assert {"id": "thresholds", "value": found["errors"].thresholds()} in errors["properties"]


def test_stat_panels_for_the_answer_and_its_verdicts() -> None:
    stats = {p["title"]: p for p in _panels() if p["type"] == "stat"}
    assert {"Recommended concurrency", "Answer validity", "Saturation concurrency", "Answer state",
            "Runtime up"} <= set(stats)
    for title in ("TTFT p95 at the answer", "ITL p95 at the answer", "Longest pause p99 at the answer",
                  "Jain's index at the answer", "Output tok/s at the answer"):
        (target,) = stats[title]["targets"]
        assert target["instant"] and "count_values" in target["expr"], title
    mapping = stats["Answer state"]["fieldConfig"]["defaults"]["mappings"][0]["options"]
    assert mapping["1"]["text"] == "stale" and mapping["0"]["text"] == "fresh"


def test_answer_validity_sits_next_to_the_recommended_concurrency() -> None:
    """satbench_recommendation_valid per node and lane (1 valid, 0 changed), and "unknown" (-1) for the
    lanes it has no sample for, so a changed answer reads as such next to the figure it qualifies."""
    row = [p for p in build_overview()["panels"] if p["type"] != "row"]
    titles = [p["title"] for p in row]
    assert titles.index("Answer validity") == titles.index("Recommended concurrency") + 1
    (target,) = _panel("Answer validity")["targets"]
    assert "max by (node, lane) (satbench_recommendation_valid{" in target["expr"]
    assert 'satbench_recommendation_validity{node=~"$node",lane=~"$lane",state="unknown"}' in target["expr"]
    assert " or on (node, lane) (-1.0 * (" in target["expr"]
    assert target["legendFormat"] == "{{node}}/{{lane}}"
    mapping = _panel("Answer validity")["fieldConfig"]["defaults"]["mappings"][0]["options"]
    assert {k: v["text"] for k, v in mapping.items()} == {"1": "valid", "0": "changed", "-1": "unknown"}
    assert mapping["0"]["color"] == "red" and mapping["1"]["color"] == "green"


def test_rung_charts_put_concurrency_on_the_x_axis() -> None:
    """Closed-loop rungs by concurrency (their series carry no rate_rps), open-loop rungs by rate."""
    charts = [p for p in _panels() if p["type"] == "barchart"]
    assert {p["title"] for p in charts} >= {"Output throughput per rung", "TTFT p95 per rung", "ITL p95 per rung",
                                            "Attainment per offered rate"}
    for p in charts:
        x = "rate_rps" if "rate" in p["title"] else "concurrency"
        assert p["options"]["xField"] == x
        (target,) = p["targets"]
        assert target["instant"] and target["format"] == "table" and "loadgen_step_figure" in target["expr"]
        assert ('rate_rps!=""' if x == "rate_rps" else 'rate_rps=""') in target["expr"]
        ids = [t["id"] for t in p["transformations"]]
        assert ids == ["convertFieldType", "sortBy", "groupingToMatrix", "organize"]
        # one bar per lane of each node: the column is node/lane, joined into one label by the query
        assert p["transformations"][2]["options"]["columnField"] == "node_lane"
        assert target["expr"].startswith("label_join(label_replace(")
        assert target["expr"].endswith(', "node_lane", "/", "node", "lane")')
        assert p["transformations"][3]["options"]["renameByName"] == {f"{x}\\node_lane": x}


def test_relay_panels_sit_in_a_collapsed_row_and_draw_only_relay_lanes() -> None:
    (row,) = [p for p in build_overview()["panels"] if p["type"] == "row" and p["title"] == RELAY_ROW]
    assert row["collapsed"] and len(row["panels"]) == 5
    for p in row["panels"]:
        for t in p["targets"]:
            assert "runtime_relay" in t["expr"] or "lane_quantile:runtime_" in t["expr"], (p["title"], t["expr"])
    relay_titles = {p["title"] for p in row["panels"]}
    outside = [p for p in _panels() if p["title"] not in relay_titles]
    assert not [p["title"] for p in outside if any("relay" in t["expr"] for t in p["targets"])]


def test_recording_rules_used_by_panels_exist() -> None:
    rules_dir = ROOT / "prometheus" / "rules"
    if not rules_dir.is_dir():
        pytest.skip("prometheus/rules is not in this checkout")
    defined = {
        rule["record"]
        for path in rules_dir.glob("*.yml")
        for group in (yaml.safe_load(path.read_text()) or {}).get("groups", [])
        for rule in group.get("rules", [])
        if "record" in rule
    }
    used = {
        name
        for _, expr in panel_queries(build_overview())
        for name in re.findall(r"[a-z_]+:[a-z0-9_]+:[a-z0-9_]+", expr)
    }
    assert used and used <= defined, sorted(used - defined)
