"""Joules per token through the real path: a fake NVML whose GPUs draw a known power curve, the exporter's
collector reading it through ``NvmlGpuReader`` at every 1 s scrape, a real Prometheus holding the series, and
the recommender's step-window queries (``fetch_run_figures``).

The truth is independent of all of it: each window's energy is the power curve integrated in closed form over
the window (``testkit.fake_nvml``), and its tokens are counted from the records' own token arrival times
(first token at ``sent_at + ttft_s``, then each ``itl_s`` gap). A device with NVML's counter is measured by the
counter's increase; one without it by its power samples, and the figures say which. The curves are drawn at
random for each seed (150-600 W, swinging by up to half of it, periods of 5-60 s), and so are the scrapes (each
up to 0.2 s early or late, one missed a lane), as a real scrape is.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pytest
from prometheus_client import CollectorRegistry

from satbench.core.manifest import RunManifest, StepWindow
from satbench.core.records import RequestRecord
from satbench.exporter.collector import RuntimeCollector
from satbench.exporter.gpu import NvmlGpuReader
from satbench.exporter.snapshot import RuntimeSnapshot
from satbench.recommender.prometheus_source import HttpxPromClient, PrometheusSourceConfig, fetch_run_figures
from testkit.backfill import BackfilledPrometheus, tools_available
from testkit.fake_nvml import FakeNvml, PowerCurve
from testkit.openmetrics import openmetrics_text
from testkit.synthetic import SyntheticLane, simulate_run

pytestmark = pytest.mark.skipif(not tools_available(), reason="prometheus and promtool are not installed")

# per lane, its GPUs: "counted" has NVML's energy counter on both, "sampled" on neither, "mixed" on one
# per lane, which of its two GPUs have NVML's energy counter: both, neither, one
NODES = {"counted": (True, True), "sampled": (False, False), "mixed": (True, False)}
LANES = tuple(SyntheticLane(name, slots=4) for name in NODES)
SEEDS = (1, 2, 3)


def _curves(rng: random.Random, counters: tuple[bool, ...]) -> tuple[PowerCurve, ...]:
    """A GPU's draw drawn at random: 150-600 W, swinging by up to half of it, over a 5-60 s period."""
    out = []
    for counter in counters:
        base = rng.uniform(150.0, 600.0)
        out.append(PowerCurve(base, rng.uniform(0.0, 0.5) * base, rng.uniform(5.0, 60.0), counter=counter))
    return tuple(out)


def _scrapes(rng: random.Random, first: float, last: float) -> list[float]:
    """A 1 s scrape as it happens: each up to 0.2 s early or late, and one scrape missed."""
    times = [first + k + rng.uniform(-0.2, 0.2) for k in range(int(last - first) + 1)]
    del times[rng.randrange(5, len(times) - 5)]
    return times


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class IdleAdapter:
    """A runtime that answers nothing: only the GPU series matter here."""

    flavour = "llamacpp"

    def fetch(self, budget_s: float, model: str | None = None) -> RuntimeSnapshot:
        return RuntimeSnapshot(flavour=self.flavour, up=False, sources=())

    def close(self) -> None:
        pass


def _gpu_series(lane: str, nvml: FakeNvml, clock: Clock, times: Sequence[float]) -> list[str]:
    """What a 1 s scrape of the lane's exporter stored: the collector read at each time, the lane label added."""
    collector = RuntimeCollector(IdleAdapter(), [NvmlGpuReader(module=nvml, clock=clock)], clock=clock)  # type: ignore[arg-type]
    registry = CollectorRegistry()
    registry.register(collector)
    kept = ("gpu_power_watts", "gpu_energy_joules_total", "gpu_info")
    lines: dict[str, list[str]] = {name: [] for name in kept}
    try:
        for t in times:
            clock.now = t
            for family in registry.collect():
                for s in family.samples:
                    if s.name in kept:
                        labels = ",".join(f'{k}="{v}"' for k, v in sorted({**s.labels, "lane": lane}.items()))
                        lines[s.name].append(f"{s.name}{{{labels}}} {s.value!r} {t:.3f}")
    finally:
        collector.close()
    return lines["gpu_power_watts"] + lines["gpu_energy_joules_total"] + lines["gpu_info"]


