"""The pieces every satbench dashboard is built from: the datasource and Grafana variables, a panel's
queries (``Target``) and thresholds from the policy (``Objective``, ``objectives``), the queries composed
here (``core.promql`` builds every selector inside them), and the panel shapes: time series, stat panels
and per-rung bar charts, each with its units and overrides. ``satbench.dashboards.panels`` makes the panels
of ``satbench.dashboards.overview`` from them.

A lane is one model deployment on one node (``core.lanes``): lane names are unique per node, not across a
fleet, so every query here keeps ``node`` beside ``lane`` (``BY_LANE``, joins ``on (node, lane, ...)``) and two
nodes serving lane ``dense`` draw two series, never their sum. A lane that names no node is on node ``local``
and its series carry no ``node`` label at all; ``lane_target`` names that node in the result
(``named_node``: ``node="local"``), so a legend ``{{node}}/{{lane}}`` (``LANE_LEGEND``) reads ``local/dense``
beside ``gpu1/dense`` instead of ``/dense``. Filters match the ``node`` variable with ``=~``: its All value
``.*`` also matches a series without the label (an absent label is the empty string), which ``.+`` would not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from satbench.answer.policy import Policy
from satbench.core import promql
from satbench.core.lanes import LOCAL_NODE

__all__ = [
    "BY_LANE",
    "BY_RATE",
    "BY_RUNG",
    "DATASOURCE",
    "GRAFANA_VERSION",
    "IMPORT_INPUT",
    "INSTANCE",
    "LANE",
    "LANE_LEGEND",
    "LANE_NAME",
    "LANE_VALUES",
    "NODE",
    "NODE_VALUES",
    "PROVISIONED_DATASOURCE",
    "RANGE",
    "RELAY_RATE",
    "RUN",
    "VALIDITY_UNKNOWN",
    "Objective",
    "Target",
    "at_recommended",
    "by_lane",
    "error_ratio",
    "grafana_label_values",
    "lane_target",
    "named_node",
    "objectives",
    "only_relay_lanes",
    "quantile_targets",
    "rate_figure",
    "rung_chart",
    "stat_panel",
    "state_mappings",
    "step_figure",
    "timeseries_panel",
    "validity",
]

GRAFANA_VERSION = "11.2.0"  # the image of docker-compose.yml; the schema the tests validate against
IMPORT_INPUT = "DS_PROMETHEUS"
DATASOURCE: dict[str, str] = {"type": "prometheus", "uid": "${datasource}"}
# grafana/provisioning/datasources/prometheus.yml: the datasource variable resolves to it by name.
PROVISIONED_DATASOURCE: dict[str, str] = {"name": "Prometheus", "uid": "satbench-prometheus"}

LANE = promql.grafana_matcher("lane")
NODE = promql.grafana_matcher("node")  # All (.*) keeps the lanes that name no node (no node label)
INSTANCE = promql.grafana_matcher("instance")  # the exporter's scrape target (host:port), for its own series
RUN = promql.grafana_matcher("run_id", op="=")  # a single value: an exact match
RANGE = promql.GrafanaVar("__range")
BY_LANE = ("node", "lane")  # a lane's identity: lane names are unique per node only
BY_RUNG = (*BY_LANE, "concurrency")
BY_RATE = (*BY_LANE, "rate_rps")
LANE_LEGEND = "{{node}}/{{lane}}"  # with named_node: local/dense, gpu1/dense
LANE_NAME = "node_lane"  # the one label naming a lane (node/lane) where a panel groups by a single field
RELAY_RATE = "lane:runtime_relay_requests:rate10s"


def by_lane(*more: str) -> tuple[str, ...]:
    """``BY_LANE`` and the labels ``more``: what a per-lane aggregation keeps (``("node", "lane", "state")``)."""
    return (*BY_LANE, *more)


@dataclass(frozen=True, slots=True)
class Target:
    """One query of a panel. ``unit`` (with ``axis``) overrides the panel's unit for this query's series;
    ``instant`` queries are evaluated once at the end of the range (``format`` ``table`` for bar charts)."""

    expr: str
    legend: str
    unit: str | None = None
    axis: str = "auto"
    instant: bool = False
    format: str | None = None
    max_value: float | None = None
    objective: Objective | None = None


@dataclass(frozen=True, slots=True)
class Objective:
    """A policy threshold drawn on a panel: ``limit`` from ``source`` (a dotted Policy field)."""

    source: str
    limit: float
    above_is_bad: bool = True

    def thresholds(self) -> dict[str, Any]:
        ok, bad = "green", "red"
        low, high = (ok, bad) if self.above_is_bad else (bad, ok)
        return {"mode": "absolute", "steps": [{"color": low, "value": None}, {"color": high, "value": self.limit}]}


def objectives(policy: Policy | None = None) -> dict[str, Objective]:
    """The policy's thresholds that dashboards draw, by name; those the policy leaves unset (None) are absent.

    ``ttft``, ``itl``, ``e2e``: the latency objectives on p95 (``slo.*_p95_s``); ``pause``: the
    time-between-tokens objective on each request's longest pause, p99 over requests (``slo.tbt_p99_s``);
    ``jain``: the least Jain's index (``jain_min``, below is bad); ``errors``: ``max_error_ratio``;
    ``attainment``: the least share of requests meeting every objective at a rate (``attainment_target``).
    """
    policy = policy or Policy()
    candidates = {
        "ttft": ("slo.ttft_p95_s", policy.slo.ttft_p95_s, True),
        "itl": ("slo.itl_p95_s", policy.slo.itl_p95_s, True),
        "e2e": ("slo.e2e_p95_s", policy.slo.e2e_p95_s, True),
        "pause": ("slo.tbt_p99_s", policy.slo.tbt_p99_s, True),
        "jain": ("jain_min", policy.jain_min, False),
        "errors": ("max_error_ratio", policy.max_error_ratio, True),
        "attainment": ("attainment_target", policy.attainment_target, False),
    }
    return {name: Objective(src, float(v), bad) for name, (src, v, bad) in candidates.items() if v is not None}


# --- queries this module composes (core.promql builds every selector inside them) ---------------------------


def grafana_label_values(metric: str, label: str, *matchers: promql.Matcher) -> str:
    """Grafana's ``label_values(metric{matchers}, label)`` (names validated by ``core.promql``)."""
    plain = promql.label_values(metric, label)
    return plain if not matchers else f"label_values({promql.selector(metric, *matchers)}, {label})"


