"""The agent walk in the load generator (``loadgen.agent_walk``): a session on the simulator with its Prometheus.

End to start is held against the records alone (each turn's send, its predecessor's end, its sub-agents' ends,
its delay); the prompt cache against the server's own counts; the answer, its energy and cost, the report, the
capabilities, the recommender's series and the dashboards against the walk's own rungs. A bad trajectory file is
refused in one line naming the file and the line, before anything is written.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from satbench.answer.agent_analysis import agents_model
from satbench.answer.document import read_document
from satbench.answer.policy import Cost
from satbench.core.agent_walk import AgentRungWindow, AgentWalk
from satbench.core.agents import AgentSession, AgentTurn
from satbench.core.energy import EnergyFigures
from satbench.core.manifest import RunManifest
from satbench.core.records import read_records
from satbench.dashboards.overview import DASHBOARDS
from satbench.loadgen.agent_walk import _cut, context_limit
from satbench.loadgen.config import AgentsConfig, LoadgenConfig
from satbench.loadgen.runner import run_ladder
from satbench.loadgen.workload import context_body
from satbench.recommender.capabilities import capability_fragment, prometheus_text
from satbench.report.agents import agents_fact
from testkit.agents import check_end_to_start
from testkit.net import free_port
from testkit.session import ROOT, run_session
from tests.grafana.panel_replay import Window, replay, replay_prometheus

AGENTS: dict[str, Any] = {
    "ttft_s": 1.0, "speed_tok_s": 20, "max_sessions": 4, "warmup_s": 1.5, "window_s": 5, "drain_s": 5,
    "system_tokens": 400, "task_tokens": 150, "new_tokens_median": 120, "output_tokens_median": 30,
    "output_tokens_max": 120, "max_context_tokens": 3000, "delay_median_s": 0.1, "delay_cap_s": 1.0,
    "spawn_share": 0.3, "seed": 3,
}


AGENT_PANELS = {"Concurrent agents at the tier", "Agent output tok/s per kW"}


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_an_agent_session_plays_end_to_start_and_answers_everywhere(tmp_path: Path) -> None:
    """``satbench run --agents`` on a simulator lane, with its Prometheus: the walk's records, the answer with its
    energy read from the store, the report, the capabilities, the series and the dashboards' agents row."""
    config = tmp_path / "dense.toml"
    config.write_text('[[lanes]]\nname = "dense"\nruntime = "simulator"\nprofile = "dense"\n')
    sets = [x for key, value in AGENTS.items() for x in ("--set", f"loadgen.agents.{key}={value}")]
    run = run_session(tmp_path / "runs", "--config", str(config), "--agents", *sets,
                      "--set", "loadgen.max_loop_lag_s=0.5", "--set", "policy.cost.price_per_hour=3.0",
                      timeout_s=330)
    assert run.returncode == 0, run.stderr[-3000:]
    (run_dir,) = run.run_dirs
    manifest = RunManifest.from_dict(json.loads((run_dir / "manifest.json").read_text()))
    walk = manifest.agents["dense"]
    assert [r.sessions for r in walk.rungs][:3] == [1, 2, 4][:len(walk.rungs)]
    records = [r for r in read_records(run_dir / "records.jsonl") if "agent" in r.extra]
    assert records and {r.concurrency for r in records} <= {x.sessions for x in walk.rungs}
    checked, after_children = check_end_to_start(records)
    assert checked >= 20 and after_children >= 1, (checked, after_children)
    answered = [r for r in records if r.ok and r.extra["agent"]["turn"] > 0 and r.prompt_tokens]
    cached = sum(r.cached_prompt_tokens or 0 for r in answered) / sum(r.prompt_tokens or 0 for r in answered)
    assert cached > 0.5, cached  # a later turn repeats its context: the server's own counts say it was served
    doc = json.loads((run_dir / "recommendations.json").read_text())
    agents = doc["lanes"]["dense"]["agents"]
    assert agents["status"] in {"settled", "undecided", "unsaturated"} and agents["max_sessions"] >= 1
    assert [r["sessions"] for r in agents["rungs"]] == [r.sessions for r in walk.rungs]
    energy = agents["energy"]  # read from the store over the answer's rung window: the simulator's modelled GPUs
    assert energy["scope"] == "gpu" and energy["watts"] > 0 and energy["sessions_per_kw"] > 0, energy
    assert energy["cost_per_agent_hour"] == pytest.approx(3.0 / agents["max_sessions"])
    readme, said = (run_dir / "README.md").read_text(), read_document(doc).lanes["dense"].agents
    assert said is not None and "### Concurrent agents" in readme and agents_fact(said) in readme
    entry = capability_fragment(doc)["lanes"]["dense"]
    assert (entry["max_agent_sessions"], entry["agents_status"]) == (agents["max_sessions"], agents["status"])
    assert f'satbench_max_agent_sessions{{lane="dense",status="{agents["status"]}",valid=' in prometheus_text(doc)
    window = Window.of_run(run_dir)
    with replay_prometheus(run_dir, tmp_path / "replay") as prom:
        results = [r for r in replay(DASHBOARDS["satbench-overview.json"](), prom, window)
                   if r.panel in AGENT_PANELS]
    assert {r.panel for r in results} == AGENT_PANELS
    assert all(r.has_data for r in results), [r.panel for r in results if not r.has_data]


