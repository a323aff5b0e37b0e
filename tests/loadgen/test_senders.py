"""One lane's open-loop sends spread over sender processes: one schedule, one clock, one answer.

Truth comes from outside the load generator: the simulator's own log of when each request arrived
(``/sim/truth``, its clock the host's), the schedule's own seeded draw, and the verdicts a single process
gives the same lane. Two sender processes run with clocks 50 ms apart, as two hosts would; uncorrected,
half the records would say a request left 50 ms before it was meant to, or 50 ms after the server had it.
"""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from satbench.core.attainment import step_attainment
from satbench.core.manifest import RunManifest
from satbench.core.records import read_records
from satbench.core.step_figures import compute_step_figures
from satbench.loadgen.config import LoadgenConfig
from satbench.loadgen.rates import judge
from satbench.loadgen.runner import LadderRunner
from satbench.loadgen.senders import Senders
from satbench.simulator.capacity import closed_loop_capacity
from satbench.simulator.profile import load_profile
from testkit.sim import SimulatorProcess
from testkit.stream_server import StreamServer, StreamServerConfig

RATE = 40.0
LAG_S = 0.25  # the schedule lag a rung may keep in the one-answer test (a quarter of its TTFT objective)


def _walk(url: str, out: Path, rates: list[float], workers: int, window_s: float,
          max_lag_s: float = 0.05) -> RunManifest:
    config = _config(url, rates, workers, window_s, max_lag_s)
    runner = LadderRunner(config, out, run_id=f"20261206T000000Z-w{workers}")
    try:
        return asyncio.run(runner.run())
    finally:
        runner.close()


def _config(url: str, rates: list[float], workers: int, window_s: float, max_lag_s: float = 0.05) -> LoadgenConfig:
    return LoadgenConfig.model_validate({
        "lanes": [{"name": "dense", "url": url, "api": "llamacpp"}], "ladder": {"concurrency": [2], "extend": False},
        "warmup_s": 0.5, "min_window_s": window_s, "max_window_s": window_s, "min_requests": 2,
        "drain_timeout_s": 5.0, "max_loop_lag_s": 1.0, "progress": False, "metrics_port": None,
        "workload": {"output_tokens": {"value": 16}, "prompt_tokens": {"value": 32}, "seed": 3},
        "arrival": {"process": "poisson", "rates": rates, "search_steps": 0, "warmup_s": 0.5,
                    "max_window_s": window_s, "workers": workers, "max_lag_s": max_lag_s},
        "objectives": {"ttft_s": 1.0}})


@pytest.mark.slow
def test_two_hosts_fifty_ms_apart_give_one_consistent_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Senders, "clock_offsets_ms", (0.0, 50.0))
    with SimulatorProcess("dense") as sim:
        manifest = _walk(sim.url, tmp_path, [RATE], 2, 4.0)
        truth = httpx.get(sim.url + "/sim/truth", params={"capacity": "0"}, timeout=10).json()["requests"]
    window = next(w for w in manifest.windows("dense") if w.rate_rps == RATE)
    # each sender's offset measured: the second host's 50 ms, within its stated bound
    offsets = [re.search(r"sender (\d) .*clock offset (-?[0-9.]+) \+- ([0-9.]+) ms", n) for n in window.notes]
    found = {int(m.group(1)): (float(m.group(2)), float(m.group(3))) for m in offsets if m}
    assert set(found) == {0, 1}, window.notes
    for index, expected in ((0, 0.0), (1, 50.0)):
        offset, bound = found[index]
        assert abs(offset - expected) <= bound + 0.05, (index, offset, bound)
    records = [r for r in read_records(tmp_path / "records.jsonl", strict=True) if r.rate_rps == RATE]
    # one schedule: every request drawn was sent once and recorded once, both hosts sending
    indices = sorted(int(r.request_id.rsplit("-", 1)[1]) for r in records)
    assert indices == list(range(len(indices))) and len(indices) >= 100
    arrived = {row["request_id"]: row for row in truth}
    late: list[tuple[str, float]] = []
    for rec in records:
        assert rec.intended_at is not None
        # no request before its intended time, after the offset correction
        assert rec.sent_at >= rec.intended_at - 0.001, (rec.request_id, rec.sent_at - rec.intended_at)
        if rec.ok:  # the node's own clock: the request reached it after it was sent ...
            row = arrived[rec.request_id]
            assert rec.sent_at - 0.002 <= row["arrival"], (rec.request_id, row["arrival"] - rec.sent_at)
            assert rec.ttft_s is not None and rec.ttft_s >= row["first_token"] - row["arrival"] - 0.005
            if row["arrival"] > rec.sent_at + 0.025:
                late.append((rec.request_id, row["arrival"] - rec.sent_at))
    # ... and soon after: the node stamps an arrival when its loop reads the request, which a loaded host can
    # put tens of milliseconds late now and then; the second host's 50 ms offset applied the wrong way puts its
    # requests, half of them, 50 ms late every one
    assert len(late) <= 0.1 * len(records), late
    assert sum(r.ok for r in records) >= 0.95 * len(records)
    assert window.valid, window.reason


