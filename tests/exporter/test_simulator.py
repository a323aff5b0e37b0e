"""The exporter against the simulator: parsing its endpoints, and PromQL figures against its ground truth.

The integration test drives a closed loop of 6 users on the 4-slot dense lane for 6 s, then 3 users for
6 s, while a real Prometheus scrapes the exporter every 100 ms. Over a 10 s window spanning both phases
(true occupancy ~0.875, mean queue ~1), the occupancy, queue depth and token rate that PromQL computes from
the exporter's series must agree within 5% with what ``/sim/truth`` says happened in the same window:
counters against the continuous truth, sampled gauges against the truth of their own scrapes (the queue
flips between 1 and 2 every few tens of ms, so 100 samples of it carry several % of sampling noise that is
no fault of the exporter; the continuous truth is checked at 10%). A sample is stamped with its scrape's
start, but the exporter reads the runtime a few ms later, when the scrape reaches it: each sample must lie
within the true range over its scrape (start to start + ``scrape_duration_seconds``), 95% of them at
least, and the sampled means are compared with the truth clamped to those ranges.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry

from satbench.exporter.promconfig import EXPORTER_JOB, ScrapeTarget, render_prometheus_config
from satbench.exporter.server import ExporterConfig, build_collector, serve
from testkit.prom import PrometheusProcess
from testkit.sim import SimulatorProcess
from tests.exporter.sim_truth import state_range, window_truth

pytestmark = pytest.mark.slow

PROM_DIR = Path(__file__).resolve().parents[2] / "prometheus"


def test_exporter_reads_the_simulator() -> None:
    with SimulatorProcess("moe") as sim:
        collector = build_collector(ExporterConfig(runtime_url=sim.url, gpu="none"))
        registry = CollectorRegistry()
        registry.register(collector)
        prompt = "the same opening words, sent twice, so the second prefill is served by the prompt cache"
        for _ in range(2):
            httpx.post(sim.url + "/completion", json={"prompt": prompt, "n_predict": 8, "ignore_eos": True,
                                                      "id_slot": 0}, timeout=30)
        value = registry.get_sample_value
        try:
            slots = int(httpx.get(sim.url + "/props", timeout=5).json()["total_slots"])
            assert value("runtime_up") == 1
            assert value("runtime_slots", {"state": "idle"}) == slots
            assert value("runtime_slots_configured") == slots
            assert value("runtime_queue_depth") == 0
            assert value("runtime_output_tokens_total") == 16
            cached, prefilled = value("runtime_prompt_tokens_cached_total"), value("runtime_prompt_tokens_total")
            assert cached > 0 and prefilled > 0  # counted apart, as llama-server does
            assert value("gpu_up", {"source": "simulator"}) == 1
            assert value("gpu_up", {"source": "nvml"}) is None  # --gpu none
            assert value("gpu_memory_used_bytes", {"gpu": "sim0", "simulated": "true"}) > 0
            assert value("gpu_memory_total_bytes", {"gpu": "sim0", "simulated": "true"}) > 1e9
            assert value("runtime_process_up") == 1  # the simulator process, found by its port
            assert value("runtime_process_resident_memory_bytes") > 1e6
        finally:
            collector.close()


def raw_samples(prom: PrometheusProcess, selector: str, t1: float) -> dict[float, float]:
    """The raw samples of ``selector`` over the 10 s before ``t1``, summed across series, by timestamp."""
    out: dict[float, float] = {}
    for series in prom.query(f"{selector}[10s]", t1):
        for ts, value in series["values"]:
            out[float(ts)] = out.get(float(ts), 0.0) + float(value)
    return out


class ClosedLoop:
    """``users`` threads, each sending its next non-streaming completion as soon as the previous one ends."""

    def __init__(self, url: str, users: int, n_predict: int = 48) -> None:
        self.url = url
        self.stops = [threading.Event() for _ in range(users)]
        self.threads = [
            threading.Thread(target=self._user, args=(s, i), daemon=True) for i, s in enumerate(self.stops)
        ]
        self.n_predict = n_predict
        self.errors: list[str] = []

    def _user(self, stop: threading.Event, i: int) -> None:
        body = {
            "prompt": f"user {i} says hello",
            "n_predict": self.n_predict,
            "ignore_eos": True,
            "user": f"u{i}",
        }
        with httpx.Client(timeout=30) as client:
            while not stop.is_set():
                resp = client.post(self.url + "/completion", json=body)
                if resp.status_code != 200:
                    self.errors.append(f"{resp.status_code} {resp.text[:100]}")

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def stop(self, users: int | None = None) -> None:
        for event in self.stops[: users if users is not None else len(self.stops)]:
            event.set()

    def join(self) -> None:
        for thread in self.threads:
            thread.join(timeout=30)


def test_promql_figures_match_simulator_truth() -> None:
    with SimulatorProcess("dense") as sim:
        slots = int(httpx.get(sim.url + "/props", timeout=5).json()["total_slots"])
        # scraped every 0.1 s: scrapes share a read within half that, so each sample is its own scrape's read
        collector = build_collector(ExporterConfig(runtime_url=sim.url, gpu="none", read_max_age_s=0.05))
        server = serve(collector)
        try:
            target = ScrapeTarget(EXPORTER_JOB, f"127.0.0.1:{server.port}", {"lane": "dense", "node": "sim"})
            config = render_prometheus_config([target], [], scrape_interval_s=0.1)
            with PrometheusProcess(config) as prom:
                prom.wait_for_scrapes('runtime_up{lane="dense"} == 1')
                load = ClosedLoop(sim.url, users=6)
                start = time.time()
                load.start()
                time.sleep(6.0)
                load.stop(3)
                time.sleep(6.0)
                load.stop()
                load.join()
                t0, t1 = start + 1.0, start + 11.0
                time.sleep(max(0.0, t1 + 0.6 - time.time()))  # let the last in-window scrape land

                def at_t1(promql: str) -> float:
                    value = prom.query_value(promql, time=t1)
                    assert value is not None, promql
                    return value

                occupancy = at_t1('avg_over_time(runtime_batch_occupancy_ratio{lane="dense"}[10s])')
                decode_occupancy = at_t1(
                    'increase(runtime_busy_slot_decodes_total{lane="dense"}[10s])'
                    ' / increase(runtime_decode_steps_total{lane="dense"}[10s])'
                    ' / runtime_slots_configured{lane="dense"}'
                )
                queue = at_t1('avg_over_time(runtime_queue_depth{lane="dense"}[10s])')
                token_rate = at_t1('rate(runtime_output_tokens_total{lane="dense"}[10s])')
                busy_slots = at_t1('sum(avg_over_time(runtime_slots{lane="dense",state!="idle"}[10s]))')
                queue_samples = raw_samples(prom, 'runtime_queue_depth{lane="dense"}', t1)
                busy_samples = raw_samples(prom, 'runtime_slots{lane="dense",state!="idle"}', t1)
                scrape_s = raw_samples(prom, f'scrape_duration_seconds{{job="{EXPORTER_JOB}"}}', t1)
            truth_doc = httpx.get(sim.url + "/sim/truth", params={"capacity": "0"}, timeout=10).json()
        finally:
            server.close()
            collector.close()
    assert not load.errors, load.errors[:3]
    records = truth_doc["requests"]
    truth = window_truth(records, t0, t1, slots)
    # Each sample against the truth of its own scrape: the exporter read the runtime somewhere between the
    # sample's stamp (the scrape's start) and the scrape's end.
    matched_busy, matched_queue, inside = [], [], 0
    for ts, queue_value in sorted(queue_samples.items()):
        (b_lo, b_hi), (q_lo, q_hi) = state_range(records, ts, ts + scrape_s.get(ts, 0.0))
        busy_value = busy_samples.get(ts, 0.0)
        matched_busy.append(min(max(busy_value, b_lo), b_hi))
        matched_queue.append(min(max(queue_value, q_lo), q_hi))
        inside += b_lo <= busy_value <= b_hi and q_lo <= queue_value <= q_hi
    sampled_busy = sum(matched_busy) / len(matched_busy)
    sampled_queue = sum(matched_queue) / len(matched_queue)
    figures = {
        "occupancy": (occupancy, sampled_busy / slots, 0.05),
        "busy slots": (busy_slots, sampled_busy, 0.05),
        "queue depth": (queue, sampled_queue, 0.05),
        "decode-weighted occupancy": (decode_occupancy, truth.occupancy_ratio, 0.05),
        "output tokens/s": (token_rate, truth.output_tokens / (t1 - t0), 0.05),
        "occupancy (continuous)": (occupancy, truth.occupancy_ratio, 0.10),
        "queue depth (continuous)": (queue, truth.queue_depth, 0.10),
    }
    report = ", ".join(f"{k}: {got:.4g} vs truth {want:.4g}" for k, (got, want, _) in figures.items())
    assert truth.requests > 50 and len(queue_samples) > 50, report
    assert inside >= 0.95 * len(queue_samples), f"{inside} of {len(queue_samples)} samples match their scrape's truth"
    assert 0.7 < truth.occupancy_ratio < 0.97 and 0.5 < truth.queue_depth < 1.5, f"load shape off: {report}"
    for name, (got, want, rel) in figures.items():
        assert got == pytest.approx(want, rel=rel), f"{name}: {report}"
