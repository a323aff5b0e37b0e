"""The exporter under runtime faults: a slow or disabled /metrics, a disabled /slots, a runtime that is gone.

Each scrape still answers within the exporter's budget (plus slack for a loaded machine), only the broken
source's ``runtime_<source>_up`` drops to 0, and the runtime itself stays ``runtime_up 1`` while /health
answers. When the runtime process is gone, ``runtime_up`` is 0 and the scrape still answers.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from satbench.exporter.server import ExporterConfig, build_collector
from testkit.sim import SimulatorProcess
from tests.faults.conftest import set_faults

BUDGET_S = 0.5
SLACK_S = 2.0
WHOLE = {"start_s": 0.0, "duration_s": 120.0, "rate": 1.0}


@pytest.fixture
def scrape(sim: SimulatorProcess) -> Iterator[Any]:
    # nothing cached, nothing shared: each scrape reads the node, so it sees a fault set just before it
    collector = build_collector(ExporterConfig(runtime_url=sim.url, gpu="none", budget_s=BUDGET_S,
                                               props_ttl_s=0.0, read_max_age_s=0.0))
    registry = CollectorRegistry()
    registry.register(collector)

    def once() -> tuple[CollectorRegistry, float]:
        t0 = time.perf_counter()
        list(registry.collect())
        return registry, time.perf_counter() - t0

    try:
        yield once
    finally:
        set_faults(sim.url)
        collector.close()


@pytest.mark.slow
@pytest.mark.parametrize(("fault", "down"), [
    ({"kind": "slow_metrics", "delay_s": 3.0}, "metrics"),
    ({"kind": "metrics_disabled"}, "metrics"),
    ({"kind": "slots_disabled"}, "slots"),
])
def test_one_broken_source_drops_only_itself(sim: SimulatorProcess, scrape: Any, fault: dict[str, Any],
                                             down: str) -> None:
    registry, _ = scrape()
    assert registry.get_sample_value(f"runtime_{down}_up") == 1.0
    set_faults(sim.url, {**WHOLE, **fault})
    registry, took = scrape()
    assert took < BUDGET_S + SLACK_S, f"a scrape took {took:.2f} s with a {BUDGET_S} s budget"
    assert registry.get_sample_value(f"runtime_{down}_up") == 0.0
    assert registry.get_sample_value("runtime_up") == 1.0
    other = "slots" if down == "metrics" else "metrics"
    assert registry.get_sample_value(f"runtime_{other}_up") == 1.0


def test_a_runtime_that_is_gone_is_down_and_the_scrape_still_answers() -> None:
    with SimulatorProcess("dense") as gone:
        url = gone.url
    collector = build_collector(ExporterConfig(runtime_url=url, gpu="none", budget_s=BUDGET_S))
    registry = CollectorRegistry()
    registry.register(collector)
    try:
        t0 = time.perf_counter()
        assert registry.get_sample_value("runtime_up") == 0.0
        assert time.perf_counter() - t0 < BUDGET_S + SLACK_S
        assert registry.get_sample_value("runtime_metrics_up") == 0.0
    finally:
        collector.close()
