"""Acceptance on loopback: simulator lanes ``dense`` and ``moe``, the load generator, one exporter per lane,
a real Prometheus scraping them every second, and the recommender service, which the load generator tells
about the run when it ends (``POST /runs``).

The recommended concurrency of each lane must equal the one the simulator's analytic capacity
(``/sim/truth``) implies under the same policy (the same ``analyze_lane`` walk over the analytic points),
and the two lanes must get different answers. Workload: 64 prompt and 64 output tokens, ladder 1, 2, 4, 8.
Analytic throughput (tok/s) of that workload at real speed: dense 224, 424, 765, 765 (4 slots: saturated
at 4); moe 85, 121, 159, 195 (gains +42 %, +31 %, +23 % per doubling: still paying at 8). Under the default
policy (10 % per doubling) the answers are dense 4 (``throughput_plateau``) and moe 8 (``ladder_top``).
64 output tokens (0.34 s a request at c=4): at c=4 a slot idles while its user turns round between requests,
which c=8 hides, so the measured dense 4 -> 8 doubling gains the turnaround's share of a request. A loaded
machine's turnaround was 10-25 ms: with 16 tokens (0.10 s) it read +8 % against the 10 % threshold, with 32
(0.18 s) +9.6 % [+7.1 %, +12.2 %] once in CI (undecided); with 64 it is under half the threshold.
Known limits, both measured: (1) on a heavily loaded machine the simulator's steps and the client's SSE
handling slow down, so measured throughput falls below the analytic one (moe c=2 measured 66 tok/s by
the exact records against 83 analytic at load average ~4 on 2 cores; the answer still held); (2) the store
samples the throughput every second, and a loaded machine's throughput wanders, so a doubling's interval can
still straddle the policy's gain when the walk's longest window ends: the answer is then ``undecided``, which
passes only where that interval holds the analytic gain and the answer is the analytic one.

The policy is the default but for its latency objectives on the stream (``itl_p95_s``, ``tbt_p99_s``), which
are raised to 1 s: the test is about throughput capacity, and the moe profile puts its c=8 rung on those
objectives' boundary. Its step cost saturates once a batch activates every expert, so any step holding a
64-token prefill costs ~135 ms (five prefills in one step ~250 ms, seven beside one decode ~290 ms); at c=8
seven other users prefill once in each user's stream, so the pause p99 lands at 180-290 ms by how
arrivals coincide, against the default 250 ms objective (one CI run measured 286 ms and answered
``decode_starvation`` at 4). The analytic walk does not model pauses, so an objective both sides of that
range would make the expected answer a coin toss; at 1 s the simulator's worst step is 3x inside it.
Starvation is tested where it is the point (``test_live_verdicts``, ``test_sources_agree``). The recommender
gets the run folder (``--runs-dir``) so a window Prometheus scraped too rarely on a loaded machine is taken
from the records, as in production.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from satbench.answer.analysis import analyze_lane
from satbench.answer.policy import SLO, Policy
from satbench.core.figures import Quantiles, StepFigures
from satbench.core.manifest import new_run_id
from satbench.core.statistics import gain_per_doubling
from satbench.loadgen.config import LoadgenConfig
from satbench.loadgen.runner import run_ladder
from satbench.recommender.app import create_app
from satbench.recommender.settings import RecommenderSettings
from testkit.net import free_port, wait_http
from testkit.prom import PrometheusProcess, prometheus_binary
from testkit.sim import SimulatorProcess
from tests.recommender.server import serve

REPO = Path(__file__).resolve().parents[2]
LADDER = [1, 2, 4, 8]
PROMPT_TOKENS, OUTPUT_TOKENS = 64, 64
# the capacity curve is the point: the moe profile's prefills hold its decodes ~10x their step (every prompt
# activates most experts), which the default policy calls decode starvation; judged by time alone here. That
# includes the shape's 0.1 s floor (min_pause_excess_s): a 64-token prefill holds a moe decode ~100 ms beyond
# its step, two in one step ~140 ms (elasticity ~0.5 by the step cost), but on a loaded machine the measured
# elasticity once read past 0.8 ("grows with the prompt"), the 0.1 s floor bound, and moe was answered c=1
POLICY = Policy(slo=SLO(itl_p95_s=1.0, tbt_p99_s=1.0), max_pause_ratio=None, min_pause_excess_s=1.0)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]


@contextlib.contextmanager
def exporter(runtime_url: str) -> Iterator[int]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "satbench.cli", "exporter", "--runtime-url", runtime_url,
                             "--port", str(port)], cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        wait_http(f"http://127.0.0.1:{port}/metrics", timeout_s=30)
        yield port
    finally:
        proc.kill()
        proc.wait(timeout=10)


def prometheus_config(loadgen_port: int, exporters: dict[str, int]) -> str:
    runtime = "".join(
        f"      - targets: ['127.0.0.1:{port}']\n        labels: {{lane: '{lane}', node: 'node-{lane}'}}\n"
        for lane, port in exporters.items())
    return (
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n"
        f"  - job_name: loadgen\n    static_configs:\n      - targets: ['127.0.0.1:{loadgen_port}']\n"
        f"  - job_name: runtime\n    static_configs:\n{runtime}"
    )


def analytic_points(sim_url: str) -> list[dict[str, float]]:
    """The simulator's closed-form capacity at each rung of the ladder."""
    truth = httpx.get(f"{sim_url}/sim/truth", timeout=30, params={
        "prompt_tokens": PROMPT_TOKENS, "output_tokens": OUTPUT_TOKENS,
        "concurrency": ",".join(map(str, LADDER)), "since": 1e12}).json()
    return list(truth["capacity"]["points"])


