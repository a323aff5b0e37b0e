"""Grafana dashboards as code: one small factory per panel on shared defaults, written as sorted JSON.

``python -m satbench.generate`` writes ``grafana/dashboards/*.json`` from ``DASHBOARDS``; a test fails when
the committed JSON differs from what this module builds, so the JSON is never edited by hand. Queries read the
recording rules of ``prometheus/rules/satbench.rules.yml`` where one exists (a test checks every rule name
used here is defined there) and the raw metric names of DESIGN.md otherwise. Selectors, rates and
aggregations are built by ``core.promql`` (``LANE`` is its Grafana matcher ``lane=~"$lane"``); the few
compositions it has no builder for (``last_over_time`` over the dashboard's range, ``count_values``, ``and
on``) are composed here from its selectors and validated names, never from pasted label values.

Variables: ``datasource`` (any Prometheus; every panel and target reads ``${datasource}``), ``lane``,
``node`` (the exporter's Prometheus ``instance``: the session and compose give exporters no ``node`` label)
and ``run_id`` (the run whose per-rung figures are shown, newest first). ``__inputs`` declares
``DS_PROMETHEUS`` for Grafana's import, which writes the chosen datasource into the variable; under
provisioning the variable resolves by name to the provisioned datasource (``PROVISIONED_DATASOURCE``).

Sections, top to bottom: the recommender's answer (stat panels), the figures at the recommended rung (stat
panels coloured against the policy), the run's figures per rung (bar charts, concurrency on the x axis), the
live series (time series), and a collapsed row for the exporter's relay mode, whose panels only draw lanes
that have relay data. Objectives (thresholds) come from ``recommender.policy.Policy``'s defaults
(``objectives``), never typed in: a policy change regenerates the lines.

Step windows appear as annotations: regions where ``loadgen_step_concurrency`` is above zero.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from core import promql
from recommender.policy import Policy

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

GRAFANA_VERSION = "11.2.0"  # the image of docker-compose.yml; the schema the tests validate against
IMPORT_INPUT = "DS_PROMETHEUS"
DATASOURCE: dict[str, str] = {"type": "prometheus", "uid": "${datasource}"}
# grafana/provisioning/datasources/prometheus.yml: the datasource variable resolves to it by name.
PROVISIONED_DATASOURCE: dict[str, str] = {"name": "Prometheus", "uid": "satbench-prometheus"}

LANE = promql.grafana_matcher("lane")
NODE = promql.grafana_matcher("instance", "node")
RUN = promql.grafana_matcher("run_id", op="=")  # a single value: an exact match
RANGE = promql.GrafanaVar("__range")
BY_LANE = ("lane",)
BY_RUNG = ("lane", "concurrency")
LANE_VALUES = promql.label_values("loadgen_step_concurrency", "lane")
RELAY_RATE = "lane:runtime_relay_requests:rate10s"


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
    ``jain``: the least Jain's index (``jain_min``, below is bad); ``errors``: ``max_error_ratio``.
    """
    policy = policy or Policy()
    candidates = {
        "ttft": ("slo.ttft_p95_s", policy.slo.ttft_p95_s, True),
        "itl": ("slo.itl_p95_s", policy.slo.itl_p95_s, True),
        "e2e": ("slo.e2e_p95_s", policy.slo.e2e_p95_s, True),
        "pause": ("slo.tbt_p99_s", policy.slo.tbt_p99_s, True),
        "jain": ("jain_min", policy.jain_min, False),
        "errors": ("max_error_ratio", policy.max_error_ratio, True),
    }
    return {name: Objective(src, float(v), bad) for name, (src, v, bad) in candidates.items() if v is not None}


# --- queries this module composes (core.promql builds every selector inside them) ---------------------------


def _label_values(metric: str, label: str, *matchers: promql.Matcher) -> str:
    """Grafana's ``label_values(metric{matchers}, label)`` (names validated by ``core.promql``)."""
    plain = promql.label_values(metric, label)
    return plain if not matchers else f"label_values({promql.selector(metric, *matchers)}, {label})"


def _last_in_range(metric: str, *matchers: promql.Matcher, **labels: str) -> str:
    """The last value of each series of ``metric`` within the dashboard's time range (``$__range``)."""
    return f"last_over_time({promql.selector(metric, *matchers, **labels)}[{RANGE}])"


