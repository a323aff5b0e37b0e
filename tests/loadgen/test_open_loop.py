"""Open-loop rungs over real HTTP against the simulator: every request timed from its intended send, so a
stall of the server cannot hide latency (coordinated omission).

The simulator's engine pauses 1 s every 5 s (an ``engine_pause`` fault: no step runs, every slot and the
queue wait). A constant-rate rung sends on schedule whatever the server does; each request meant to be sent
during a pause waits at least until the pause ends, and its TTFT counted from its intended send says so. The
truth is the fault's own schedule, read from the simulator's clock, never the load generator's figures.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from satbench.core.records import read_records
from satbench.core.step_figures import compute_step_figures
from satbench.loadgen.config import LoadgenConfig
from satbench.loadgen.runner import LadderRunner
from satbench.report.rates import co_sentence
from satbench.simulator.profile import FaultSpec
from testkit.sim import InProcessSimulator

PAUSE_S, EVERY_S = 1.0, 5.0


@pytest.mark.slow
def test_a_server_stall_lands_on_every_request_scheduled_during_it(tmp_path: Path) -> None:
    sim = InProcessSimulator("dense")
    sim.profile = dataclasses.replace(sim.profile, faults=(
        FaultSpec("engine_pause", start_s=0.0, delay_s=PAUSE_S, every_s=EVERY_S),))
    with sim:
        runtime = sim.app.runtime
        started_wall = runtime.time_map.offset + runtime.time_map.started_mono
        config = LoadgenConfig.model_validate({
            "lanes": [{"name": "dense", "url": sim.url}], "ladder": {"concurrency": [2], "extend": False},
            "warmup_s": 0.5, "min_window_s": 11.0, "max_window_s": 11.0, "min_requests": 2,
            "drain_timeout_s": 5.0, "max_loop_lag_s": 1.0, "progress": False,
            "workload": {"output_tokens": {"value": 16}, "prompt_tokens": {"value": 32}},
            "arrival": {"process": "constant", "rates": [6.0], "max_window_s": 11.0, "warmup_s": 0.5},
            "objectives": {"ttft_s": 2.0}})
        runner = LadderRunner(config, tmp_path, run_id="20261204T000000Z-co")
        try:
            manifest = asyncio.run(runner.run())
        finally:
            runner.close()
    records = list(read_records(tmp_path / "records.jsonl", strict=True))
    windows = {(w.concurrency, w.rate_rps): w for w in manifest.windows("dense")}
    open_window, closed_window = windows[(0, 6.0)], windows[(2, None)]
    opened = [r for r in records if r.rate_rps == 6.0 and open_window.contains(r.intended_at or -1.0) and r.ok]
    assert len(opened) >= 50  # 66 meant in an 11 s window

    def pause_end(t: float) -> float | None:
        """The end of the pause the engine was in at wall time ``t`` (None: it was running)."""
        since = t - started_wall
        phase = since % EVERY_S
        return t + PAUSE_S - phase if phase < PAUSE_S else None

    in_pause = [(r, end) for r in opened if (end := pause_end(r.intended_at or 0.0)) is not None]
    assert len(in_pause) >= 8  # two pauses at 6 requests/s
    for rec, end in in_pause:  # each waited at least until its pause ended, counted from its intended send
        waited = (rec.ttft_s or 0.0) + rec.lag_s
        assert waited >= end - (rec.intended_at or 0.0) - 0.02, (rec.request_id, waited)
    open_fig = compute_step_figures(records, open_window)
    closed_fig = compute_step_figures(records, closed_window)
    stalled_share = len(in_pause) / len(opened)
    assert stalled_share > 0.1  # a fifth of the schedule falls in a pause
    assert open_fig.ttft_intended_s.p99 is not None and open_fig.ttft_intended_s.p99 >= 0.8 * PAUSE_S
    # the closed loop on the same server: its users stop sending during a pause, so fewer of its requests see it
    closed_hit = [r for r in records if r.concurrency == 2 and r.rate_rps is None and r.ok
                  and closed_window.contains(r.sent_at) and (r.ttft_s or 0.0) >= 0.5 * PAUSE_S]
    closed_all = [r for r in records if r.concurrency == 2 and r.rate_rps is None and r.ok
                  and closed_window.contains(r.sent_at)]
    assert len(closed_hit) / len(closed_all) < stalled_share
    said = co_sentence([closed_fig], 2, [open_fig], 6.0)
    assert said is not None and "coordinated omission" in said
    assert f"{closed_fig.ttft_s.p95 * 1000:.0f} ms" in said and f"{open_fig.ttft_intended_s.p95 * 1000:.0f} ms" in said
    print(f"\nopen loop at 6/s: {len(in_pause)} of {len(opened)} requests scheduled in a pause, TTFT p99 from "
          f"intended {open_fig.ttft_intended_s.p99 * 1000:.0f} ms; closed loop c=2: {len(closed_hit)} of "
          f"{len(closed_all)} requests waited half a pause, TTFT p99 {closed_fig.ttft_s.p99 * 1000:.0f} ms")