def _rung(n: int, holds: bool, decided: bool = True, **kw: Any) -> AgentRungWindow:
    return AgentRungWindow(sessions=n, start=0.0, end=60.0, turns=100, judged=100, holds=holds, decided=decided,
                           said="", output_tok_s=10.0 * n, prompt_tokens=1000, cached_prompt_tokens=800, **kw)


def test_the_answer_reads_the_walk_and_stamps_its_validity() -> None:
    walk = AgentWalk(ttft_s=2, speed_tok_s=30, source="synthetic", max_context_tokens=8000, window_s=120,
                     rungs=(_rung(1, True), _rung(2, True), _rung(4, False), _rung(3, True, capped_delays=10)))
    said = agents_model(walk)
    assert (said.status, said.max_sessions, said.bracket) == ("settled", 3, [3, 4])
    assert said.output_tok_s == 30.0 and said.output_tok_s_per_session == 10.0 and said.cache_hit_share == 0.8
    assert said.validity.valid and said.validity.capped_delay_share == 10 / 400
    assert not said.validity.agentx_duration and "shorter than AgentX" in said.validity.notes[0]
    # a rung of the bracket overflowed the context: the stamp says invalid, and the walk read it as not held
    overflowed = _rung(4, False, overflows=5, valid=False, reason="5 of 100 turns overflowed the context")
    said = agents_model(walk.model_copy(update={"rungs": (*walk.rungs[:2], overflowed, walk.rungs[3])}))
    assert not said.validity.valid and said.status == "undecided" and said.validity.overflow_share == 5 / 400


def test_a_recorded_session_is_cut_to_the_lane_context() -> None:
    session = AgentSession((AgentTurn(1000, 200), AgentTurn(3000, 500), AgentTurn(9000, 10)))
    cut = _cut(session, limit=6000, system_tokens=1000)
    assert cut.cut and len(cut.turns) == 2  # 1000 + 1000 + 200 + 3000 + 500 fits; the 9,000 more does not
    first_too_big = _cut(AgentSession((AgentTurn(8000, 500),)), limit=6000, system_tokens=1000)
    assert first_too_big.cut and first_too_big.turns[0].new_tokens <= 5999
    cfg = AgentsConfig(max_context_tokens=32768)
    assert context_limit(cfg, None) == 32768 and context_limit(cfg, 4096) == 4096 - 64


def test_a_completion_turn_begins_with_the_last_prompt_and_its_answer() -> None:
    cfg = LoadgenConfig().workload
    first = json.loads(context_body("llamacpp", "", "SYS", [("user", "[m] task")], 8, cfg, "a0"))["prompt"]
    second = json.loads(context_body("llamacpp", "", "SYS", [("user", "[m] task"), ("assistant", " answer"),
                                                             ("user", "tool output")], 8, cfg, "a0"))["prompt"]
    assert second.startswith(first + " answer")
    chat = json.loads(context_body("openai-chat", "m", "SYS", [("user", "t"), ("assistant", "a")], 8, cfg, "a0"))
    assert [m["role"] for m in chat["messages"]] == ["system", "user", "assistant"]