NODE_VALUES = promql.label_values("loadgen_step_concurrency", "node")
"""The ``node`` variable: every node a lane of the load generator names (node-less lanes add none)."""
LANE_VALUES = grafana_label_values("loadgen_step_concurrency", "lane", NODE)
"""The ``lane`` variable: the lanes of the selected nodes (All: of every node, node-less lanes included)."""

_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def _label(name: str) -> str:
    if not _LABEL_NAME.match(name):
        raise ValueError(f"not a Prometheus label name: {name!r}")
    return name


def _on(labels: tuple[str, ...]) -> str:
    """The ``on (label, ...)`` of a vector match, names validated."""
    return f"on ({', '.join(_label(name) for name in labels)})"


def named_node(expr: str) -> str:
    """``expr`` with ``node="local"`` (``core.lanes.LOCAL_NODE``) on the series of lanes that name no node.

    ``label_replace`` with the regex ``""`` (anchored: only an empty or absent ``node``) and a literal
    replacement, so the series of a named node keep theirs. Only for a panel's result: every join inside
    ``expr`` still sees the labels as stored."""
    local = promql.escape_label_value(LOCAL_NODE)
    return f'label_replace({expr}, "node", "{local}", "node", "")'


def _lane_name(expr: str) -> str:
    """``named_node(expr)`` with ``LANE_NAME`` = ``node/lane`` joined (``label_join``), for a single field."""
    return f'label_join({named_node(expr)}, "{_label(LANE_NAME)}", "/", "node", "lane")'


def _last_in_range(metric: str, *matchers: promql.Matcher, **labels: str) -> str:
    """The last value of each series of ``metric`` within the dashboard's time range (``$__range``)."""
    return f"last_over_time({promql.selector(metric, *matchers, **labels)}[{RANGE}])"


def step_figure(figure: str) -> str:
    """One published step figure (``loadgen_step_figure``, names as ``core.figures.client_values``) of the
    selected run, per node, lane and closed-loop rung (no ``rate_rps``): its last value in the range (the load
    generator keeps it until it exits)."""
    return promql.aggregate("max", BY_RUNG, _last_in_range("loadgen_step_figure", NODE, LANE, RUN, figure=figure,
                                                           rate_rps=""))


def rate_figure(figure: str) -> str:
    """``step_figure`` of the selected run's open-loop rungs, per node, lane and rate (``rate_rps``)."""
    return promql.aggregate("max", BY_RATE, _last_in_range("loadgen_step_figure", NODE, LANE, RUN,
                                                           promql.Matcher("rate_rps", "!=", ""), figure=figure))


def at_recommended(figure: str) -> str:
    """``step_figure(figure)`` at each lane's recommended rung only: ``count_values`` turns the recommender's
    last answer into a ``concurrency`` label, which ``and on (node, lane, concurrency)`` matches against the
    rungs, so each node's lane is matched with its own answer."""
    answer = _last_in_range("satbench_recommended_concurrency", NODE, LANE)
    by = ", ".join(_label(name) for name in BY_LANE)
    return f'{step_figure(figure)} and {_on(BY_RUNG)} count_values by ({by}) ("concurrency", {answer})'


