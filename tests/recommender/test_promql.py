from __future__ import annotations

import pytest

from core import promql


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
