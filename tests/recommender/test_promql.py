from __future__ import annotations

from collections.abc import Callable

import pytest

from satbench.core import promql


@pytest.mark.parametrize(
    ("value", "escaped"),
    [
        ("dense", "dense"),
        ('a"b', 'a\\"b'),
        ("a\\b", "a\\\\b"),
        ("line\nbreak", "line\\nbreak"),
        ("tab\there\r", "tab\\there\\r"),
        ("bell\x07", "bell\\u0007"),
        ("ünïcode ∞", "ünïcode ∞"),
        ('"} or vector(1) #', '\\"} or vector(1) #'),
        ("", ""),
    ],
)
def test_escape_label_value(value: str, escaped: str) -> None:
    assert promql.escape_label_value(value) == escaped


def test_selector_escapes_every_value() -> None:
    assert promql.selector("m", lane='x"y', user="1") == 'm{lane="x\\"y",user="1"}'
    assert promql.selector("m") == "m{}"


@pytest.mark.parametrize(("metric", "labels"), [("bad-name", {}), ("m", {"bad-label": "x"}), ("1m", {})])
def test_selector_rejects_bad_names(metric: str, labels: dict[str, str]) -> None:
    with pytest.raises(ValueError):
        promql.selector(metric, **labels)


@pytest.mark.parametrize(("seconds", "text"), [(30.0, "30000ms"), (30.2174, "30217ms"), (0.0001, "1ms")])
def test_duration_in_whole_milliseconds(seconds: float, text: str) -> None:
    assert promql.duration(seconds) == text


@pytest.mark.parametrize("seconds", [0.0, -1.0, float("nan")])
def test_duration_rejects_empty_windows(seconds: float) -> None:
    with pytest.raises(ValueError):
        promql.duration(seconds)


def test_builders() -> None:
    assert promql.window_throughput("dense", 30.0) == (
        'sum(increase(loadgen_output_tokens_total{lane="dense"}[30000ms])) / 30.0')
    assert promql.window_quantile("loadgen_ttft_seconds", 0.95, "moe", 12.5) == (
        'histogram_quantile(0.95, sum by (le) (increase(loadgen_ttft_seconds_bucket{lane="moe"}[12500ms])))')
    assert promql.window_user_tokens("d", 1.0).startswith("sum by (user) (increase(")
    assert promql.window_gauge_avg("runtime_queue_depth", "d", 2.0) == (
        'avg(avg_over_time(runtime_queue_depth{lane="d"}[2000ms]))')
    assert promql.window_gauge_max("gpu_memory_used_bytes", "d", 2.0).startswith("max(max_over_time(")
    multi = promql.window_quantiles("loadgen_itl_seconds", (0.5, 0.95), "d", 1.0)
    assert multi.count("histogram_quantile") == 2 and '"quantile", "0.95"' in multi
    # the load generator's own figures: a bare lane is not the same name on a node (its series carry node)
    assert promql.published_step_figures("dense", "r1", 2, 60.0) == (
        'last_over_time(loadgen_step_figure{lane="dense",node="",run_id="r1",concurrency="2",rate_rps=""}[60000ms])')
    assert promql.published_step_figures("gpu1/dense", "r1", 2, 60.0) == (
        'last_over_time(loadgen_step_figure{node="gpu1",lane="dense",run_id="r1",concurrency="2",rate_rps=""}[60000ms])')
    assert promql.published_step_figures("dense", "r1", 0, 60.0, rate=2.5).endswith(
        'concurrency="0",rate_rps="2.5"}[60000ms])')  # an open-loop rung is its rate


def test_named_union() -> None:
    united = promql.named_union({"a": "up", "b": "sum(x)"})
    assert united == ('label_replace(up, "satbench_query", "a", "", "") or '
                      'label_replace(sum(x), "satbench_query", "b", "", "")')
    for bad in ({}, {"bad name": "up"}):
        with pytest.raises(ValueError):
            promql.named_union(bad)


def test_quantile_bounds() -> None:
    with pytest.raises(ValueError):
        promql.window_quantile("m", 1.5, "d", 1.0)
    with pytest.raises(ValueError):
        promql.window_quantiles("m", (), "d", 1.0)