VALIDITY_UNKNOWN = -1.0
"""``validity``'s value for a lane nobody could check (no ``satbench_recommendation_valid`` sample)."""


def validity() -> str:
    """Per node and lane, whether the answer holds for the live runtime: ``satbench_recommendation_valid``
    (1 valid, 0 measured on something else), and ``VALIDITY_UNKNOWN`` for the lanes of the document it has no
    sample for, from the one-hot ``satbench_recommendation_validity{state="unknown"}`` (``or on (node, lane)``
    adds only lanes the first part lacks), so "not checked" shows instead of nothing."""
    valid = promql.max_by("satbench_recommendation_valid", BY_LANE, NODE, LANE)
    unknown = promql.max_by("satbench_recommendation_validity", BY_LANE, NODE, LANE, state="unknown")
    return f"{valid} or {_on(BY_LANE)} ({VALIDITY_UNKNOWN!r} * ({unknown} == 1))"


def error_ratio(metric: str, *matchers: promql.Matcher) -> str:
    """Failed / all requests per lane from counter ``metric`` (``outcome`` other than ok), 0 when none failed.

    The recording rules' ratios (``lane:*_request_errors:ratio_rate10s``) have no series until a first error
    exists, so a clean run would draw nothing; here the missing numerator is filled with zeros."""
    errors = promql.sum_rate_by(metric, BY_LANE, *matchers, promql.Matcher("outcome", "!=", "ok"))
    total = promql.sum_rate_by(metric, BY_LANE, *matchers)
    return f"({errors} or (0 * {total})) / {total}"


def only_relay_lanes(expr: str) -> str:
    """``expr`` kept only for lanes (per node) whose exporter relays (their relay request rate exists)."""
    return f"{expr} and {_on(BY_LANE)} {promql.selector(RELAY_RATE, NODE, LANE)}"


def lane_target(expr: str, legend: str = "", *, separator: str = " ", **options: Any) -> Target:
    """A per-lane query: ``named_node(expr)``, its legend ``LANE_LEGEND``, then ``separator`` and ``legend``
    where there is one (``"{{node}}/{{lane}} p{{quantile}}"``); ``options`` are ``Target``'s."""
    return Target(named_node(expr), f"{LANE_LEGEND}{separator}{legend}" if legend else LANE_LEGEND, **options)


def quantile_targets(metric: str) -> list[Target]:
    """The recording rule ``lane_quantile:<metric>:histogram_quantile10s`` (one series per quantile)."""
    return [lane_target(promql.selector(promql.quantile_rule(metric), NODE, LANE), "p{{quantile}}")]


# --- panel shapes ---------------------------------------------------------------------------------------------


def _target_json(i: int, t: Target) -> dict[str, Any]:
    out: dict[str, Any] = {
        "datasource": DATASOURCE,
        "expr": t.expr,
        "legendFormat": t.legend,
        "refId": chr(ord("A") + i),
        "range": not t.instant,
        "instant": t.instant,
        "editorMode": "code",
    }
    if t.format is not None:
        out["format"] = t.format
    return out


def _overrides(targets: list[Target]) -> list[dict[str, Any]]:
    out = []
    for i, t in enumerate(targets):
        props: list[dict[str, Any]] = []
        if t.unit is not None:
            props.append({"id": "unit", "value": t.unit})
        if t.axis != "auto":
            props.append({"id": "custom.axisPlacement", "value": t.axis})
        if t.max_value is not None:
            props.append({"id": "max", "value": t.max_value})
        if t.objective is not None:
            props.append({"id": "thresholds", "value": t.objective.thresholds()})
            props.append({"id": "custom.thresholdsStyle", "value": {"mode": "dashed"}})
        elif t.unit is not None and t.axis != "auto":  # another unit on another axis: the panel's line is not its
            props.append({"id": "custom.thresholdsStyle", "value": {"mode": "off"}})
        if props:
            out.append({"matcher": {"id": "byFrameRefID", "options": chr(ord("A") + i)}, "properties": props})
    return out


def _panel(kind: str, title: str, targets: list[Target], description: str, defaults: dict[str, Any],
           options: dict[str, Any], size: tuple[int, int], **extra: Any) -> dict[str, Any]:
    return {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "fieldConfig": {"defaults": defaults, "overrides": _overrides(targets)},
        "options": options,
        "targets": [_target_json(i, t) for i, t in enumerate(targets)],
        "gridPos": {"h": size[1], "w": size[0], "x": 0, "y": 0},
        **extra,
    }