def test_a_bad_trajectory_file_is_refused_in_one_line_and_nothing_is_written(tmp_path: Path) -> None:
    bad = tmp_path / "sessions.jsonl"
    bad.write_text('{"requests": [{"type": "n", "in": 100, "out": 5, "t": 0}]}\n{"requests": [{"type": "n"}]}\n')
    config = tmp_path / "loadgen.toml"
    config.write_text('[[lanes]]\nname = "lane"\nurl = "http://127.0.0.1:9"\n'
                      f'[agents]\ntrajectories = "{bad}"\n')
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "satbench.cli", "loadgen", "--config", str(config), "--out",
                           str(out)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{bad}:2" in lines[0], done.stderr
    assert not out.exists()


def test_energy_and_cost_at_the_agent_answer() -> None:
    """At the answer's rung (3 sessions, 30 output tok/s): 600 W over its window is 3 / 0.6 = 5 sessions per kW,
    20 J per output token; a node at 4.50 an hour costs 1.50 an agent-hour and 4.50 / (30 x 3600) x 1e6 a million
    output tokens."""
    walk = AgentWalk(ttft_s=2, speed_tok_s=30, source="synthetic", max_context_tokens=8000, window_s=120,
                     rungs=(_rung(1, True), _rung(2, True), _rung(4, False), _rung(3, True)))
    energy = EnergyFigures(gpu_joules=600.0 * 60, gpu_watts=600.0, gpu_source="counter", scope="gpu",
                           joules_per_token=20.0, tokens_per_joule=0.05)
    cost = Cost(price_per_hour=4.5, currency="USD")
    said = agents_model(walk, energy, cost, "local").energy
    assert said is not None and said.scope == "gpu" and said.source == "counter" and said.watts == 600.0
    assert said.sessions_per_kw == pytest.approx(5.0) and said.joules_per_token == 20.0
    assert said.tok_s_per_kw == pytest.approx(30.0 / 0.6)
    assert said.cost_per_agent_hour == pytest.approx(1.5) and said.currency == "USD"
    assert said.cost_per_million_tokens == pytest.approx(4.5 / (30 * 3600) * 1e6)
    unread = agents_model(walk).energy
    assert unread is not None and unread.watts is None and unread.reason and unread.cost_per_agent_hour is None
    none_held = walk.model_copy(update={"rungs": (_rung(1, False),)})
    assert agents_model(none_held, energy, cost).energy is None  # no answer, no rung to read it at


@pytest.mark.timeout(120)
def test_a_runtime_that_refuses_degrades_the_walk_and_is_not_hammered(tmp_path: Path) -> None:
    """Every connection refused: the walk's one rung is invalid (its turns failed, too few judged), the answer says
    none held, and each place backs off between failed trees (50 ms doubling to 1 s) rather than retrying in a busy
    loop: a few turns a place, not thousands."""
    port = free_port()  # nothing listens there
    config = LoadgenConfig.model_validate({
        "lanes": [{"name": "lane", "url": f"http://127.0.0.1:{port}", "api": "llamacpp"}],
        "ladder": {"concurrency": [1], "drift_reference": False}, "warmup_s": 0.2, "min_window_s": 0.5,
        "max_window_s": 1, "request_timeout_s": 2, "drain_timeout_s": 0.5, "drain_settle_s": 0, "progress": False,
        "metrics_port": None, "max_loop_lag_s": 1.0,
        "agents": {**AGENTS, "max_sessions": 2, "warmup_s": 0.5, "window_s": 1, "drain_s": 0.5},
    })
    manifest = asyncio.run(run_ladder(config, tmp_path))
    (rung,) = manifest.agents["lane"].rungs
    assert not rung.valid and rung.failed == rung.turns > 0, rung
    turns = [r for r in read_records(tmp_path / "records.jsonl") if "agent" in r.extra]
    seconds = rung.end - rung.start + 0.5 + 0.5  # the window, the warm-up before it and the drain
    assert len(turns) <= 4 * seconds + 10, (len(turns), seconds)  # a busy loop sends thousands a second
    said = agents_model(manifest.agents["lane"])
    assert said.max_sessions is None and said.status in {"none", "undecided"}, said