@pytest.mark.slow
def test_one_lane_answers_the_same_from_one_process_and_from_two(tmp_path: Path) -> None:
    """A rate far below the lane's capacity passes and one far above fails, from one sending process and from
    two; each rung's attainment intervals overlap (the answer does not depend on who sends).

    What is compared is the verdict on the server, not whether a client keeps its schedule: the high rung is
    twice the capacity (far above it: its backlog grows by the capacity each second) rather than a rate one
    process on a loaded machine cannot send, and the schedule lag allowed is 0.25 s, a quarter of the TTFT
    objective (one process at 3x capacity fell 50 ms behind on a loaded host and its rung, rightly, could not
    be judged)."""
    verdicts: dict[int, dict[float, tuple[bool | None, tuple[float, float]]]] = {}
    profile = load_profile("dense")  # the lane's capacity as its engine model implies, every slot busy
    capacity = closed_loop_capacity(profile, 32, 16, profile.server.slots).requests_per_s
    with SimulatorProcess("dense") as sim:
        low, high = round(0.3 * capacity, 1), round(2.0 * capacity, 1)
        for workers in (1, 2):
            out = tmp_path / f"w{workers}"
            manifest = _walk(sim.url, out, [low, high], workers, 5.0, LAG_S)
            records = list(read_records(out / "records.jsonl", strict=True))
            config = _config(sim.url, [low, high], workers, 5.0, LAG_S)
            for w in manifest.windows("dense"):  # each rung's stated sends are its records' (the second rung too:
                if w.rate_rps is None:  # its indices start again, the senders' order ids do not)
                    continue
                stated = float(next(n for n in w.notes if "requests/s in the window" in n).split()[1])
                counted = sum(1 for r in records if r.rate_rps == w.rate_rps and w.start <= r.sent_at <= w.end)
                assert stated == pytest.approx(counted / (w.end - w.start), rel=0.02), (workers, w.rate_rps)
            verdicts[workers] = {w.rate_rps: _judged(records, w, config) for w in manifest.windows("dense")
                                 if w.rate_rps is not None}
    for rate in (low, high):
        one, two = verdicts[1].get(rate), verdicts[2].get(rate)
        assert one is not None and two is not None, (rate, verdicts)
        assert one[0] == two[0], (rate, one, two)  # the same verdict
        (lo1, hi1), (lo2, hi2) = one[1], two[1]
        assert lo1 <= hi2 and lo2 <= hi1, (rate, one, two)  # intervals that overlap
    assert verdicts[2][low][0] is True and verdicts[2][high][0] is False, verdicts


def _judged(records: list[Any], window: Any, config: LoadgenConfig) -> tuple[bool | None, tuple[float, float]]:
    """The rung's final verdict as the walk judged it (``loadgen.rates.judge`` on its figures) and its
    attainment interval."""
    assert config.objectives is not None
    figures = compute_step_figures(records, window, objectives=config.objectives.objectives())
    outcome = judge(figures, config.arrival)
    estimate = step_attainment(figures)
    assert estimate is not None, window
    assert figures.valid, (window.rate_rps, figures.reason)  # a rung that could not be judged says why
    interval = estimate.interval()
    assert interval is not None, window
    return outcome.passed, interval


@pytest.mark.slow
def test_a_sender_lost_mid_rung_costs_its_requests_never_the_run() -> None:
    """Sender 1 killed while it holds requests: those it had sent end as dropped results, sender 0's are read to
    their end (the same rung indices as a drained rung before: none taken for another's), the next requests go
    to the sender left; closing afterwards is clean."""

    async def body() -> tuple[list[tuple[int, str]], list[int | None], list[str], dict[int, int | None]]:
        server = StreamServer(StreamServerConfig(itl_s=0.05, ping=False))
        url = await server.start()
        config = LoadgenConfig.model_validate({"lanes": [{"name": "dense", "url": url, "api": "llamacpp"}],
                                               "ladder": {"concurrency": [1]}})
        senders = await Senders.start(config, config.lanes[0], 2)
        ended: list[tuple[int, str]] = []
        try:
            # a first rung, drained at its end, leaves nothing behind (the next rung's indices start again at 0)
            first: list[str] = []
            now = time.perf_counter_ns()
            for i in range(5):  # five, due in 5 s: drained unsent (the next rung's index 0 goes to sender 1)
                senders.dispatch(i, now + 5_000_000_000, f"a-{i}", _body(), sent=lambda t, _s: None,
                                 done=lambda res, _s: first.append(res.outcome))
            await senders.drain(5.0)
            assert first == []  # none sent, none recorded
            now = time.perf_counter_ns()
            held = {}
            for i in range(6):  # three each, sent at once, each streaming 12 tokens 50 ms apart
                held[i] = senders.dispatch(i, now + 30_000_000, f"r-{i}", _body(), sent=lambda t, _s: None,
                                           done=lambda res, _s, i=i: ended.append((i, res.outcome)))
            await asyncio.sleep(0.2)  # all six sent and streaming
            proc = senders.workers[1].proc
            assert proc is not None
            proc.kill()
            deadline = time.monotonic() + 10
            while len(ended) < 6 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            after = [senders.dispatch(6 + i, time.perf_counter_ns(), f"r-{6 + i}", _body(), sent=lambda t, _s: None,
                                      done=lambda res, _s: None) for i in range(2)]
            lost = list(senders.lost)
        finally:
            await senders.close()
            await server.stop()
        return ended, after, lost, held

    ended, after, lost, held = asyncio.run(body())
    outcomes = dict(ended)
    assert sorted(outcomes) == list(range(6)) and held == {0: 1, 1: 0, 2: 1, 3: 0, 4: 1, 5: 0}
    assert [outcomes[i] for i in (1, 3, 5)] == ["ok"] * 3  # sender 0's, read to their end
    assert [outcomes[i] for i in (0, 2, 4)] == ["dropped"] * 3  # sender 1's, lost with it
    assert after == [0, 0] and lost == ["sender 1 lost: IncompleteReadError"]


def _body() -> bytes:
    return b'{"prompt":"hello","n_predict":12,"stream":true}'