HOSTILE = '"} or vector(1) #\\'
HOSTILE_ESCAPED = '\\"} or vector(1) #\\\\'
LANE = promql.grafana_matcher("lane")


@pytest.mark.parametrize(
    ("built", "query"),
    [
        (str(LANE), 'lane=~"$lane"'),
        (str(promql.grafana_matcher("node", "instance", "!~")), 'node!~"$instance"'),
        (str(promql.Matcher("route", "!=", HOSTILE)), f'route!="{HOSTILE_ESCAPED}"'),
        (str(promql.RATE_INTERVAL), "$__rate_interval"),
        (promql.selector("m", LANE), 'm{lane=~"$lane"}'),
        (promql.selector("m", LANE, quantile="0.95"), 'm{lane=~"$lane",quantile="0.95"}'),
        (promql.selector("m", LANE, user=HOSTILE), f'm{{lane=~"$lane",user="{HOSTILE_ESCAPED}"}}'),
        (promql.selector("lane:x:rate10s", metric="label named metric"), 'lane:x:rate10s{metric="label named metric"}'),
        (promql.rate("c_total", LANE), 'rate(c_total{lane=~"$lane"}[$__rate_interval])'),
        (promql.rate("c_total", window=30.0, lane=HOSTILE), f'rate(c_total{{lane="{HOSTILE_ESCAPED}"}}[30000ms])'),
        (promql.aggregate("avg", ("a", "b"), "up"), "avg by (a, b) (up)"),
        (promql.sum_rate_by("loadgen_requests_total", ("lane", "outcome"), LANE),
         'sum by (lane, outcome) (rate(loadgen_requests_total{lane=~"$lane"}[$__rate_interval]))'),
        (promql.sum_rate_by("r_total", ("lane",), LANE, promql.Matcher("route", "!=", "other")),
         'sum by (lane) (rate(r_total{lane=~"$lane",route!="other"}[$__rate_interval]))'),
        (promql.sum_rate_by("r_total", ("lane",), window=2.5, lane=HOSTILE),
         f'sum by (lane) (rate(r_total{{lane="{HOSTILE_ESCAPED}"}}[2500ms]))'),
        (promql.sum_by("runtime_slots", ("lane", "state"), LANE),
         'sum by (lane, state) (runtime_slots{lane=~"$lane"})'),
        (promql.max_by("runtime_up", ("lane",), LANE), 'max by (lane) (runtime_up{lane=~"$lane"})'),
        (promql.max_by("runtime_up", ("lane",), lane=HOSTILE),
         f'max by (lane) (runtime_up{{lane="{HOSTILE_ESCAPED}"}})'),
        (promql.quantile_rule("loadgen_ttft_seconds"), "lane_quantile:loadgen_ttft_seconds:histogram_quantile10s"),
        (promql.step_windows(LANE), 'max by (node, lane) (loadgen_step_concurrency{lane=~"$lane"}) > 0'),
        (promql.label_values("loadgen_step_concurrency", "lane"), "label_values(loadgen_step_concurrency, lane)"),
    ],
)
def test_dashboard_builders(built: str, query: str) -> None:
    assert built == query


@pytest.mark.parametrize(
    "build",
    [
        lambda: promql.GrafanaVar("la ne"),
        lambda: promql.GrafanaVar('lane"}'),
        lambda: promql.grafana_matcher("bad-label"),
        lambda: promql.Matcher("lane", "==", "x"),
        lambda: promql.Matcher("lane", "~", "x"),
        lambda: promql.aggregate("topk", ("lane",), "up"),
        lambda: promql.aggregate("sum", (), "up"),
        lambda: promql.aggregate("sum", ("lane) (up) or (x",), "up"),
        lambda: promql.rate("bad-name", LANE),
        lambda: promql.rate("c_total", window=0.0),
        lambda: promql.max_by("m{}", ("lane",)),
        lambda: promql.quantile_rule("x} or up"),
        lambda: promql.label_values("m", "bad label"),
        lambda: promql.label_values("m)", "lane"),
    ],
)
def test_dashboard_builders_reject_bad_names(build: Callable[[], object]) -> None:
    with pytest.raises(ValueError):
        build()