_LEGEND = {"displayMode": "list", "placement": "bottom", "showLegend": True, "calcs": []}


def timeseries_panel(
    title: str,
    targets: list[Target],
    unit: str,
    description: str,
    *,
    stack: bool = False,
    min_value: float | None = 0.0,
    max_value: float | None = None,
    objective: Objective | None = None,
) -> dict[str, Any]:
    custom: dict[str, Any] = {
        "lineWidth": 1,
        "fillOpacity": 10 if stack else 0,
        "showPoints": "never",
        "stacking": {"mode": "normal" if stack else "none", "group": "A"},
        "axisPlacement": "auto",
    }
    defaults: dict[str, Any] = {"unit": unit, "custom": custom}
    if min_value is not None:
        defaults["min"] = min_value
    if max_value is not None:
        defaults["max"] = max_value
    if objective is not None:
        defaults["thresholds"] = objective.thresholds()
        custom["thresholdsStyle"] = {"mode": "dashed"}
    options = {"legend": _LEGEND, "tooltip": {"mode": "multi", "sort": "none"}}
    return _panel("timeseries", title, targets, description, defaults, options, (12, 8))


_NEUTRAL = {"mode": "absolute", "steps": [{"color": "blue", "value": None}]}


def stat_panel(
    title: str,
    targets: list[Target],
    unit: str,
    description: str,
    *,
    objective: Objective | None = None,
    mappings: list[dict[str, Any]] | None = None,
    decimals: int | None = None,
    width: int = 6,
    text_mode: str = "value_and_name",
) -> dict[str, Any]:
    defaults: dict[str, Any] = {
        "unit": unit,
        "thresholds": objective.thresholds() if objective is not None else _NEUTRAL,
        "color": {"mode": "thresholds"},
        "mappings": mappings or [],
    }
    if decimals is not None:
        defaults["decimals"] = decimals
    options = {
        "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
        "colorMode": "value",
        "graphMode": "none",
        "justifyMode": "auto",
        "textMode": text_mode,
        "orientation": "auto",
        "wideLayout": True,
        "showPercentChange": False,
        "percentChangeColorMode": "standard",
    }
    return _panel("stat", title, targets, description, defaults, options, (width, 4))


def state_mappings(*states: tuple[str, str, str]) -> list[dict[str, Any]]:
    """A value mapping: (value, text, colour) per state."""
    return [{"type": "value", "options": {
        value: {"text": text, "color": color, "index": i} for i, (value, text, color) in enumerate(states)}}]


def rung_chart(title: str, figure: str, unit: str, description: str,
                objective: Objective | None = None, x: str = "concurrency") -> dict[str, Any]:
    """A bar chart of one step figure per rung of the selected run: concurrency on the x axis (``x="rate_rps"``:
    the open-loop rungs by rate), a bar per lane.

    The instant table query gives one row per (node, lane, concurrency), each with its ``LANE_NAME`` label
    ``node/lane``; the transformations sort the rungs as numbers and turn the rows into one column per lane of
    each node (``groupingToMatrix`` by ``LANE_NAME``), the x field ``concurrency``.
    """
    query = step_figure(figure) if x == "concurrency" else rate_figure(figure)
    target = Target(_lane_name(query), LANE_LEGEND, instant=True, format="table")
    custom: dict[str, Any] = {"lineWidth": 1, "fillOpacity": 80, "axisPlacement": "auto"}
    defaults: dict[str, Any] = {"unit": unit, "min": 0, "custom": custom}
    if objective is not None:
        defaults["thresholds"] = objective.thresholds()
        custom["thresholdsStyle"] = {"mode": "dashed"}
    options = {
        "xField": x,
        "orientation": "vertical",
        "showValue": "auto",
        "stacking": "none",
        "groupWidth": 0.7,
        "barWidth": 0.9,
        "xTickLabelRotation": 0,
        "xTickLabelSpacing": 0,
        "xTickLabelMaxLength": 0,
        "fullHighlight": False,
        "legend": _LEGEND,
        "tooltip": {"mode": "multi", "sort": "none"},
    }
    transformations = [
        {"id": "convertFieldType",
         "options": {"conversions": [{"targetField": x, "destinationType": "number"}], "fields": {}}},
        {"id": "sortBy", "options": {"fields": {}, "sort": [{"field": x, "desc": False}]}},
        {"id": "groupingToMatrix",
         "options": {"columnField": LANE_NAME, "rowField": x, "valueField": "Value",
                     "emptyValue": "null"}},
        {"id": "organize", "options": {"renameByName": {f"{x}\\{LANE_NAME}": x}}},
    ]
    return _panel("barchart", title, [target], description, defaults, options, (12, 8),
                  transformations=transformations)
