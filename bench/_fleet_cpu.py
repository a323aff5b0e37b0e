"""Figure 4 of ``bench/fleet.py``: exporter, Prometheus and simulator CPU.

``satbench sim-fleet``, the exporters (``_fleet_exporters.py``, live or ``--static``) and a real Prometheus
(with or without the repo's rules), measured phase by phase from ``psutil`` CPU-time deltas and Prometheus'
own series.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _fleet_common import HTTP_TIMEOUT_S, child, cpu_s, wait_file  # noqa: E402

from satbench.exporter.promconfig import EXPORTER_JOB, ScrapeTarget, render_prometheus_config  # noqa: E402
from testkit.prom import PrometheusProcess  # noqa: E402

RULES = sorted((ROOT / "prometheus" / "rules").glob("*.yml"))


@dataclass
class Phase:
    name: str
    wall_s: float
    cpu: dict[str, float]
    scrapes: float
    up: float | None
    scrape_mean_s: float | None
    scrape_max_s: float | None
    samples_per_scrape: float | None
    head_series: float | None
    appended: float
    rule_eval_s: float | None
    rule_failures: float | None

    def pct(self, who: str) -> float:
        return 100.0 * self.cpu[who] / self.wall_s

    def per_scrape(self, who: str) -> float | None:
        return self.cpu[who] / self.scrapes if self.scrapes else None


_SELF = {
    "prometheus_tsdb_head_series": "",
    "prometheus_tsdb_head_samples_appended": "_total",
    "prometheus_rule_group_last_duration_seconds": "",
    "prometheus_rule_evaluation_failures": "_total",
    "prometheus_target_interval_length_seconds": "_count",  # one per scrape (after each target's first)
}


def _prom_self(prom: PrometheusProcess) -> dict[str, float]:
    """A few of Prometheus' own series from its ``/metrics``, each summed over its labels."""
    out: dict[str, float] = {}
    text = httpx.get(prom.url + "/metrics", timeout=HTTP_TIMEOUT_S).text
    for family in text_string_to_metric_families(text):
        if family.name in _SELF:
            wanted = family.name + _SELF[family.name]
            out[family.name] = sum(s.value for s in family.samples if s.name == wanted)
    return out


def _one(prom: PrometheusProcess, query: str, at: float) -> float | None:
    value = prom.query_value(query, at)
    return None if value is None else float(value)


def measure_phase(name: str, prom: PrometheusProcess, pids: dict[str, int], targets: int, seconds: float,
                  interval_s: float) -> Phase:
    """CPU of ``pids`` and Prometheus over ``seconds``, once every target has been scraped twice."""
    job = f'job="{EXPORTER_JOB}"'
    deadline = time.monotonic() + 60 + 3 * interval_s
    while (_one(prom, f"count(count_over_time(up{{{job}}}[1h]) >= 2)", time.time()) or 0) < targets:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{name}: not every exporter target was scraped twice in time\n{prom.log()}")
        time.sleep(0.5)
    pids = {**pids, "prometheus": prom.proc.pid if prom.proc else 0}
    before = {who: cpu_s(pid) for who, pid in pids.items()}
    self0 = _prom_self(prom)
    t0 = time.perf_counter()
    start = time.time()
    time.sleep(seconds)
    wall = time.perf_counter() - t0
    cpu = {who: cpu_s(pid) - before[who] for who, pid in pids.items()}
    self1 = _prom_self(prom)
    at = time.time()
    span = f"{max(1, round(at - start))}s"

    def delta(key: str) -> float:
        return self1.get(key, 0.0) - self0.get(key, 0.0)

    up = _one(prom, f"sum(sum_over_time(up{{{job}}}[{span}])) / sum(count_over_time(up{{{job}}}[{span}]))", at)
    return Phase(
        name, wall, cpu, delta("prometheus_target_interval_length_seconds"), up,
        _one(prom, f"avg(avg_over_time(scrape_duration_seconds{{{job}}}[{span}]))", at),
        _one(prom, f"max(max_over_time(scrape_duration_seconds{{{job}}}[{span}]))", at),
        _one(prom, f"avg(scrape_samples_scraped{{{job}}})", at),
        self1.get("prometheus_tsdb_head_series"), delta("prometheus_tsdb_head_samples_appended"),
        self1.get("prometheus_rule_group_last_duration_seconds"), delta("prometheus_rule_evaluation_failures"),
    )


def prometheus_for(exporters: dict[str, dict[str, str]], rules: bool, interval_s: float) -> PrometheusProcess:
    targets = [ScrapeTarget(EXPORTER_JOB, urlsplit(url).netloc, labels={"node": node, "lane": lane})
               for node, lanes in exporters.items() for lane, url in lanes.items()]
    config = render_prometheus_config(targets, rule_files=[], scrape_interval_s=interval_s)
    return PrometheusProcess(config, rule_files=RULES if rules else (), startup_timeout_s=60)


def measure_cpu(nodes: int, seconds: float, interval_s: float, tmp: Path) -> tuple[Phase, Phase, Phase, int]:
    sim_urls, sim_log = tmp / "sim-fleet.json", tmp / "sim-fleet.log"
    sim_argv = [sys.executable, "-m", "satbench.cli", "sim-fleet", "--nodes", str(nodes),
                "--lanes", "dense=dense,moe=moe", "--urls-file", str(sim_urls)]
    exporters_py = str(ROOT / "bench" / "_fleet_exporters.py")

    def exporters_argv(out: Path, static: bool) -> list[str]:
        return [sys.executable, exporters_py, "--urls-file", str(sim_urls), "--out", str(out),
                *(["--static"] if static else [])]

    # each exporter process (its files' stem, --static?) and the phases measured against it (name, rules?)
    plan = (("exporters", False, (("fleet", True), ("no rules", False))),
            ("static-exporters", True, (("static exporters", True),)))
    got: dict[str, Phase] = {}
    with child(sim_argv, sim_log) as sim:
        lanes = wait_file(sim_urls, sim, sim_log, timeout_s=120)
        targets = sum(len(v) for v in lanes.values())
        for stem, static, phases in plan:
            out, log = tmp / f"{stem}.json", tmp / f"{stem}.log"
            with child(exporters_argv(out, static), log) as proc:
                exporters = wait_file(out, proc, log, timeout_s=180)
                pids = {"exporters": proc.pid, "sim-fleet": sim.pid}
                for name, rules in phases:
                    print(f"  phase {name!r} ...", flush=True)
                    with prometheus_for(exporters, rules, interval_s) as prom:
                        got[name] = measure_phase(name, prom, pids, targets, seconds, interval_s)
    return got["fleet"], got["no rules"], got["static exporters"], targets
