"""``core.agents``: session trees, their growing contexts, the synthetic draws against the published figures they
cite, and a recorded corpus read whole, a bad line refused in one line naming the file and the line."""

from __future__ import annotations

import json
import random
import statistics
from pathlib import Path

import pytest

from satbench.core.agents import (
    DELAY_CAP_S,
    AgentSession,
    AgentTurn,
    SyntheticAgents,
    TrajectoryError,
    read_weka_sessions,
)


def test_a_turns_context_is_everything_before_it() -> None:
    session = AgentSession((AgentTurn(100, 10), AgentTurn(50, 20, 1.0), AgentTurn(30, 5, 0.5, fresh=True),
                            AgentTurn(7, 1)))
    # system 1000; then +100; +10 +50; compacted: 1000 +30; +5 +7
    assert session.contexts(1000) == [1100, 1160, 1030, 1042]
    assert session.largest_context(1000) == 1180
    tree = AgentSession((AgentTurn(100, 10, spawns=(session, session)), AgentTurn(1, 1)))
    assert tree.requests() == 2 + 2 * 4


def test_synthetic_sessions_follow_the_cited_figures() -> None:
    syn = SyntheticAgents(max_context_tokens=10**9, system_tokens=2000)
    rng = random.Random(3)
    sessions = [syn.session(rng) for _ in range(3000)]
    turns = [len(s.turns) for s in sessions]
    later = [t for s in sessions for t in s.turns[1:]]
    assert statistics.median(turns) == pytest.approx(11, abs=1)  # AIPerf: median 11, p95 25
    assert sorted(turns)[int(0.95 * len(turns))] == pytest.approx(25, rel=0.2)
    assert statistics.median(t.new_tokens for t in later) == pytest.approx(875, rel=0.08)  # TraceLab
    assert statistics.median(t.output_tokens for t in later) == pytest.approx(214, rel=0.08)
    delays = sorted(t.delay_s for t in later)
    assert statistics.median(delays) == pytest.approx(0.3, rel=0.15) and max(delays) <= DELAY_CAP_S
    assert all(s.turns[0].delay_s == 0 and s.turns[0].new_tokens == syn.task_tokens for s in sessions)
    assert not any(t.spawns for s in sessions for t in s.turns)  # no published rate: none unless asked


def test_sessions_fit_the_lane_and_say_where_they_were_cut() -> None:
    syn = SyntheticAgents(max_context_tokens=8192, system_tokens=2000, spawn_share=0.2)
    rng = random.Random(5)
    sessions = [syn.session(rng) for _ in range(500)]
    assert all(s.largest_context(2000) <= 8192 for s in sessions)
    assert any(s.cut for s in sessions) and any(t.spawns for s in sessions for t in s.turns)
    a, b = syn.stream(9), syn.stream(9)
    assert [next(a) for _ in range(5)] == [next(b) for _ in range(5)]  # the same seed, the same sessions
    with pytest.raises(ValueError, match="no room"):
        SyntheticAgents(max_context_tokens=3000, system_tokens=2000)


def _request(t: float, context: int, out: int, api: float = 1.0, kind: str = "n") -> dict[str, object]:
    return {"t": t, "type": kind, "model": "m", "in": context, "out": out, "hash_ids": [], "api_time": api}


def _session(requests: list[dict[str, object]]) -> str:
    return json.dumps({"id": "s", "models": ["m"], "block_size": 64, "hash_id_scope": "local", "tool_tokens": 0,
                       "system_tokens": 0, "requests": requests})


def test_a_recorded_corpus_becomes_session_trees(tmp_path: Path) -> None:
    sub = {"t": 4.0, "type": "subagent", "agent_id": "a", "subagent_type": "Explore", "status": "completed",
           "requests": [_request(4.0, 300, 20), _request(6.0, 400, 10)]}
    first = [_request(0.0, 1000, 50), _request(3.0, 1200, 40, api=2.0), sub, _request(30.0, 1500, 30),
             _request(31.0, 200, 10)]  # 1500 + 30 > 200: compacted before the last
    path = tmp_path / "corpus.jsonl"
    path.write_text(_session(first) + "\n\n" + _session([_request(0.0, 10, 1)]) + "\n", encoding="utf-8")
    one, two = read_weka_sessions(path)
    # appended: 1000; 1200 - 1050; 1500 - 1240; fresh 200. delays: 3 - 1; 30 - 5 capped at 10; 31 - 31
    assert [(t.new_tokens, t.output_tokens, t.delay_s, t.fresh) for t in one.turns] == [
        (1000, 50, 0.0, False), (150, 40, 2.0, False), (260, 30, DELAY_CAP_S, False), (200, 10, 0.0, True)]
    (child,) = one.turns[1].spawns  # spawned after the turn before it
    assert [(t.new_tokens, t.output_tokens) for t in child.turns] == [(300, 20), (80, 10)]
    assert len(two.turns) == 1 and one.requests() == 4 + 2


@pytest.mark.parametrize(("line", "why"), [
    ("{not json", "not JSON"),
    ("[1, 2]", "a session must be a JSON object"),
    (json.dumps({"requests": []}), "'requests' must be a non-empty list"),
    (_session([_request(0.0, 100, 5, kind="x")]), "'type' must be 'n', 's' or 'subagent'"),
    (_session([{"t": 0.0, "type": "n", "in": -3, "out": 5}]), "'in' must be a non-negative number"),
    (_session([{"t": 0.0, "type": "n", "in": 10}]), "'out' must be a non-negative number"),
])
def test_a_bad_line_is_refused_naming_the_file_and_the_line(tmp_path: Path, line: str, why: str) -> None:
    path = tmp_path / "corpus.jsonl"
    path.write_text(_session([_request(0.0, 100, 5)]) + "\n" + line + "\n", encoding="utf-8")
    with pytest.raises(TrajectoryError) as caught:
        read_weka_sessions(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:2") and why in message and "\n" not in message


def test_one_session_a_file_and_an_empty_file(tmp_path: Path) -> None:
    single = tmp_path / "trace.json"
    single.write_text(json.dumps(json.loads(_session([_request(0.0, 64, 8)])), indent=2), encoding="utf-8")
    assert len(read_weka_sessions(single)) == 1  # a .json file of one session, laid out on many lines
    lines = tmp_path / "trace.jsonl"
    lines.write_text(json.dumps(json.loads(_session([_request(0.0, 64, 8)])), indent=2), encoding="utf-8")
    with pytest.raises(TrajectoryError, match=rf"^{lines}:1: not JSON"):  # a .jsonl file: a session a line
        read_weka_sessions(lines)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n", encoding="utf-8")
    with pytest.raises(TrajectoryError, match="no session"):
        read_weka_sessions(empty)
