"""``simulator.agent_truth``: session trees played on the engine in virtual time. End to start is held against
the engine's own log, one session's times against the step cost model in closed form, the prompt cache against
the context each turn repeats, and the tier's capacity against its own definition at its neighbours."""

from __future__ import annotations

import itertools
from collections import defaultdict

import pytest

from satbench.core.agents import AgentSession, AgentTier, AgentTurn, SyntheticAgents
from satbench.simulator.agent_truth import MARKER_TOKENS, PlayedTurn, capacity, play, tier_holds
from satbench.simulator.profile import load_profile
from satbench.simulator.stepcost import step_seconds

PROFILE = load_profile("dense").with_overrides(slots=8, ctx_tokens=8 * 16384, slot_ctx_tokens=16384)


def test_one_session_runs_as_the_step_cost_model_says() -> None:
    """One session of two turns on an idle engine: the first prompt is prefilled whole (2000 + 8 + 100 tokens
    fit one batch of 2,048? no: two steps), each output token a decode step; the second turn's prompt repeats
    the first turn's context and answer, which the slot holds, so only its 64 new tokens are prefilled."""
    cost, server = PROFILE.cost, PROFILE.server
    session = AgentSession((AgentTurn(100, 5), AgentTurn(64, 3, delay_s=1.5)))
    first, second = play(PROFILE, itertools.repeat(session), 1, turns=2, system_tokens=2000)
    prompt = 2000 + MARKER_TOKENS + 100
    prefill = step_seconds(cost, 0, server.batch, server.ubatch) + step_seconds(cost, 0, prompt - server.batch,
                                                                                server.ubatch)
    decode = step_seconds(cost, 1, 0, server.ubatch)
    assert first.ttft_s == pytest.approx(prefill) and first.cached_tokens == 0
    assert first.last_token is not None and first.last_token == pytest.approx(prefill + 4 * decode)
    assert second.sent == pytest.approx(first.last_token + 1.5)  # end to start
    assert second.prompt_tokens == prompt + 5 + 64 and second.cached_tokens == prompt + 5
    assert second.ttft_s == pytest.approx(step_seconds(cost, 0, 64, server.ubatch))
    assert second.speed_tok_s == pytest.approx(1 / decode)


def test_no_turn_is_sent_before_what_it_waits_for_ended_plus_its_delay() -> None:
    """Checked against the engine's log (its truth records: arrival, last token) with sub-agents: a turn after one
    that spawned waits for the last of its sub-agents."""
    syn = SyntheticAgents(max_context_tokens=12000, spawn_share=0.3, delay_median_s=0.5)
    played = play(PROFILE, syn.stream(4), 6, turns=800)
    assert any("." in p.agent for p in played), "some sub-agents ran"
    by_agent: dict[tuple[int, str], list[PlayedTurn]] = defaultdict(list)
    for p in played:
        by_agent[(p.tree, p.agent)].append(p)
    checked = waited_for_children = 0
    for (tree, agent), turns in sorted(by_agent.items()):
        turns.sort(key=lambda p: p.turn)
        assert [p.turn for p in turns] == list(range(len(turns)))
        for before, after in itertools.pairwise(turns):
            assert before.last_token is not None
            children = [p for (t, a), ps in by_agent.items() if t == tree and a.startswith(f"{agent}.{before.turn}-")
                        for p in ps]  # the sub-agents ``before`` spawned
            assert all(before.last_token <= c.ready for c in children)
            ended = max([before.last_token, *(c.last_token or 0.0 for c in children)])
            assert after.sent >= after.ready - 1e-9 and after.ready >= ended - 1e-9, (before, after)
            checked += 1
            waited_for_children += bool(children)
    assert checked > 300 and waited_for_children > 5


def test_the_tier_and_its_capacity() -> None:
    syn = SyntheticAgents(max_context_tokens=12000)
    tier = AgentTier(ttft_s=2.0, speed_tok_s=50.0)
    best, tried = capacity(PROFILE, lambda: syn.stream(1), tier, turns=500, max_n=64)
    by_n = {r.n: r for r in tried}
    assert by_n[best].holds and not by_n[best + 1].holds  # the bisection ended on the crossing
    assert all(r.holds == (r.ttft_p95_s is not None and r.ttft_p95_s <= 2.0 and (r.speed_p25_tok_s or 1e9) >= 50.0)
               for r in tried)
    assert 1 <= best < 64
    assert capacity(PROFILE, lambda: syn.stream(1), AgentTier(ttft_s=1e-4, speed_tok_s=1.0), turns=100)[0] == 0
    again = tier_holds(play(PROFILE, syn.stream(1), best, turns=500), best, tier)
    assert again == by_n[best]  # deterministic: the same stream, the same answer
