"""Dashboards are code: the committed JSON is what the builders write, and every panel is well formed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from satbench import generate
from satbench.dashboards.overview import DASHBOARDS, DATASOURCE, build_overview, dashboard_json, panel_queries

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
    "runtime_slots",
    "runtime_queue_depth",
    "runtime_batch_occupancy_ratio",
    "gpu_memory_used_bytes",
    "runtime_process_resident_memory_bytes",
    "satbench_recommended_concurrency",
)


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


def test_panel_layout_and_ids() -> None:
    panels = build_overview()["panels"]
    ids = [p["id"] for p in panels]
    assert ids == list(range(1, len(panels) + 1))
    positions = {(p["gridPos"]["x"], p["gridPos"]["y"]) for p in panels}
    assert len(positions) == len(panels), "two panels share a grid cell"
    for p in panels:
        assert p["datasource"] == DATASOURCE and p["targets"], p["title"]
        assert len({t["refId"] for t in p["targets"]}) == len(p["targets"])


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_queries_only_use_known_variables(name: str) -> None:
    for title, expr in panel_queries(DASHBOARDS[name]()):
        assert set(re.findall(r"\$\w+", expr)) <= {"$lane", "$__rate_interval"}, title
        assert expr.count("(") == expr.count(")"), title


def test_provisioning_points_at_the_datasource_and_dashboards() -> None:
    ds = yaml.safe_load((ROOT / "grafana/provisioning/datasources/prometheus.yml").read_text())
    assert ds["datasources"][0]["uid"] == DATASOURCE["uid"]
    prov = yaml.safe_load((ROOT / "grafana/provisioning/dashboards/satbench.yml").read_text())
    assert prov["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"


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
