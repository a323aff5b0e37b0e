"""Replays a dashboard's queries against a finished session's Prometheus storage, as Grafana would send them.

``ReplayPrometheus`` starts a Prometheus with no targets and no rules on a copy of the run folder's TSDB
(``runs/<id>/prometheus/data``: the session's own Prometheus has stopped when the session ends, and a running
one holds the storage's lock). ``replay`` then substitutes Grafana's variables in every target (``$node``,
``$lane`` and ``$instance`` as "All", ``.*``, which also matches the series of lanes that name no node: they
have no ``node`` label; ``$run_id`` the session's run, ``$__rate_interval`` four scrapes and a margin,
``$__range`` the session's span; ``values`` overrides any, say ``{"node": "gpu1"}``) and asks this one
Prometheus (that every target names the ``${datasource}`` variable, which resolves to the provisioned
Prometheus, is ``resolved_datasource``'s check, made per target by the tests): a range query over the
session's time range (step 1 s) for range targets, an instant query at its end for instant ones. A target
"returns data" when at least one series has a finite value.
"""

from __future__ import annotations

import json
import math
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from satbench.dashboards.overview import DATASOURCE, panel_targets, variable_queries
from satbench.runtimes.processes import ProcessSet
from satbench.session.prometheus import find_prometheus, render_prometheus_config, start_prometheus
from testkit.net import free_port

RATE_INTERVAL = "5s"  # Grafana: max(4 x the datasource's 1 s scrape interval, the step + one scrape)
ALL = ".*"  # the allValue of the node, lane and instance variables


@dataclass(frozen=True)
class Window:
    start: float
    end: float
    run_id: str

    @property
    def range(self) -> str:
        return f"{max(1, math.ceil(self.end - self.start))}s"

    @classmethod
    def of_run(cls, run_dir: Path) -> Window:
        """From the first warm-up to 15 s past the later of the walk's end and the answer's: the recommender's
        series begin when it answers, which a loaded host (a parallel suite) can put well after the walk."""
        manifest = json.loads((run_dir / "manifest.json").read_text())
        ended = manifest["finished_at"]
        doc = run_dir / "recommendations.json"
        if doc.is_file():
            stamp = json.loads(doc.read_text())["generated_at"].replace("Z", "+00:00")
            ended = max(ended, datetime.fromisoformat(stamp).timestamp() + 1)  # stamped to the second
        return cls(manifest["steps"][0]["warmup_start"] - 5, ended + 15, manifest["run_id"])


@dataclass
class TargetResult:
    panel: str
    ref: str
    expr: str
    query: str
    instant: bool
    series: list[dict[str, str]] = field(default_factory=list)

    @property
    def has_data(self) -> bool:
        return bool(self.series)


def substitute(expr: str, window: Window, values: dict[str, str] | None = None) -> str:
    """``expr`` with every Grafana variable replaced as Grafana would (``values`` overrides the defaults)."""
    table = {"__rate_interval": RATE_INTERVAL, "__range": window.range, "node": ALL, "lane": ALL, "instance": ALL,
             "run_id": window.run_id, **(values or {})}
    out = expr
    for name in sorted(table, key=len, reverse=True):  # $run_id before a hypothetical $run
        out = out.replace(f"${name}", table[name])
    left = re.findall(r"\$\w+", out)
    assert not left, f"unsubstituted variables {left} in {expr}"
    return out


def _finite(value: str) -> bool:
    return value not in ("NaN", "+Inf", "-Inf")


def _series_with_data(result: list[dict[str, Any]], instant: bool) -> list[dict[str, str]]:
    if instant:
        return [s["metric"] for s in result if _finite(s["value"][1])]
    return [s["metric"] for s in result if any(_finite(v[1]) for v in s.get("values", []))]


class ReplayPrometheus:
    """A Prometheus on a copy of a run's TSDB, and the queries a dashboard sends it."""

    def __init__(self, url: str, client: httpx.Client) -> None:
        self.url = url
        self.client = client

    def query(self, query: str, window: Window, *, instant: bool) -> list[dict[str, str]]:
        if instant:
            resp = self.client.get(f"{self.url}/api/v1/query", params={"query": query, "time": window.end})
        else:
            resp = self.client.get(f"{self.url}/api/v1/query_range",
                                   params={"query": query, "start": window.start, "end": window.end, "step": "1s"})
        assert resp.status_code == 200, f"{query}: {resp.text[:300]}"
        return _series_with_data(resp.json()["data"]["result"], instant)

    def label_values(self, grafana_query: str, window: Window, values: dict[str, str] | None = None) -> list[str]:
        """The values Grafana's ``label_values(selector, label)`` lists over the window."""
        m = re.fullmatch(r"label_values\((.+), (\w+)\)", substitute(grafana_query, window, values))
        assert m, grafana_query
        selector, label = m.groups()
        resp = self.client.get(f"{self.url}/api/v1/series",
                               params={"match[]": selector, "start": window.start, "end": window.end})
        assert resp.status_code == 200, resp.text[:300]
        return sorted({s[label] for s in resp.json()["data"] if label in s})


@contextmanager
def replay_prometheus(run_dir: Path, tmp: Path) -> Iterator[ReplayPrometheus]:
    folder = tmp / "replay-prometheus"
    shutil.copytree(run_dir / "prometheus", folder)
    config = render_prometheus_config([], [], 1.0)  # no targets, no rules: read the stored samples only
    processes = ProcessSet(tmp / "replay-logs")
    try:
        prom = start_prometheus(processes, find_prometheus("prometheus"), folder, config, port=free_port(),
                                timeout_s=30)
        with httpx.Client(timeout=15) as client:
            yield ReplayPrometheus(prom.url, client)
    finally:
        processes.stop_all()


def resolved_datasource(dashboard: dict[str, Any], ref: dict[str, str]) -> dict[str, str]:
    """The datasource a panel or target reference resolves to under provisioning: ``${datasource}`` is the
    datasource variable, whose stored option names the provisioned datasource."""
    if ref != DATASOURCE:
        return ref
    (var,) = [v for v in dashboard["templating"]["list"] if v["name"] == "datasource"]
    return {"type": var["query"], "name": var["current"]["text"]}


def replay(dashboard: dict[str, Any], prom: ReplayPrometheus, window: Window,
           values: dict[str, str] | None = None) -> list[TargetResult]:
    out = []
    for panel, target in panel_targets(dashboard):
        query = substitute(target["expr"], window, values)
        instant = bool(target.get("instant")) and not target.get("range", True)
        out.append(TargetResult(panel["title"], target["refId"], target["expr"], query, instant,
                                prom.query(query, window, instant=instant)))
    for annotation in dashboard["annotations"]["list"]:
        if "expr" in annotation:  # a Prometheus annotation: Grafana asks it as a range query
            query = substitute(annotation["expr"], window, values)
            out.append(TargetResult(f"annotation {annotation['name']}", "annotation", annotation["expr"], query,
                                    False, prom.query(query, window, instant=False)))
    return out


def variable_values(dashboard: dict[str, Any], prom: ReplayPrometheus, window: Window,
                    values: dict[str, str] | None = None) -> dict[str, list[str]]:
    """What each query variable lists, the variables it reads as ``values`` (else All)."""
    return {name: prom.label_values(q, window, values) for name, q in variable_queries(dashboard).items()}
