"""Runner policies on the wire: client self-check, drain, stability stop, CLI, progress display."""

from __future__ import annotations

import argparse
import asyncio
import io
import json
from pathlib import Path
from typing import Any

import pytest

from satbench.answer.analysis import analyze_lane
from satbench.answer.policy import Policy
from satbench.core.figures import StepFigures
from satbench.core.records import read_records
from satbench.loadgen import cli
from satbench.loadgen.progress import Progress, progress_wanted
from satbench.loadgen.runner import run_ladder
from satbench.loadgen.selfcheck import ClientHealth, verdict
from testkit.stream_server import StreamServer, StreamServerConfig
from tests.loadgen.test_wire import config, with_server


@pytest.mark.slow
@pytest.mark.parametrize("limits", [
    {"max_idle_share": 1e-9},  # kernel-timed (plain HTTP): any idle time is too much
    {"http_client": "aiohttp", "max_loop_lag_s": 1e-9},  # timed by reads: any loop lag is too much
])
def test_client_that_cannot_keep_up_marks_the_step_invalid(tmp_path: Path, limits: dict[str, Any]) -> None:
    async def body(server: StreamServer, url: str) -> Any:
        cfg = config(url, "llamacpp", [1], metrics_port=None, **limits)
        return await run_ladder(cfg, tmp_path)

    manifest = asyncio.run(with_server(StreamServerConfig(itl_s=0.002), body))
    step = manifest.steps[0]
    assert not step.valid and step.reason is not None and step.reason.startswith("client ")
    assert json.loads((tmp_path / "steps.json").read_text())[0]["valid"] is False


@pytest.mark.parametrize(("health", "expected"), [
    (ClientHealth(0.001, 0.002, 0.0005, 0.3), None),
    (ClientHealth(0.05, 0.2, 0.0005, 0.3), "event loop lagged"),
    (ClientHealth(0.001, 0.002, 0.03, 0.3), "dispatch delay"),
    (ClientHealth(0.001, 0.002, 0.0005, 0.99), "CPU saturated"),
    (ClientHealth(None, None, None, None), None),
    # kernel-timed: lags move no latency, only the offered load counts
    (ClientHealth(0.05, 0.2, 0.03, 0.3, read_lag_p99_s=0.02, idle_share=0.01, kernel_timed=True), None),
    (ClientHealth(0.001, 0.002, 0.03, 0.3, idle_share=0.2, kernel_timed=True), "idle 20.0%"),
    (ClientHealth(0.001, 0.002, 0.0005, 0.99, idle_share=0.0, kernel_timed=True), "CPU saturated"),
])
def test_verdict_table(health: ClientHealth, expected: str | None) -> None:
    reason = verdict(health, max_lag_s=0.01)
    assert (reason is None) if expected is None else (reason is not None and expected in reason)


@pytest.mark.slow
def test_drain_cancel_cuts_in_flight_requests_and_records_them(tmp_path: Path) -> None:
    async def body(server: StreamServer, url: str) -> Any:
        cfg = config(url, "llamacpp", [2], drain="cancel", metrics_port=None,
                     workload={"output_tokens": {"value": 400}, "prompt_tokens": {"value": 8}})
        return await run_ladder(cfg, tmp_path)

    manifest = asyncio.run(with_server(StreamServerConfig(itl_s=0.005), body))
    records = list(read_records(tmp_path / "records.jsonl"))
    cut = [r for r in records if r.error == "cancelled at drain"]
    assert len(cut) == 2 and all(r.phase == "drain" and r.outcome == "dropped" for r in cut)
    assert manifest.steps[0].drain_end is not None


@pytest.mark.slow
def test_window_runs_to_max_when_throughput_is_not_stable_enough(tmp_path: Path) -> None:
    async def body(server: StreamServer, url: str) -> Any:
        cfg = config(url, "llamacpp", [1], min_window_s=0.5, max_window_s=1.5, ci_rel_bound=1e-9,
                     metrics_port=None)
        return await run_ladder(cfg, tmp_path)

    # a first token after 0.2 s, then 3 ms gaps: 50 ms batches see bursts and silences, so the interval
    # never shrinks to a 1e-9 share of the mean (evenly spaced tokens would give every batch the same count,
    # a zero-width interval that is rightly "stable")
    manifest = asyncio.run(with_server(StreamServerConfig(ttft_s=0.2, itl_s=0.003), body))
    assert manifest.steps[0].duration_s >= 1.45


def _half_width_share(step: dict[str, Any]) -> float:
    low, high = step["throughput_ci_tok_s"]
    return (high - low) / 2 / step["throughput_tok_s"]


