"""Named PromQL builders: the one place queries are written, with every label value escaped.

The recommender, the dashboards and the alerts build their queries here, so a metric rename or a label
change happens once. Label values never reach a query unescaped: ``escape_label_value`` turns any string
into the body of a double-quoted PromQL string literal (backslash, double quote and control characters are
escaped, Go-style, as the PromQL lexer reads them), so a value can only ever be compared, never parsed as
syntax. Metric and label *names* are validated against Prometheus' grammar instead (they cannot be quoted).

Windows are floats (a step window lasts 30.217 s); Prometheus range selectors take integer durations, so
``duration`` renders a window in whole milliseconds (``[30217ms]``), rounded to the nearest millisecond.
Evaluated at the window's end, ``increase(x[W])`` then covers exactly the step window.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = [
    "QUERY_LABEL",
    "batch_output_tokens",
    "duration",
    "escape_label_value",
    "named_union",
    "selector",
    "window_gauge_avg",
    "window_gauge_max",
    "window_mean",
    "window_output_tokens",
    "window_quantile",
    "window_quantiles",
    "window_requests_by_outcome",
    "window_sample_count",
    "window_throughput",
    "window_user_tokens",
]

_METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def escape_label_value(value: str) -> str:
    """The body of a double-quoted PromQL string literal that equals ``value`` exactly."""
    out = []
    for ch in str(value):
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return "".join(out)


def _check_metric(metric: str) -> str:
    if not _METRIC_NAME.match(metric):
        raise ValueError(f"not a Prometheus metric name: {metric!r}")
    return metric


def selector(metric: str, **labels: str) -> str:
    """``metric{label="value",...}`` with every value escaped; equality matchers only."""
    _check_metric(metric)
    parts = []
    for name, value in labels.items():
        if not _LABEL_NAME.match(name):
            raise ValueError(f"not a Prometheus label name: {name!r}")
        parts.append(f'{name}="{escape_label_value(value)}"')
    return f"{metric}{{{','.join(parts)}}}"


def duration(seconds: float) -> str:
    """A range-selector duration of ``seconds`` in whole milliseconds (at least 1 ms)."""
    if not seconds > 0:
        raise ValueError(f"a window must be positive, got {seconds!r} s")
    return f"{max(1, round(seconds * 1000))}ms"


def _q(q: float) -> str:
    if not 0 <= q <= 1:
        raise ValueError(f"a quantile lies in [0, 1], got {q}")
    return repr(float(q))


def window_output_tokens(lane: str, window_s: float) -> str:
    """Output tokens the load generator received for ``lane`` during the window ending at evaluation time."""
    return f"sum(increase({selector('loadgen_output_tokens_total', lane=lane)}[{duration(window_s)}]))"


def window_throughput(lane: str, window_s: float) -> str:
    """Aggregate output tokens per second of ``lane`` over the window."""
    return f"{window_output_tokens(lane, window_s)} / {float(window_s)!r}"


def window_user_tokens(lane: str, window_s: float) -> str:
    """Output tokens per user (label ``user``) of ``lane`` over the window: the input to Jain's index."""
    sel = selector("loadgen_output_tokens_total", lane=lane)
    return f"sum by (user) (increase({sel}[{duration(window_s)}]))"


def window_requests_by_outcome(lane: str, window_s: float) -> str:
    sel = selector("loadgen_requests_total", lane=lane)
    return f"sum by (outcome) (increase({sel}[{duration(window_s)}]))"


def window_quantile(metric: str, q: float, lane: str, window_s: float) -> str:
    """``histogram_quantile`` of histogram ``metric`` over bucket increases inside the window."""
    sel = selector(f"{_check_metric(metric)}_bucket", lane=lane)
    return f"histogram_quantile({_q(q)}, sum by (le) (increase({sel}[{duration(window_s)}])))"


def window_quantiles(metric: str, qs: Sequence[float], lane: str, window_s: float) -> str:
    """Several quantiles in one query: each result carries its quantile in a ``quantile`` label."""
    if not qs:
        raise ValueError("no quantiles asked")
    parts = [
        f'label_replace({window_quantile(metric, q, lane, window_s)}, "quantile", "{_q(q)}", "", "")'
        for q in qs
    ]
    return " or ".join(parts)


def window_mean(metric: str, lane: str, window_s: float) -> str:
    """Mean of histogram ``metric``'s observations inside the window (sum over count of the increases)."""
    d = duration(window_s)
    _check_metric(metric)
    total = f"sum(increase({selector(metric + '_sum', lane=lane)}[{d}]))"
    count = f"sum(increase({selector(metric + '_count', lane=lane)}[{d}]))"
    return f"{total} / {count}"


def window_sample_count(metric: str, lane: str, window_s: float) -> str:
    """Most samples any series of ``metric`` for ``lane`` holds in the window: how well it was scraped."""
    return f"max(count_over_time({selector(metric, lane=lane)}[{duration(window_s)}]))"


def window_gauge_avg(metric: str, lane: str, window_s: float) -> str:
    """Mean over the window of a gauge, averaged over the lane's targets (nodes)."""
    return f"avg(avg_over_time({selector(metric, lane=lane)}[{duration(window_s)}]))"


def window_gauge_max(metric: str, lane: str, window_s: float) -> str:
    """Largest value of a gauge during the window, over all of the lane's series."""
    return f"max(max_over_time({selector(metric, lane=lane)}[{duration(window_s)}]))"


QUERY_LABEL = "satbench_query"


def named_union(parts: dict[str, str], label: str = QUERY_LABEL) -> str:
    """Several queries in one: each result series carries its part's name in ``label``.

    ``or`` keeps every series of every part because the names make their label sets distinct. One HTTP
    round trip then answers what would otherwise take one per part.
    """
    if not parts:
        raise ValueError("no queries to unite")
    if not _LABEL_NAME.match(label):
        raise ValueError(f"not a Prometheus label name: {label!r}")
    branches = []
    for name, expr in parts.items():
        if not _LABEL_NAME.match(name):
            raise ValueError(f"part names must be label-safe, got {name!r}")
        branches.append(f'label_replace({expr}, "{label}", "{name}", "", "")')
    return " or ".join(branches)


def batch_output_tokens(lane: str, batch_s: float) -> str:
    """Output tokens per batch of ``batch_s``: evaluated as a range query with step ``batch_s``."""
    return window_output_tokens(lane, batch_s)
