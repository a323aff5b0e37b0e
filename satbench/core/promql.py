"""Named PromQL builders: the one place queries are written, with every label value escaped.

The recommender's step-window queries (``window_*``, ``named_union``) and the Grafana dashboard's panel,
annotation and template-variable queries (``selector`` with ``Matcher``s, ``rate``, ``aggregate``,
``sum_rate_by``, ``max_by``, ``sum_by``, ``quantile_rule``, ``step_windows``, ``label_values``) are built
here, so a metric rename or a label change happens once. Label values never reach a query unescaped:
``escape_label_value`` turns any string into the body of a double-quoted PromQL string literal (backslash,
double quote and control characters are escaped, Go-style, as the PromQL lexer reads them), so a value can
only ever be compared, never parsed as syntax. Metric and label *names* are validated against Prometheus'
grammar instead (they cannot be quoted).

Grafana template variables (``$lane``, ``$__rate_interval``) are Grafana syntax, not PromQL: Grafana
replaces them before a query reaches Prometheus. They are written only through ``GrafanaVar``, never as
pasted text: a ``Matcher`` whose value is a ``GrafanaVar`` renders ``lane=~"$lane"`` (``grafana_matcher``
is the short form), and a ``GrafanaVar`` passed as a range window renders ``[$__rate_interval]``
(``RATE_INTERVAL``). Everything else in such a query is escaped or validated as above.

Windows are floats (a step window lasts 30.217 s); Prometheus range selectors take integer durations, so
``duration`` renders a window in whole milliseconds (``[30217ms]``), rounded to the nearest millisecond.
Evaluated at the window's end, ``increase(x[W])`` then covers exactly the step window.

The window builders take a lane *key* (``core.lanes``) and select its series by ``lane_matchers``: ``lane``,
and ``node`` where the key names one, so two nodes serving one lane name never mix. A bare key (a lane that
names no node) selects by ``lane`` alone, as before fleets: a Prometheus that labels such a lane's exporter
target with a ``node`` (``docs/real-nodes.md`` did) still serves it; in a store shared by a fleet, lanes name
their nodes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from satbench.core.arrivals import rate_label
from satbench.core.lanes import split_key

__all__ = [
    "QUERY_LABEL",
    "RATE_INTERVAL",
    "GrafanaVar",
    "Matcher",
    "aggregate",
    "batch_output_tokens",
    "duration",
    "escape_label_value",
    "grafana_matcher",
    "label_values",
    "lane_matchers",
    "max_by",
    "named_union",
    "published_step_figures",
    "quantile_rule",
    "rate",
    "selector",
    "step_windows",
    "sum_by",
    "sum_rate_by",
    "window_gauge_avg",
    "window_gauge_max",
    "window_gpu_names",
    "window_mean",
    "window_output_tokens",
    "window_quantile",
    "window_quantiles",
    "window_requests_by_outcome",
    "window_sample_count",
    "window_samples",
    "window_series_count",
    "window_sum_max",
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


def _check_label(name: str) -> str:
    if not _LABEL_NAME.match(name):
        raise ValueError(f"not a Prometheus label name: {name!r}")
    return name


@dataclass(frozen=True, slots=True)
class GrafanaVar:
    """A Grafana template variable, rendered ``$name``: Grafana substitutes it before Prometheus sees it.

    Only for dashboards: the variable is written verbatim (its name is validated like a label name, with
    Grafana's ``__`` prefix for built-ins such as ``__rate_interval``), so it must stand where Grafana's
    substituted text is valid PromQL: as a ``Matcher`` value (inside the quotes) or as a range window.
    """

    name: str

    def __post_init__(self) -> None:
        _check_label(self.name)

    def __str__(self) -> str:
        return f"${self.name}"


RATE_INTERVAL = GrafanaVar("__rate_interval")
"""Grafana's ``$__rate_interval``: a range window that always spans at least four scrapes."""

_MATCH_OPS = frozenset({"=", "!=", "=~", "!~"})


@dataclass(frozen=True, slots=True)
class Matcher:
    """One label matcher ``label<op>"value"``; ``op`` is one of ``=``, ``!=``, ``=~``, ``!~``.

    A ``str`` value is escaped with ``escape_label_value`` (for the regex operators it is then a regex, but
    still cannot leave its string literal); a ``GrafanaVar`` value is written as ``"$name"``.
    """

    label: str
    op: str
    value: str | GrafanaVar

    def __post_init__(self) -> None:
        _check_label(self.label)
        if self.op not in _MATCH_OPS:
            raise ValueError(f"not a PromQL matcher operator: {self.op!r}")

    def __str__(self) -> str:
        value = self.value if isinstance(self.value, GrafanaVar) else escape_label_value(self.value)
        return f'{self.label}{self.op}"{value}"'


def grafana_matcher(label: str, variable: str | None = None, op: str = "=~") -> Matcher:
    """``label=~"$variable"`` (``variable`` defaults to ``label``): a panel filtered by a Grafana variable.

    ``=~`` is the default because a multi-value or "All" variable expands to a regex (``allValue`` ``.*``).
    """
    return Matcher(label, op, GrafanaVar(variable if variable is not None else label))


def selector(metric: str, /, *matchers: Matcher, **labels: str) -> str:
    """``metric{matcher,...,label="value",...}``: ``matchers`` first, then equality on ``labels``.

    Every value is escaped (or, for a ``GrafanaVar`` matcher, written as the variable).
    """
    _check_metric(metric)
    parts = [str(m) for m in matchers]
    parts += [str(Matcher(name, "=", value)) for name, value in labels.items()]
    return f"{metric}{{{','.join(parts)}}}"


def lane_matchers(key: str) -> tuple[Matcher, ...]:
    """The matchers of lane ``key``'s series (module docstring): ``node`` where the key names one, ``lane``."""
    node, lane = split_key(key)
    return (Matcher("lane", "=", lane),) if node is None else (Matcher("node", "=", node), Matcher("lane", "=", lane))


def duration(seconds: float) -> str:
    """A range-selector duration of ``seconds`` in whole milliseconds (at least 1 ms)."""
    if not seconds > 0:
        raise ValueError(f"a window must be positive, got {seconds!r} s")
    return f"{max(1, round(seconds * 1000))}ms"


def _window(window: float | GrafanaVar) -> str:
    return str(window) if isinstance(window, GrafanaVar) else duration(window)


_AGGREGATIONS = frozenset({"sum", "max", "min", "avg", "count"})


def aggregate(op: str, by: Sequence[str], expr: str) -> str:
    """``op by (label, ...) (expr)`` for ``op`` in sum, max, min, avg, count; ``expr`` is a built query."""
    if op not in _AGGREGATIONS:
        raise ValueError(f"not a supported PromQL aggregation: {op!r}")
    if not by:
        raise ValueError("an aggregation by no labels: use the builders without ``by``")
    return f"{op} by ({', '.join(_check_label(name) for name in by)}) ({expr})"


def rate(metric: str, *matchers: Matcher, window: float | GrafanaVar = RATE_INTERVAL, **labels: str) -> str:
    """``rate(metric{...}[window])``; ``window`` in seconds, or a ``GrafanaVar`` (``$__rate_interval``)."""
    return f"rate({selector(metric, *matchers, **labels)}[{_window(window)}])"


def sum_rate_by(
    metric: str, by: Sequence[str], *matchers: Matcher, window: float | GrafanaVar = RATE_INTERVAL,
    **labels: str,
) -> str:
    """Per-second rate of counter ``metric``, summed by the labels ``by``."""
    return aggregate("sum", by, rate(metric, *matchers, window=window, **labels))


def sum_by(metric: str, by: Sequence[str], *matchers: Matcher, **labels: str) -> str:
    """Gauge ``metric`` summed by the labels ``by``."""
    return aggregate("sum", by, selector(metric, *matchers, **labels))


def max_by(metric: str, by: Sequence[str], *matchers: Matcher, **labels: str) -> str:
    """Largest series of gauge ``metric`` per value of the labels ``by``."""
    return aggregate("max", by, selector(metric, *matchers, **labels))


def quantile_rule(metric: str) -> str:
    """Name of the recording rule holding histogram ``metric``'s quantiles over 10 s, one series per quantile.

    ``lane_quantile:<metric>:histogram_quantile10s`` of ``prometheus/rules/satbench.rules.yml``; select it
    with ``selector(quantile_rule(metric), ...)``.
    """
    return f"lane_quantile:{_check_metric(metric)}:histogram_quantile10s"


def step_windows(*matchers: Matcher, **labels: str) -> str:
    """Lanes with a step window in progress: ``loadgen_step_concurrency`` above zero, per lane."""
    return f"{max_by('loadgen_step_concurrency', ('node', 'lane'), *matchers, **labels)} > 0"


def label_values(metric: str, label: str) -> str:
    """Grafana's templating query ``label_values(metric, label)`` (Prometheus data source), not PromQL."""
    return f"label_values({_check_metric(metric)}, {_check_label(label)})"


def _q(q: float) -> str:
    if not 0 <= q <= 1:
        raise ValueError(f"a quantile lies in [0, 1], got {q}")
    return repr(float(q))


def window_output_tokens(lane: str, window_s: float) -> str:
    """Output tokens the load generator received for ``lane`` during the window ending at evaluation time."""
    return f"sum(increase({selector('loadgen_output_tokens_total', *lane_matchers(lane))}[{duration(window_s)}]))"


def window_throughput(lane: str, window_s: float) -> str:
    """Aggregate output tokens per second of ``lane`` over the window."""
    return f"{window_output_tokens(lane, window_s)} / {float(window_s)!r}"


def window_user_tokens(lane: str, window_s: float) -> str:
    """Output tokens per user (label ``user``) of ``lane`` over the window: the input to Jain's index."""
    sel = selector("loadgen_output_tokens_total", *lane_matchers(lane))
    return f"sum by (user) (increase({sel}[{duration(window_s)}]))"


def window_requests_by_outcome(lane: str, window_s: float) -> str:
    sel = selector("loadgen_requests_total", *lane_matchers(lane))
    return f"sum by (outcome) (increase({sel}[{duration(window_s)}]))"


def window_quantile(metric: str, q: float, lane: str, window_s: float) -> str:
    """``histogram_quantile`` of histogram ``metric`` over bucket increases inside the window."""
    sel = selector(f"{_check_metric(metric)}_bucket", *lane_matchers(lane))
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
    total = f"sum(increase({selector(metric + '_sum', *lane_matchers(lane))}[{d}]))"
    count = f"sum(increase({selector(metric + '_count', *lane_matchers(lane))}[{d}]))"
    return f"{total} / {count}"


def window_sample_count(metric: str, lane: str, window_s: float) -> str:
    """Most samples any series of ``metric`` for ``lane`` holds in the window: how well it was scraped."""
    return f"max(count_over_time({selector(metric, *lane_matchers(lane))}[{duration(window_s)}]))"


def window_gauge_avg(metric: str, lane: str, window_s: float) -> str:
    """Mean over the window of a gauge, averaged over the lane's targets (nodes)."""
    return f"avg(avg_over_time({selector(metric, *lane_matchers(lane))}[{duration(window_s)}]))"


def window_gauge_max(metric: str, lane: str, window_s: float) -> str:
    """Largest value of a gauge during the window, over all of the lane's series."""
    return f"max(max_over_time({selector(metric, *lane_matchers(lane))}[{duration(window_s)}]))"


def window_sum_max(metric: str, lane: str, window_s: float, step_s: float) -> str:
    """Largest value during the window of the gauge summed over the lane's series (say, memory over every
    GPU of a lane that spans several), sampled every ``step_s`` (the scrape interval) by a subquery."""
    return f"max_over_time(sum({selector(metric, *lane_matchers(lane))})[{duration(window_s)}:{duration(step_s)}])"


def window_gpu_headroom_min(lane: str, window_s: float) -> str:
    """The least free share of any of the lane's GPUs at its own peak over the window: each GPU's used memory
    against its own size (``gpu_memory_used_bytes`` over ``gpu_memory_total_bytes``, matched on every label)."""
    w = duration(window_s)
    used = f"max_over_time({selector('gpu_memory_used_bytes', *lane_matchers(lane))}[{w}])"
    total = f"max_over_time({selector('gpu_memory_total_bytes', *lane_matchers(lane))}[{w}])"
    return f"min(1 - {used} / {total})"


def window_gpu_other_max(lane: str, window_s: float, step_s: float) -> str:
    """The most GPU memory the lane's GPUs held for other processes than the runtime over the window: device-wide
    use less the runtime process's own (``runtime_gpu_memory_used_bytes``), where the exporter reads both."""
    device = selector("gpu_memory_used_bytes", *lane_matchers(lane))
    own = selector("runtime_gpu_memory_used_bytes", *lane_matchers(lane))
    return f"max(max_over_time(({device} - {own})[{duration(window_s)}:{duration(step_s)}]))"


def window_samples(metrics: Sequence[str], lane: str, span_s: float) -> str:
    """The raw samples of ``metrics`` for ``lane`` over the last ``span_s`` (a range selector: the answer is a
    matrix), for figures read from the samples themselves (``core.energy``: a counter interpolated at a window's
    edges, which ``increase`` extrapolates instead)."""
    if not metrics:
        raise ValueError("no metrics asked")
    names = "|".join(_check_metric(m) for m in metrics)  # a metric name holds no regex syntax
    parts = [str(m) for m in (Matcher("__name__", "=~", names), *lane_matchers(lane))]
    return f"{{{','.join(parts)}}}[{duration(span_s)}]"


def window_series_count(metric: str, lane: str, window_s: float) -> str:
    """How many series of ``metric`` the lane had during the window (say, its GPUs)."""
    return f"count(max_over_time({selector(metric, *lane_matchers(lane))}[{duration(window_s)}]))"


def window_gpu_names(lane: str, window_s: float) -> str:
    """The lane's GPUs during the window by name and ``simulated`` (``gpu_info``), with their count."""
    sel = selector("gpu_info", *lane_matchers(lane))
    return f"count by (name, simulated) (max_over_time({sel}[{duration(window_s)}]))"


def published_step_figures(lane: str, run_id: str, concurrency: int, lookback_s: float,
                           rate: float | None = None) -> str:
    """The exact figures the load generator published for one finished step (``loadgen_step_figure``), the
    last value of each within ``lookback_s`` of the evaluation time. The load generator labels its own series
    with ``node`` exactly where the lane names one, so a bare key asks for no ``node`` (``node=""``): the same
    lane name on a node in the same run published its own figures at the same rung, and its tail values would
    join this lane's. A rung is also its rate (``rate_rps``, empty for a closed rung: ``core.arrivals``)."""
    node, _ = split_key(lane)
    own = () if node is not None else (Matcher("node", "=", ""),)
    sel = selector("loadgen_step_figure", *lane_matchers(lane), *own, run_id=run_id, concurrency=str(concurrency),
                   rate_rps=rate_label(rate))
    return f"last_over_time({sel}[{duration(lookback_s)}])"


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
