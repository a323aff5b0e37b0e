"""A hostile label value cannot change a query's meaning, checked against a real Prometheus.

A private registry exposes one probe series per hostile lane name (value = its index) and one for
``dense`` (value 100); a real Prometheus scrapes it. For every hostile value, the selector and the window
builders of ``core.promql`` must parse, and select exactly the series whose label equals that value:
never ``dense``, never all of them, never an error.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from satbench.core import promql
from testkit.prom import PrometheusProcess, prometheus_binary

HOSTILE = [
    'x"}) or vector(1) #', 'dense" or lane="moe', "a\\", 'b\\"', "new\nline", "tab\there",
    '{lane=~".*"}', "' or 1=1 --", "}[5m]", "dense,lane!=\"\"", "ünï€ødé", "  dense  ", "$(reboot)",
]

pytestmark = [pytest.mark.skipif(prometheus_binary() is None, reason="the prometheus binary is not installed"),
              pytest.mark.slow]


@pytest.fixture(scope="module")
def prom() -> Iterator[PrometheusProcess]:
    registry = CollectorRegistry()
    probe = Gauge("satbench_escape_probe", "hostile label probe", ["lane"], registry=registry)
    tokens = Counter("loadgen_output_tokens_total", "tokens", ["lane", "user"], registry=registry)
    for i, value in enumerate(HOSTILE):
        probe.labels(lane=value).set(i + 1)
        tokens.labels(lane=value, user="0").inc(i + 1)
    probe.labels(lane="dense").set(100)
    tokens.labels(lane="dense", user="0").inc(100)
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        config = ("global:\n  scrape_interval: 500ms\nscrape_configs:\n  - job_name: probe\n"
                  f"    static_configs:\n      - targets: ['127.0.0.1:{server.server_port}']\n")
        with PrometheusProcess(config) as p:
            p.wait_for_scrapes('satbench_escape_probe{lane="dense"}', timeout_s=30)
            yield p
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_every_hostile_value_was_scraped_verbatim(prom: PrometheusProcess) -> None:
    seen = {r["metric"]["lane"] for r in prom.query("satbench_escape_probe")}
    assert seen == {*HOSTILE, "dense"}


@pytest.mark.parametrize("value", HOSTILE)
def test_a_hostile_value_selects_only_its_own_series(prom: PrometheusProcess, value: str) -> None:
    result = prom.query(promql.selector("satbench_escape_probe", lane=value))
    assert [(r["metric"]["lane"], float(r["value"][1])) for r in result] == [
        (value, float(HOSTILE.index(value) + 1))]
    gauge = prom.query_value(promql.window_gauge_max("satbench_escape_probe", value, 5.0))
    assert gauge == HOSTILE.index(value) + 1
    users = prom.query(promql.window_user_tokens(value, 5.0))
    assert len(users) <= 1 and all(r["metric"].get("user") == "0" for r in users)


def test_the_named_union_keeps_each_hostile_part_apart(prom: PrometheusProcess) -> None:
    parts = {f"p{i}": promql.selector("satbench_escape_probe", lane=v) for i, v in enumerate(HOSTILE)}
    result = prom.query(promql.named_union(parts))
    got = {r["metric"][promql.QUERY_LABEL]: float(r["value"][1]) for r in result}
    assert got == {f"p{i}": float(i + 1) for i in range(len(HOSTILE))}