def step_figure(figure: str) -> str:
    """One published step figure (``loadgen_step_figure``, names as ``core.figures.client_values``) of the
    selected run, per lane and rung: its last value in the range (the load generator keeps it until it exits)."""
    return promql.aggregate("max", BY_RUNG, _last_in_range("loadgen_step_figure", LANE, RUN, figure=figure))


def at_recommended(figure: str) -> str:
    """``step_figure(figure)`` at each lane's recommended rung only: ``count_values`` turns the recommender's
    last answer into a ``concurrency`` label, which ``and on (lane, concurrency)`` matches against the rungs."""
    answer = _last_in_range("satbench_recommended_concurrency", LANE)
    return f'{step_figure(figure)} and on ({", ".join(BY_RUNG)}) count_values by (lane) ("concurrency", {answer})'


def error_ratio(metric: str, *matchers: promql.Matcher) -> str:
    """Failed / all requests per lane from counter ``metric`` (``outcome`` other than ok), 0 when none failed.

    The recording rules' ratios (``lane:*_request_errors:ratio_rate10s``) have no series until a first error
    exists, so a clean run would draw nothing; here the missing numerator is filled with zeros."""
    errors = promql.sum_rate_by(metric, BY_LANE, *matchers, promql.Matcher("outcome", "!=", "ok"))
    total = promql.sum_rate_by(metric, BY_LANE, *matchers)
    return f"({errors} or (0 * {total})) / {total}"


def only_relay_lanes(expr: str) -> str:
    """``expr`` kept only for lanes whose exporter relays (their relay request rate exists)."""
    return f"{expr} and on (lane) {promql.selector(RELAY_RATE, LANE)}"


def _quantiles(metric: str) -> list[Target]:
    """The recording rule ``lane_quantile:<metric>:histogram_quantile10s`` (one series per quantile)."""
    return [Target(promql.selector(promql.quantile_rule(metric), LANE), "{{lane}} p{{quantile}}")]


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