@pytest.mark.slow
def test_a_rung_too_unsteady_to_use_is_measured_longer_and_a_usable_one_is_not(tmp_path: Path) -> None:
    """Users whose requests are 0.3 s of silence, then 16 tokens in 32 ms: a 1.5 s window holds 5 requests a user
    and its throughput interval is far wider than the 25 % the policy allows, so without the hold the lowest rung
    is given up and the lane has no answer, while the same stream over 6 s is within it (a stationary cycle, whose
    interval narrows as the window grows). With ``usable_ci_rel`` each window goes on past ``max_window_s``,
    doubling, ends usable within ``decide_max_window_s``, and the lane is answered. A steady lane (tokens every
    3 ms after 20 ms), within the policy at 1.5 s, ends at ``max_window_s`` as it did without the hold."""
    timing = {"min_window_s": 1.0, "max_window_s": 1.5, "decide_max_window_s": 6.0, "ci_rel_bound": 1e-9,
              "min_requests": 10, "metrics_port": None}

    def run(tag: str, ladder: list[int], output: int, **extra: Any) -> Any:
        async def body(server: StreamServer, url: str) -> Any:
            cfg = config(url, "llamacpp", ladder, **timing, **extra, drift_reference=False,  # no re-measures
                         workload={"output_tokens": {"value": output}, "prompt_tokens": {"value": 8}})
            return await run_ladder(cfg, tmp_path / tag)
        return body

    def steps(tag: str) -> list[dict[str, Any]]:  # the ladder's rungs (the drift check's re-measure aside)
        return [s for s in json.loads((tmp_path / tag / "steps.json").read_text()) if not s.get("drift_reference")]

    def walked(manifest: Any) -> list[Any]:
        return [w for w in manifest.steps if not w.drift_reference]

    noisy = StreamServerConfig(ttft_s=0.3, itl_s=0.002)
    given_up = asyncio.run(with_server(noisy, run("given-up", [1, 2], 16)))
    held = asyncio.run(with_server(noisy, run("held", [1, 2], 16, usable_ci_rel=0.25)))
    before, after = steps("given-up"), steps("held")
    assert [w.duration_s < 1.6 for w in walked(given_up)] == [True, True]
    assert _half_width_share(before[0]) > 0.25
    for window, step, was in zip(walked(held), after, before, strict=True):
        assert 2.9 < window.duration_s < 6.2 and step["valid"] and _half_width_share(step) <= 0.25
        assert any(n.startswith("measured on, not yet usable at ") for n in window.notes)
        assert step["requests"] > 2 * was["requests"]
    no_answer = analyze_lane("dense", [StepFigures.from_dict(s) for s in before], Policy())
    answer = analyze_lane("dense", [StepFigures.from_dict(s) for s in after], Policy())
    assert no_answer.recommended_concurrency is None
    assert no_answer.reason is not None and no_answer.reason.startswith("lowest rung c=1 cannot be used")
    assert answer.recommended_concurrency is not None, answer.reason

    steady = StreamServerConfig(ttft_s=0.02, itl_s=0.003)
    for tag, extra in (("steady", {}), ("steady-held", {"usable_ci_rel": 0.25})):
        manifest = asyncio.run(with_server(steady, run(tag, [1], 32, **extra)))
        assert 1.45 < manifest.steps[0].duration_s < 1.6 and _half_width_share(steps(tag)[0]) < 0.25
        assert not any(n.startswith("measured on") for n in manifest.steps[0].notes)


@pytest.mark.slow
def test_cli_runs_a_config_file_and_refuses_a_bad_one(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    async def body(server: StreamServer, url: str) -> int:
        path = tmp_path / "loadgen.toml"
        path.write_text(f"""
warmup_s = 0.2
min_window_s = 0.5
max_window_s = 1.0
min_requests = 1
metrics_port = 0
progress = false
[ladder]
concurrency = [1]
[[lanes]]
name = "dense"
url = "{url}"
api = "openai-completions"
""", encoding="utf-8")
        parser = argparse.ArgumentParser()
        cli.configure(parser)
        args = parser.parse_args(["--config", str(path), "--out", str(tmp_path / "out"),
                                  "--set", "workload.output_tokens.value=5",
                                  "--run-id", "20261129T000000Z-cli0"])
        return await asyncio.to_thread(cli.main, args)

    assert asyncio.run(with_server(StreamServerConfig(), body)) == 0
    records = list(read_records(tmp_path / "out" / "records.jsonl"))
    assert records and all(r.run_id == "20261129T000000Z-cli0" for r in records)
    # the drain keeps the load on until the window's requests end, then cuts off what was sent after the window
    assert all(r.output_tokens == 5 for r in records if r.ok)
    assert all(r.error == "cancelled at drain" and not r.extra.get("censored") for r in records if not r.ok)
    bad = tmp_path / "bad.toml"
    bad.write_text('[ladder]\nconcurrency = [0]\n[[lanes]]\nname = "a"\nurl = "nope"\n', encoding="utf-8")
    parser = argparse.ArgumentParser()
    cli.configure(parser)
    assert cli.main(parser.parse_args(["--config", str(bad)])) == 2
    err = capsys.readouterr().err
    assert "ladder.concurrency" in err and "lanes[a].url" in err


class FakeTty(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def test_progress_only_on_a_terminal_outside_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("SATBENCH_NO_PROGRESS", raising=False)
    assert progress_wanted(None, FakeTty(True)) and not progress_wanted(None, FakeTty(False))
    assert not progress_wanted(False, FakeTty(True)) and progress_wanted(True, FakeTty(False))
    monkeypatch.setenv("CI", "true")
    assert not progress_wanted(None, FakeTty(True))
    out = FakeTty(True)
    shown = Progress(True, out)
    shown.show("dense", 4, "window", 3.2, 17, 812.5, 0.042)
    shown.done("dense c=4: done")
    text = out.getvalue()
    assert "dense c=4 window" in text and "812.5 tok/s" in text and "42 ms" in text and text.endswith("\n")
    lines = FakeTty(False)  # not a terminal (CI, a log): no live line, but a line per finished rung
    logged = Progress(False, lines)
    logged.show("dense", 4, "window", 3.2, 17, 812.5, None)
    logged.done("dense c=4: done")
    assert lines.getvalue() == "dense c=4: done\n"
    quiet = FakeTty(False)  # progress = false: nothing at all
    silent = Progress(False, quiet, lines=False)
    silent.show("dense", 4, "window", 3.2, 17, 812.5, None)
    silent.done("dense c=4: done")
    assert quiet.getvalue() == ""
