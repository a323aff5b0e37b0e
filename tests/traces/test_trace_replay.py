"""A trace replayed over real HTTP against the simulator, as the load generator's trace rung sends it.

The truth is the trace file itself (its arrivals, its lengths, its block ids) and the simulator's own counts
(the prompt tokens its tokenizer counted, the tokens its prompt cache served), never the replay's figures: every
request of the window is sent at its recorded time (scaled), with the trace's prompt length and output length, and
the window is judged as an open-loop rung (``rate_rps`` = recorded rate x factor, intended times on every record).
A bad trace is refused before any request is sent.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from satbench.core.records import read_records
from satbench.loadgen.config import LoadgenConfig
from satbench.loadgen.runner import LadderRunner
from satbench.loadgen.traces import read_trace
from testkit.sim import InProcessSimulator
from testkit.trace_truth import generate_mooncake


def _config(url: str, trace: Path, factors: list[float]) -> LoadgenConfig:
    return LoadgenConfig.model_validate({
        "lanes": [{"name": "dense", "url": url, "api": "llamacpp"}], "ladder": {"concurrency": [4]},
        "warmup_s": 0.5, "min_window_s": 8.0, "max_window_s": 8.0, "min_requests": 2, "progress": False,
        "max_loop_lag_s": 1.0, "drain_settle_s": 1.0, "arrival": {"warmup_s": 1.0},
        "trace": {"path": str(trace), "factors": factors, "max_factor": max(factors), "search_steps": 0},
        "objectives": {"ttft_s": 2.0}})


@pytest.mark.slow
def test_a_trace_rung_sends_the_trace_at_its_times_lengths_and_factor(tmp_path: Path) -> None:
    path = generate_mooncake(tmp_path / "t.jsonl", n=40, rate_rps=4.0, seed=5, own_blocks=(0, 1),
                             output_tokens=(8, 24))
    trace = read_trace(path)
    with InProcessSimulator("dense") as sim:
        runner = LadderRunner(_config(sim.url, path, [2.0]), tmp_path / "run", run_id="20261204T000000Z-trace")
        try:
            manifest = asyncio.run(runner.run())
        finally:
            runner.close()
    window = next(w for w in manifest.steps if w.speed_factor is not None)
    assert window.speed_factor == 2.0 and window.rate_rps == pytest.approx(trace.rate_rps * 2)
    assert manifest.traces["dense"]["sha256"] == trace.sha256
    assert manifest.traces["dense"]["speed_factors"] == [2.0]
    sent = sorted((r for r in read_records(tmp_path / "run" / "records.jsonl", strict=True)
                   if r.rate_rps == window.rate_rps), key=lambda r: int(r.request_id.rsplit("-", 1)[1]))
    intended = [r.intended_at or 0.0 for r in sent]
    n = len(trace.requests)
    period = trace.duration_s / 2 * n / (n - 1)
    # warm-up: the window once (5 s covers the 1 s asked); window: two passes (10 s covers min_window_s 8 s)
    assert len(sent) == 3 * n
    assert window.period_s == pytest.approx(period, rel=1e-6)
    assert window.end - window.start == pytest.approx(2 * period, abs=1e-3)
    assert intended[n] == pytest.approx(window.start, abs=1e-3)  # the window opens on its first request
    assert window.steady is None  # no warm-up cut, no steadiness asked of a recorded schedule
    first = sent[0].intended_at
    assert first is not None
    for i, record in enumerate(sent[:n]):  # each intended at its recorded time over the factor
        assert intended[i] - first == pytest.approx(trace.requests[i].at_s / 2, abs=2e-3)
        assert record.prompt_tokens == trace.requests[i].input_tokens  # the simulator's own count
        assert record.output_tokens == trace.requests[i].output_tokens
    assert intended[n] - first == pytest.approx(period, abs=2e-3)


def test_a_bad_trace_is_refused_before_any_request_is_sent(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"timestamp": 10, "input_length": 5, "output_length": 2}\n'
                    '{"timestamp": 4, "input_length": 5, "output_length": 2}\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl:2: timestamp goes back"):
        LadderRunner(_config("http://127.0.0.1:9", path, [1.0]), tmp_path / "run")
    assert not (tmp_path / "run").exists()