def _timeseries(
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


def _stat(
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


def _states(*states: tuple[str, str, str]) -> list[dict[str, Any]]:
    """A value mapping: (value, text, colour) per state."""
    return [{"type": "value", "options": {
        value: {"text": text, "color": color, "index": i} for i, (value, text, color) in enumerate(states)}}]


def _rung_chart(title: str, figure: str, unit: str, description: str,
                objective: Objective | None = None) -> dict[str, Any]:
    """A bar chart of one step figure per rung of the selected run: concurrency on the x axis, a bar per lane.

    The instant table query gives one row per (lane, concurrency); the transformations sort the rungs as
    numbers and turn the rows into one column per lane (``groupingToMatrix``), the x field ``concurrency``.
    """
    target = Target(step_figure(figure), "{{lane}}", instant=True, format="table")
    custom: dict[str, Any] = {"lineWidth": 1, "fillOpacity": 80, "axisPlacement": "auto"}
    defaults: dict[str, Any] = {"unit": unit, "min": 0, "custom": custom}
    if objective is not None:
        defaults["thresholds"] = objective.thresholds()
        custom["thresholdsStyle"] = {"mode": "dashed"}
    options = {
        "xField": "concurrency",
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
         "options": {"conversions": [{"targetField": "concurrency", "destinationType": "number"}], "fields": {}}},
        {"id": "sortBy", "options": {"fields": {}, "sort": [{"field": "concurrency", "desc": False}]}},
        {"id": "groupingToMatrix",
         "options": {"columnField": "lane", "rowField": "concurrency", "valueField": "Value", "emptyValue": "null"}},
        {"id": "organize", "options": {"renameByName": {"concurrency\\lane": "concurrency"}}},
    ]
    return _panel("barchart", title, [target], description, defaults, options, (12, 8),
                  transformations=transformations)


# --- the answer: stat panels --------------------------------------------------------------------------------


def recommended_stat_panel() -> dict[str, Any]:
    return _stat(
        "Recommended concurrency",
        [Target(promql.max_by("satbench_recommended_concurrency", BY_LANE, LANE), "{{lane}}")],
        "short",
        "The recommender's answer per lane (GET /recommendations): the most requests in flight that still buy "
        "throughput while every objective and verdict held. Cap the router's in-flight limit here.",
        decimals=0,
    )


def saturation_stat_panel() -> dict[str, Any]:
    return _stat(
        "Saturation concurrency",
        [Target(promql.max_by("satbench_saturation_concurrency", BY_LANE, LANE), "{{lane}}")],
        "short",
        "Where throughput stopped paying per doubling. No value: the ladder ended before saturation (status "
        "unsaturated), and the recommended figure is a lower bound.",
        decimals=0,
    )


def status_stat_panel() -> dict[str, Any]:
    return _stat(
        "Answer per lane",
        [Target(promql.max_by("satbench_recommendation_status", ("lane", "status", "binding_constraint"), LANE),
                "{{lane}}: {{status}}, bound by {{binding_constraint}}", instant=True)],  # only the current one
        "short",
        "The document's status per lane (ok: settled; unsaturated: a lower bound, the ladder ended while "
        "throughput still grew; insufficient_data, degraded, stale) and the constraint that binds the answer "
        "(satbench_recommendation_status).",
        text_mode="name",
    )


def verdicts_stat_panel() -> dict[str, Any]:
    return _stat(
        "Verdicts",
        [Target(promql.aggregate("min", ("lane", "check"), promql.selector("satbench_verdict_ok", LANE)),
                "{{lane}} {{check}}")],
        "short",
        "Per lane and check, whether every measured rung passed: decode starvation (each request's longest "
        "pause, p99, against slo.tbt_p99_s), prefill starvation (queued waits against the FIFO bound), "
        "fairness (users' waits and pace, significant and material) (satbench_verdict_ok).",
        mappings=_states(("1", "ok", "green"), ("0", "flagged", "red")),
    )


def stale_stat_panel() -> dict[str, Any]:
    return _stat(
        "Answer state",
        [Target(promql.selector("satbench_recommendations_stale"), "recommender")],
        "short",
        "Whether the recommender serves a fresh answer or its last good one while Prometheus is unreachable "
        "(satbench_recommendations_stale).",
        mappings=_states(("0", "fresh", "green"), ("1", "stale", "red")),
    )


def runtime_up_panel() -> dict[str, Any]:
    return _stat(
        "Runtime up",
        [Target(promql.max_by("runtime_up", ("lane", "instance"), LANE, NODE), "{{lane}} {{instance}}")],
        "short",
        "Per exporter (node): up when it could read the runtime at its last scrape.",
        mappings=_states(("0", "down", "red"), ("1", "up", "green")),
    )


# --- at the recommended rung: stat panels against the policy -------------------------------------------------


def _at_n(title: str, figure: str, unit: str, description: str, objective: Objective | None = None,
          decimals: int | None = None) -> dict[str, Any]:
    target = Target(at_recommended(figure), "{{lane}} (c={{concurrency}})", instant=True)
    return _stat(title, [target], unit, description, objective=objective, decimals=decimals, width=4)


def throughput_at_n_panel() -> dict[str, Any]:
    return _at_n("Output tok/s at the answer", "throughput_tok_s", "suffix:tok/s",
                 "Output tokens per second the recommended rung of the selected run measured (its records).")


def requests_at_n_panel() -> dict[str, Any]:
    return _at_n("Requests/s at the answer", "requests_per_s", "reqps",
                 "Requests finished per second at the recommended rung.")


def ttft_at_n_panel() -> dict[str, Any]:
    return _at_n("TTFT p95 at the answer", "ttft_s.p95", "s",
                 "Time to first token, p95 over the recommended rung's requests; red past the policy's "
                 "slo.ttft_p95_s.", objectives().get("ttft"))


def itl_at_n_panel() -> dict[str, Any]:
    return _at_n("ITL p95 at the answer", "itl_s.p95", "s",
                 "Inter-token latency p95 at the recommended rung; red past slo.itl_p95_s.", objectives().get("itl"))


def pause_at_n_panel() -> dict[str, Any]:
    return _at_n("Longest pause p99 at the answer", "pause_s.p99", "s",
                 "Each request's longest pause between two tokens, p99 over the recommended rung's requests: the "
                 "decode-starvation verdict's figure; red past slo.tbt_p99_s.", objectives().get("pause"))


def jain_at_n_panel() -> dict[str, Any]:
    return _at_n("Jain's index at the answer", "jain", "percentunit",
                 "Jain's index of the users' output tokens at the recommended rung (1 is perfectly fair); "
                 "coloured against jain_min when the policy sets one.", objectives().get("jain"), decimals=1)


# --- per rung of the selected run: bar charts ----------------------------------------------------------------


def throughput_rung_panel() -> dict[str, Any]:
    return _rung_chart("Output throughput per rung", "throughput_tok_s", "suffix:tok/s",
                       "Output tokens per second of each rung of the selected run (run_id), per lane: where the "
                       "bars stop growing is saturation.")


def ttft_rung_panel() -> dict[str, Any]:
    return _rung_chart("TTFT p95 per rung", "ttft_s.p95", "s",
                       "Time to first token p95 of each rung; the dashed line is the policy's slo.ttft_p95_s.",
                       objectives().get("ttft"))


def itl_rung_panel() -> dict[str, Any]:
    return _rung_chart("ITL p95 per rung", "itl_s.p95", "s",
                       "Inter-token latency p95 of each rung; the dashed line is slo.itl_p95_s.",
                       objectives().get("itl"))


def pause_rung_panel() -> dict[str, Any]:
    return _rung_chart("Longest pause p99 per rung", "pause_s.p99", "s",
                       "Each request's longest pause between tokens, p99 over the rung's requests; the dashed line "
                       "is slo.tbt_p99_s, the decode-starvation objective.", objectives().get("pause"))


# --- live series --------------------------------------------------------------------------------------------


def throughput_panel() -> dict[str, Any]:
    return _timeseries(
        "Throughput (output tokens/s)",
        [
            Target(promql.selector("lane:loadgen_output_tokens:rate10s", LANE), "{{lane}} received (client)"),
            Target(promql.sum_rate_by("runtime_output_tokens_total", BY_LANE, LANE, NODE),
                   "{{lane}} generated (runtime)"),
        ],
        "suffix:tok/s",
        "Output tokens per second per lane: received by the load generator (10 s rate), generated by the "
        "runtime on the selected nodes.",
    )


def requests_panel() -> dict[str, Any]:
    return _timeseries(
        "Requests/s by outcome",
        [
            Target(promql.sum_rate_by("loadgen_requests_total", ("lane", "outcome"), LANE), "{{lane}} {{outcome}}"),
            Target(error_ratio("loadgen_requests_total", LANE), "{{lane}} error ratio",
                   unit="percentunit", axis="right", max_value=1.0, objective=objectives().get("errors")),
        ],
        "reqps",
        "Finished requests per second; anything but outcome=ok is an error. The error ratio (right axis) has "
        "the policy's max_error_ratio as its dashed line.",
    )


def ttft_panel() -> dict[str, Any]:
    return _timeseries(
        "Time to first token",
        _quantiles("loadgen_ttft_seconds"),
        "s",
        "TTFT quantiles (client side) per lane; the dashed line is the policy's p95 objective slo.ttft_p95_s.",
        objective=objectives().get("ttft"),
    )


def itl_panel() -> dict[str, Any]:
    return _timeseries(
        "Inter-token latency",
        _quantiles("loadgen_itl_seconds"),
        "s",
        "Gaps between successive content tokens, quantiles per lane; the dashed line is slo.itl_p95_s.",
        objective=objectives().get("itl"),
    )


def e2e_panel() -> dict[str, Any]:
    return _timeseries(
        "End-to-end latency", _quantiles("loadgen_e2e_seconds"), "s",
        "Request sent to last byte, per lane (a dashed line where the policy sets slo.e2e_p95_s).",
        objective=objectives().get("e2e"),
    )


def queue_time_panel() -> dict[str, Any]:
    return _timeseries(
        "Queue time",
        _quantiles("loadgen_queue_seconds"),
        "s",
        "TTFT minus prompt processing: the wait for a slot and for the running batch step to end.",
    )


def queue_depth_panel() -> dict[str, Any]:
    return _timeseries(
        "Queue depth",
        [
            Target(promql.sum_by("runtime_queue_depth", BY_LANE, LANE, NODE), "{{lane}} waiting (runtime)"),
            Target(promql.selector("lane:loadgen_in_flight:sum", LANE), "{{lane}} in flight (client)"),
        ],
        "short",
        "Requests waiting for a slot (runtime, selected nodes) and requests in flight (load generator).",
    )


def occupancy_panel() -> dict[str, Any]:
    return _timeseries(
        "Batch occupancy",
        [
            Target(promql.selector("lane:runtime_batch_occupancy_ratio:avg10s", LANE), "{{lane}} busy slots / slots"),
            Target(promql.selector("lane:runtime_decode_occupancy_ratio:rate10s", LANE), "{{lane}} per decode step"),
        ],
        "percentunit",
        "Busy slots / total slots (scrape-time average) and busy slots per batched decode step.",
        max_value=1.0,
    )


def slot_states_panel() -> dict[str, Any]:
    return _timeseries(
        "Slot states",
        [Target(promql.sum_by("runtime_slots", ("lane", "state"), LANE, NODE), "{{lane}} {{state}}")],
        "short",
        "Slots idle, in prefill and in decode on the selected nodes, stacked per lane.",
        stack=True,
    )


def memory_panel() -> dict[str, Any]:
    return _timeseries(
        "Memory",
        [
            Target(promql.sum_by("gpu_memory_used_bytes", BY_LANE, LANE, NODE), "{{lane}} GPU used"),
            Target(promql.sum_by("gpu_memory_total_bytes", BY_LANE, LANE, NODE), "{{lane}} GPU total"),
            Target(promql.sum_by("runtime_process_resident_memory_bytes", BY_LANE, LANE, NODE), "{{lane}} runtime RSS"),
        ],
        "bytes",
        "GPU memory (NVML, or the simulator's model of it: label simulated) and the runtime process's RSS, "
        "summed over the selected nodes.",
    )


def fairness_panel() -> dict[str, Any]:
    return _timeseries(
        "Fairness (Jain's index over users)",
        [Target(promql.selector("lane:loadgen_output_tokens:jain_index30s", LANE), "{{lane}}")],
        "percentunit",
        "Jain's index of per-user output token rates over 30 s: 100 % is perfectly fair, 1/n is one user "
        "served (a dashed line where the policy sets jain_min).",
        max_value=1.0,
        objective=objectives().get("jain"),
    )


def decode_stall_panel() -> dict[str, Any]:
    return _timeseries(
        "Decode stalls",
        [
            *_quantiles("loadgen_decode_stall_seconds"),
            Target(promql.sum_rate_by("loadgen_decode_stall_seconds_count", BY_LANE, LANE), "{{lane}} stalls/s",
                   unit="cps", axis="right"),
        ],
        "s",
        "Longest inter-token gaps of decoding requests while another request was in prefill (p99, left) and "
        "how many per second (right); the dashed line is slo.tbt_p99_s, the objective each request's "
        "longest pause is judged against.",
        objective=objectives().get("pause"),
    )


def rung_panel() -> dict[str, Any]:
    return _timeseries(
        "Current rung (concurrency)",
        [
            Target(promql.max_by("loadgen_step_concurrency", BY_LANE, LANE), "{{lane}}"),
        ],
        "short",
        "Concurrency of the step window in progress (0 outside a window).",
    )


def recommendation_panel() -> dict[str, Any]:
    return _timeseries(
        "Recommended and saturation concurrency",
        [
            Target(promql.max_by("satbench_recommended_concurrency", BY_LANE, LANE), "{{lane}} recommended"),
            Target(promql.max_by("satbench_saturation_concurrency", BY_LANE, LANE), "{{lane}} saturation"),
        ],
        "short",
        "The recommender's answer per lane over time (GET /recommendations).",
    )


# --- node vs client: the exporter's relay mode ----------------------------------------------------------------


def _node_vs_client(metric: str) -> list[Target]:
    """Node-side quantiles (exporter relay mode) and the client's p95 of the same latency, same buckets, both
    only for lanes with relay data."""
    node = promql.selector(promql.quantile_rule(f"runtime_{metric}_seconds"), LANE)
    client = promql.selector(promql.quantile_rule(f"loadgen_{metric}_seconds"), LANE, quantile="0.95")
    return [Target(node, "{{lane}} node p{{quantile}}"), Target(only_relay_lanes(client), "{{lane}} client p0.95")]


_GENERATION = promql.Matcher("route", "!=", "other")  # the relay's generation routes
_RELAY_NOTE = " Only lanes whose exporter relays (lane option relay = true, or satbench exporter --relay) appear."


def node_ttft_panel() -> dict[str, Any]:
    return _timeseries(
        "TTFT at the node vs the client",
        _node_vs_client("ttft"),
        "s",
        "Time to first token measured at the relay (--relay), beside the load generator's p95: the gap is "
        "what lies between them (network, client)." + _RELAY_NOTE,
        objective=objectives().get("ttft"),
    )


def node_itl_panel() -> dict[str, Any]:
    return _timeseries(
        "Inter-token latency at the node vs the client",
        _node_vs_client("itl"),
        "s",
        "Token gaps as the relay forwarded them, beside the load generator's p95." + _RELAY_NOTE,
        objective=objectives().get("itl"),
    )


def node_e2e_panel() -> dict[str, Any]:
    return _timeseries(
        "End-to-end latency at the node vs the client",
        _node_vs_client("e2e"),
        "s",
        "Request received to last byte forwarded at the relay, beside the load generator's p95." + _RELAY_NOTE,
        objective=objectives().get("e2e"),
    )


def node_queue_panel() -> dict[str, Any]:
    return _timeseries(
        "Queue time at the node vs the client",
        _node_vs_client("queue"),
        "s",
        "Time waiting for a slot (server timings) for every request through the relay, beside the load "
        "generator's p95 for its own requests." + _RELAY_NOTE,
    )


def node_requests_panel() -> dict[str, Any]:
    return _timeseries(
        "Requests/s at the node vs the client",
        [
            Target(
                promql.sum_rate_by("runtime_relay_requests_total", ("lane", "outcome"), LANE, NODE, _GENERATION),
                "{{lane}} node {{outcome}}",
            ),
            Target(error_ratio("runtime_relay_requests_total", LANE, NODE, _GENERATION),
                   "{{lane}} node error ratio", unit="percentunit", axis="right", max_value=1.0,
                   objective=objectives().get("errors")),
            Target(only_relay_lanes(promql.selector("lane:loadgen_requests:rate10s", LANE)),
                   "{{lane}} client finished"),
        ],
        "reqps",
        "Generation requests through the relay by outcome (cancelled: the client left first), beside the "
        "requests the load generator finished; more at the node means other clients share it. The error "
        "ratio is on the right axis." + _RELAY_NOTE,
    )


# --- the dashboard ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Section:
    """A row of the dashboard and the panels under it (``collapsed``: folded, its panels inside the row)."""

    title: str
    panels: tuple[Callable[[], dict[str, Any]], ...]
    collapsed: bool = False


OVERVIEW_SECTIONS = (
    Section("The answer", (recommended_stat_panel, saturation_stat_panel, status_stat_panel, verdicts_stat_panel,
                           stale_stat_panel, runtime_up_panel)),
    Section("At the recommended rung (run $run_id)", (
        throughput_at_n_panel, requests_at_n_panel, ttft_at_n_panel, itl_at_n_panel, pause_at_n_panel,
        jain_at_n_panel)),
    Section("Per rung (run $run_id)", (throughput_rung_panel, ttft_rung_panel, itl_rung_panel, pause_rung_panel)),
    Section("Live", (
        throughput_panel, requests_panel, ttft_panel, itl_panel, e2e_panel, queue_time_panel, queue_depth_panel,
        occupancy_panel, slot_states_panel, memory_panel, fairness_panel, decode_stall_panel, rung_panel,
        recommendation_panel)),
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
        _query_variable("lane", "lane", LANE_VALUES, multi=True, sort=1,
                        description="Model lanes (the lane label of the load generator's series)."),
        _query_variable("node", "node (exporter instance)", _label_values("runtime_up", "instance", LANE),
                        multi=True, sort=1,
                        description="The Prometheus instance (host:port) of each lane's exporter: one per node. "
                                    "Filters the panels that read the exporters' own series."),
        _query_variable("run_id", "run", _label_values("loadgen_step_figure", "run_id", LANE), multi=False,
                        sort=2, description="The run whose per-rung figures are shown (newest first)."),
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
        "description": "Per-lane answer, verdicts at the answer, figures per rung, live throughput, latency, "
                       "occupancy and fairness; node-side latencies in relay mode.",
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
                    "expr": promql.step_windows(LANE),
                    "step": "5s",
                    "titleFormat": "step window {{lane}}",
                    "textFormat": "lane {{lane}}",
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
