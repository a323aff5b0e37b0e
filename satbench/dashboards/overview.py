"""Grafana dashboards as code: one small factory per panel on shared defaults, written as sorted JSON.

This module lays the dashboard out (sections, rows, the template variables, the import envelope) from the
panels of ``satbench.dashboards.answer_panels`` and ``satbench.dashboards.panels``, built on the shapes and
queries of ``satbench.dashboards.shapes``.

``python -m satbench.generate`` writes ``grafana/dashboards/*.json`` from ``DASHBOARDS``; a test fails when
the committed JSON differs from what this module builds, so the JSON is never edited by hand. Queries read the
recording rules of ``prometheus/rules/satbench.rules.yml`` where one exists (a test checks every rule name
used here is defined there) and the raw metric names of DESIGN.md otherwise. Selectors, rates and
aggregations are built by ``core.promql`` (``LANE`` is its Grafana matcher ``lane=~"$lane"``, ``NODE``
``node=~"$node"``); the few compositions it has no builder for (``last_over_time`` over the dashboard's range,
``count_values``, ``and on``, ``label_replace``) are composed in ``satbench.dashboards.shapes`` from its
selectors and validated names, never from pasted label values.

A lane is identified by (node, lane) (``core.lanes``): every per-lane query aggregates and joins by both, so
two nodes serving one lane name draw apart. Variables: ``datasource`` (any Prometheus; every panel and target
reads ``${datasource}``), ``node`` (the ``node`` label of the lanes' series; All is ``.*``, which also matches
the series of lanes that name no node, node ``local``, which carry no ``node`` label), ``lane`` (the lanes of
the selected nodes), ``instance`` (the exporters' Prometheus scrape targets, host:port, of the selected
lanes: filters the panels that read the exporters' own series) and ``run_id`` (the run whose per-rung figures
are shown, newest first). ``__inputs`` declares ``DS_PROMETHEUS`` for Grafana's import, which writes the
chosen datasource into the variable; under provisioning the variable resolves by name to the provisioned
datasource (``PROVISIONED_DATASOURCE``).

Sections, top to bottom: the recommender's answer (stat panels), the figures at the recommended rung (stat
panels coloured against the policy), the run's figures per rung (bar charts, concurrency on the x axis), the
live series (time series), and a collapsed row for the exporter's relay mode, whose panels only draw lanes
that have relay data. Objectives (thresholds) come from ``answer.policy.Policy``'s defaults
(``objectives``), never typed in: a policy change regenerates the lines.

Step windows appear as annotations: regions where ``loadgen_step_concurrency`` is above zero, per node and
lane.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from satbench.core import promql
from satbench.dashboards.answer_panels import (
    agents_per_kw_panel,
    agents_stat_panel,
    attainment_rate_panel,
    goodput_rate_panel,
    itl_at_n_panel,
    itl_rung_panel,
    jain_at_n_panel,
    max_rate_stat_panel,
    pause_at_n_panel,
    pause_rung_panel,
    recommended_stat_panel,
    requests_at_n_panel,
    runtime_up_panel,
    saturation_stat_panel,
    stale_stat_panel,
    status_stat_panel,
    throughput_at_n_panel,
    throughput_rung_panel,
    ttft_at_n_panel,
    ttft_rate_panel,
    ttft_rung_panel,
    validity_stat_panel,
    verdicts_stat_panel,
)
from satbench.dashboards.panels import (
    decode_stall_panel,
    e2e_panel,
    energy_per_token_panel,
    fairness_panel,
    itl_panel,
    kv_cache_panel,
    memory_panel,
    node_e2e_panel,
    node_itl_panel,
    node_queue_panel,
    node_requests_panel,
    node_ttft_panel,
    occupancy_panel,
    power_panel,
    queue_depth_panel,
    queue_time_panel,
    recommendation_panel,
    requests_panel,
    rung_panel,
    slot_states_panel,
    throughput_panel,
    ttft_panel,
)
from satbench.dashboards.shapes import (
    DATASOURCE,
    GRAFANA_VERSION,
    IMPORT_INPUT,
    LANE,
    LANE_LEGEND,
    LANE_VALUES,
    NODE,
    NODE_VALUES,
    PROVISIONED_DATASOURCE,
    Objective,
    Target,
    grafana_label_values,
    named_node,
    objectives,
)

__all__ = [
    "DASHBOARDS",
    "DATASOURCE",
    "GRAFANA_VERSION",
    "IMPORT_INPUT",
    "PROVISIONED_DATASOURCE",
    "Objective",
    "Target",
    "all_panels",
    "build_overview",
    "dashboard_json",
    "objectives",
    "panel_queries",
    "panel_targets",
    "variable_queries",
]

# --- the dashboard ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Section:
    """A row of the dashboard and the panels under it (``collapsed``: folded, its panels inside the row)."""

    title: str
    panels: tuple[Callable[[], dict[str, Any]], ...]
    collapsed: bool = False


OVERVIEW_SECTIONS = (
    Section("The answer", (recommended_stat_panel, validity_stat_panel, saturation_stat_panel, status_stat_panel,
                           verdicts_stat_panel, stale_stat_panel, runtime_up_panel)),
    Section("At the recommended rung (run $run_id)", (
        throughput_at_n_panel, requests_at_n_panel, ttft_at_n_panel, itl_at_n_panel, pause_at_n_panel,
        jain_at_n_panel)),
    Section("Per rung (run $run_id)", (throughput_rung_panel, ttft_rung_panel, itl_rung_panel, pause_rung_panel)),
    Section("Open-loop rates (run $run_id; satbench run --arrival)", (
        max_rate_stat_panel, attainment_rate_panel, ttft_rate_panel, goodput_rate_panel), collapsed=True),
    Section("Concurrent agents (satbench run --agents)", (agents_stat_panel, agents_per_kw_panel), collapsed=True),
    Section("Live", (
        throughput_panel, requests_panel, ttft_panel, itl_panel, e2e_panel, queue_time_panel, queue_depth_panel,
        occupancy_panel, kv_cache_panel, slot_states_panel, memory_panel, power_panel, energy_per_token_panel,
        fairness_panel, decode_stall_panel, rung_panel, recommendation_panel)),
    Section("Node vs client (relay mode)", (
        node_ttft_panel, node_itl_panel, node_e2e_panel, node_queue_panel, node_requests_panel), collapsed=True),
)
OVERVIEW_PANELS = tuple(factory for section in OVERVIEW_SECTIONS for factory in section.panels)


def _layout(sections: tuple[Section, ...]) -> list[dict[str, Any]]:
    """Rows, each followed by its panels flowing left to right (Grafana's 24 columns); a collapsed row holds
    its panels. Ids run over every row and panel in order."""
    out: list[dict[str, Any]] = []
    next_id = 1
    y = 0
    for section in sections:
        row: dict[str, Any] = {"type": "row", "title": section.title, "id": next_id, "collapsed": section.collapsed,
                               "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "panels": []}
        next_id += 1
        y += 1
        out.append(row)
        x, line_h = 0, 0
        for factory in section.panels:
            panel = factory()
            w, h = panel["gridPos"]["w"], panel["gridPos"]["h"]
            if x + w > 24:
                x, y, line_h = 0, y + line_h, 0
            placed = {**panel, "id": next_id, "gridPos": {"h": h, "w": w, "x": x, "y": y}}
            next_id += 1
            x += w
            line_h = max(line_h, h)
            (row["panels"] if section.collapsed else out).append(placed)
        y += line_h
    return out


def _query_variable(name: str, label: str, query: str, *, multi: bool, sort: int,
                    description: str) -> dict[str, Any]:
    var: dict[str, Any] = {
        "name": name,
        "label": label,
        "description": description,
        "type": "query",
        "datasource": DATASOURCE,
        "query": {"query": query, "refId": name},
        "includeAll": multi,
        "multi": multi,
        "refresh": 2,  # on time range change
        "sort": sort,
        "regex": "",
        "hide": 0,
        "skipUrlSync": False,
    }
    if multi:
        var["allValue"] = ".*"
        var["current"] = {"selected": True, "text": ["All"], "value": ["$__all"]}
    return var


def _templating() -> list[dict[str, Any]]:
    return [
        {
            "name": "datasource",
            "label": "Prometheus",
            "description": "The Prometheus that scrapes the exporters, the load generator and the recommender.",
            "type": "datasource",
            "query": "prometheus",
            "regex": "",
            "includeAll": False,
            "multi": False,
            "refresh": 1,
            "hide": 0,
            "skipUrlSync": False,
            # import writes the chosen datasource's uid into the value; provisioning matches the name
            "current": {"selected": True, "text": PROVISIONED_DATASOURCE["name"], "value": "${" + IMPORT_INPUT + "}"},
        },
        _query_variable("node", "node", NODE_VALUES, multi=True, sort=1,
                        description="Runtime hosts (the node label of the lanes' series). Lanes that name no node "
                                    "(node local) carry no node label: All shows them, a chosen node does not."),
        _query_variable("lane", "lane", LANE_VALUES, multi=True, sort=1,
                        description="Model lanes of the selected nodes (the lane label of the load generator's "
                                    "series; names are unique per node, not across nodes)."),
        _query_variable("instance", "exporter instance",
                        grafana_label_values("runtime_up", "instance", NODE, LANE), multi=True, sort=1,
                        description="The Prometheus instance (host:port) of each selected lane's exporter. "
                                    "Filters the panels that read the exporters' own series."),
        _query_variable("run_id", "run", grafana_label_values("loadgen_step_figure", "run_id", NODE, LANE),
                        multi=False, sort=2, description="The run whose per-rung figures are shown (newest first)."),
    ]


_PANEL_NAMES = {"barchart": "Bar chart", "stat": "Stat", "timeseries": "Time series"}


def _panel_types(panels: list[dict[str, Any]]) -> list[str]:
    return sorted({p["type"] for p in all_panels({"panels": panels}) if p["type"] != "row"})


def build_overview() -> dict[str, Any]:
    panels = _layout(OVERVIEW_SECTIONS)
    return {
        "__inputs": [
            {
                "name": IMPORT_INPUT,
                "label": "Prometheus",
                "description": "The Prometheus that scrapes satbench's exporters, load generator and recommender.",
                "type": "datasource",
                "pluginId": "prometheus",
                "pluginName": "Prometheus",
            }
        ],
        "__requires": [
            {"type": "grafana", "id": "grafana", "name": "Grafana", "version": GRAFANA_VERSION},
            {"type": "datasource", "id": "prometheus", "name": "Prometheus", "version": "1.0.0"},
            *({"type": "panel", "id": kind, "name": _PANEL_NAMES[kind], "version": ""}
              for kind in _panel_types(panels)),
        ],
        "uid": "satbench-overview",
        "title": "satbench: saturation overview",
        "description": "Per node and lane: the answer and whether it still holds, verdicts at the answer, "
                       "figures per rung, live throughput, latency, occupancy and fairness; node-side latencies "
                       "in relay mode.",
        "tags": ["satbench"],
        "editable": True,
        "schemaVersion": 39,
        "version": 1,
        "refresh": "5s",
        "time": {"from": "now-30m", "to": "now"},
        "timezone": "utc",
        "graphTooltip": 1,
        "templating": {"list": _templating()},
        "annotations": {
            "list": [
                {
                    "builtIn": 1,
                    "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                    "enable": True,
                    "hide": True,
                    "iconColor": "rgba(0, 211, 255, 1)",
                    "name": "Annotations & Alerts",
                    "type": "dashboard",
                },
                {
                    "name": "Step windows",
                    "datasource": DATASOURCE,
                    "enable": True,
                    "iconColor": "rgba(255, 152, 48, 0.6)",
                    "expr": named_node(promql.step_windows(NODE, LANE)),
                    "step": "5s",
                    "titleFormat": f"step window {LANE_LEGEND}",
                    "textFormat": "node {{node}}, lane {{lane}}",
                    "useValueForTime": False,
                },
            ]
        },
        "panels": panels,
    }


DASHBOARDS = {"satbench-overview.json": build_overview}


def dashboard_json(dashboard: dict[str, Any]) -> str:
    """The committed form: sorted keys, two-space indent, trailing newline."""
    return json.dumps(dashboard, indent=2, sort_keys=True) + "\n"


def all_panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel and row of ``dashboard``, the panels inside collapsed rows included, in order."""
    for panel in dashboard.get("panels", []):
        yield panel
        yield from panel.get("panels", []) if panel.get("type") == "row" else []


def panel_targets(dashboard: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(panel, target) for every query target of ``dashboard``, collapsed rows included."""
    return [(p, t) for p in all_panels(dashboard) for t in p.get("targets", [])]


def panel_queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, expr) of every target and annotation query of ``dashboard``, collapsed rows included."""
    out = [(p["title"], t["expr"]) for p, t in panel_targets(dashboard)]
    out += [(f"annotation {a['name']}", a["expr"]) for a in dashboard["annotations"]["list"] if "expr" in a]
    return out


def variable_queries(dashboard: dict[str, Any]) -> dict[str, str]:
    """name -> Grafana query of every query variable (``label_values(...)``)."""
    return {v["name"]: v["query"]["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"}