@dataclass(frozen=True)
class EnergyRun:
    manifest: RunManifest
    records: list[RequestRecord]
    nvml: dict[str, FakeNvml]
    figures: dict[str, list]


def _tokens_in(records: Sequence[RequestRecord], window: StepWindow) -> int:
    """Output tokens that arrived inside the window, from each record's own arrival times."""
    n = 0
    for rec in records:
        if rec.lane != window.lane or rec.concurrency != window.concurrency or rec.ttft_s is None:
            continue
        assert rec.output_tokens == len(rec.itl_s) + 1  # one token an event: the times below are every token's
        t = rec.sent_at + rec.ttft_s
        for gap in (0.0, *rec.itl_s):
            t += gap
            n += window.start <= t < window.end
    return n


@pytest.fixture(scope="module", params=SEEDS)
def energy_run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EnergyRun]:
    rng = random.Random(request.param)
    t0 = float((int(time.time()) // 3600 - 3) * 3600) + rng.uniform(0.0, 1.0)
    manifest, records = simulate_run(LANES, (1, 2, 4), t0=t0, window_s=30.0, parallel=True, seed=request.param)
    first = min(w.warmup_start or w.start for w in manifest.steps) - 5
    last = max(w.drain_end or w.end for w in manifest.steps) + 5
    clocks = {lane: Clock() for lane in NODES}
    nvml = {lane: FakeNvml(_curves(rng, counters), clocks[lane]) for lane, counters in NODES.items()}
    gpu = ["# TYPE gpu_power_watts gauge", "# TYPE gpu_energy_joules counter", "# TYPE gpu_info gauge"]
    series = {name: [] for name in ("gpu_power_watts", "gpu_energy_joules_total", "gpu_info")}
    for lane in NODES:
        for line in _gpu_series(lane, nvml[lane], clocks[lane], _scrapes(rng, first, last)):
            series[line.split("{", 1)[0]].append(line)
    text = openmetrics_text(manifest, records)
    block = [gpu[0], *series["gpu_power_watts"], gpu[1], *series["gpu_energy_joules_total"], gpu[2],
             *series["gpu_info"]]
    text = text.replace("# EOF\n", "\n".join(block) + "\n# EOF\n")
    with BackfilledPrometheus(text, tmp_path_factory.mktemp("energy")) as prom:
        async def run() -> dict[str, list]:
            async with HttpxPromClient(prom.url) as client:
                return await fetch_run_figures(client, manifest, PrometheusSourceConfig())
        yield EnergyRun(manifest, records, nvml, asyncio.run(run()))


def _truth(run: EnergyRun, window: StepWindow) -> tuple[float, int]:
    nvml = run.nvml[window.lane]
    joules = sum(nvml.joules(i, window.start, window.end) for i in range(len(nvml.devices)))
    return joules, _tokens_in(run.records, window)


@pytest.mark.parametrize(("lane", "source"), [("counted", "counter"), ("sampled", "samples"),
                                              ("mixed", "counter+samples")])
def test_joules_per_token_is_exact_to_one_percent(energy_run: EnergyRun, lane: str, source: str) -> None:
    windows = [w for w in energy_run.manifest.steps if w.lane == lane]
    steps = {s.concurrency: s for s in energy_run.figures[lane]}
    assert len(steps) == len(windows) == 3
    for window in windows:
        joules, tokens = _truth(energy_run, window)
        e = steps[window.concurrency].energy
        assert e.scope == "gpu" and e.gpu_source == source
        assert e.gpu_joules is not None and e.joules_per_token is not None and e.tokens_per_joule is not None
        assert math.isclose(e.gpu_joules, joules, rel_tol=0.01), (window.concurrency, e.gpu_joules, joules)
        assert math.isclose(e.joules_per_token, joules / tokens, rel_tol=0.01), (e.joules_per_token, joules / tokens)
        assert math.isclose(e.tokens_per_joule * e.joules_per_token, 1.0, rel_tol=1e-9)
        assert math.isclose(e.gpu_watts or 0.0, joules / window.duration_s, rel_tol=0.01)
        assert e.cpu_joules is None and e.cpu_watts is None