def analytic_answer(points: list[dict[str, float]], policy: Policy) -> tuple[int | None, str | None]:
    """The recommendation the simulator's closed-form capacity implies, by the recommender's own walk."""
    steps = [
        StepFigures(lane="truth", concurrency=p["concurrency"], window_s=1.0, requests=10**6, errors=0,
                    throughput_tok_s=p["throughput_tok_s"], requests_per_s=p["requests_per_s"],
                    ttft_s=Quantiles(p["ttft_s"], p["ttft_s"], p["ttft_s"]),
                    itl_s=Quantiles(p["itl_s"], p["itl_s"], p["itl_s"]),
                    latency_s=Quantiles(p["e2e_s"], p["e2e_s"], p["e2e_s"]), jain=1.0)
        for p in points
    ]
    answer = analyze_lane("truth", steps, policy)
    return answer.recommended_concurrency, answer.binding_constraint


@pytest.mark.skipif(prometheus_binary() is None, reason="prometheus is not installed")
def test_recommendations_match_the_simulators_analytic_capacity(tmp_path: Path) -> None:
    loadgen_port = free_port()
    with contextlib.ExitStack() as stack:
        sims = {lane: stack.enter_context(SimulatorProcess(lane)) for lane in ("dense", "moe")}
        exporters = {lane: stack.enter_context(exporter(sim.url)) for lane, sim in sims.items()}
        prom = stack.enter_context(PrometheusProcess(prometheus_config(loadgen_port, exporters)))
        runs_dir = tmp_path / "runs"
        run_id = new_run_id()
        settings = RecommenderSettings(prometheus_url=prom.url, refresh_interval_s=3600, runs_dir=runs_dir,
                                       policy=POLICY)
        recommender_url = stack.enter_context(serve(create_app(settings)))
        config = LoadgenConfig.model_validate({
            "lanes": [{"name": lane, "url": sim.url, "api": "llamacpp", "model": "sim"}
                      for lane, sim in sims.items()],
            # the capacity curve is the point, not the drift check: no re-measures (four rungs more)
            "ladder": {"concurrency": LADDER, "drift_reference": False},
            "workload": {"prompt_tokens": {"value": PROMPT_TOKENS},
                         "output_tokens": {"value": OUTPUT_TOKENS}},
            "warmup_s": 1.0, "min_window_s": 8.0, "max_window_s": 10.0, "drain_timeout_s": 3.0,
            "metrics_port": loadgen_port, "recommender_url": recommender_url, "progress": False,
            # the client shares this process with the recommender's server thread and the test's own work:
            # on a loaded 2-core machine its users idled 5.1% once (against the default 5%), which voided a
            # rung. 10% still keeps the offered concurrency within a tenth of each rung: dense's plateau (0%
            # from 4 to 8) and moe's +28% at 8 stay far from the 10% threshold
            "max_loop_lag_s": 1.0, "max_idle_share": 0.10,
            # as `satbench run` walks it: a rung whose gain straddles the policy's goes on (up to 24 s) instead of
            # being answered undecided; on a loaded machine moe's +28 % at c=8 once read [+8 %, +51 %] in 10 s
            "decide_gain": POLICY.min_gain_per_doubling, "decide_max_window_s": 24.0,
        })
        manifest = asyncio.run(run_ladder(config, runs_dir / run_id, run_id=run_id))
        registered = httpx.get(f"{recommender_url}/runs/{manifest.run_id}", timeout=60).json()
        assert registered["analyzed"], registered
        doc = httpx.get(f"{recommender_url}/recommendations", timeout=10).json()
        points = {lane: analytic_points(sim.url) for lane, sim in sims.items()}
    expected = {lane: analytic_answer(p, POLICY) for lane, p in points.items()}

    assert doc["source"]["kind"] == "prometheus" and doc["run_id"] == manifest.run_id
    assert doc["policy"] == POLICY.model_dump(mode="json")
    assert expected == {"dense": (4, "throughput_plateau"), "moe": (8, "ladder_top")}
    for lane, (recommended, binding) in expected.items():
        answer = doc["lanes"][lane]
        status = "unsaturated" if binding == "ladder_top" else "ok"
        if answer["status"] == "undecided":
            # the walk measured as long as it may and the doubling's interval still straddles the policy's gain
            # (moe's +23 % at 4 -> 8 once read [+7 %, +47 %] through the store's 1 s samples when this test ran
            # beside four others at the start of a clean clone's make test): honest only where the interval
            # holds the analytic gain and the answer is the analytic one
            status = "undecided"
            doubling = answer["undecided"]
            tput = {p["concurrency"]: p["throughput_tok_s"] for p in points[lane]}
            truth_gain = gain_per_doubling(doubling["smaller"], tput[doubling["smaller"]], doubling["larger"],
                                           tput[doubling["larger"]])
            low, high = doubling["interval"]
            assert doubling["larger"] == recommended and low <= truth_gain <= high, (lane, doubling, truth_gain)
        assert (answer["status"], answer["recommended_concurrency"], answer["binding_constraint"]) == (
            status, recommended, binding), (lane, answer["reason"], answer["notes"],
                                          [(s["concurrency"], s["throughput_tok_s"], s["throughput_ci_tok_s"],
                                            s["unusable_reason"], s["violations"]) for s in answer["steps"]])
    assert doc["lanes"]["dense"]["recommended_concurrency"] != doc["lanes"]["moe"]["recommended_concurrency"]
