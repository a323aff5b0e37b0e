"""``answer.agent_analysis``: a rung judged on its turns by counts, the walk (doublings, then bisection to
adjacent integers), and the answer's status from the rungs that bracket it; every case worked by hand."""

from __future__ import annotations

import pytest

from satbench.answer.agent_analysis import AgentRung, AgentVerdict, agent_answer, judge_rung, next_sessions
from satbench.core.agents import AgentTier

TIER = AgentTier(ttft_s=2.0, speed_tok_s=30.0)


def _rung(n: int, late: int, slow: int, turns: int = 400) -> AgentRung:
    """``late`` turns past the ceiling and ``slow`` below the floor, each spread evenly over the window (every
    k-th turn), so the batches agree with the count."""
    late_at = {round(i * turns / late) for i in range(late)} if late else set()
    slow_at = {round(i * turns / slow) for i in range(slow)} if slow else set()
    return AgentRung(n, tuple((float(i), 3.0 if i in late_at else 0.5, 10.0 if i in slow_at else 80.0)
                              for i in range(turns)))


@pytest.mark.parametrize(("late", "slow", "holds", "decided"), [
    (4, 40, True, True),       # 1 % late, 10 % slow: held, significantly
    (19, 90, True, False),     # 4.75 % late: within the share at the point, not significantly
    (60, 40, False, True),     # 15 % late: broken, significantly
    (21, 40, False, False),    # 5.25 % late: past the share, not significantly
    (4, 130, False, True),     # 32.5 % slow: broken by the speed floor
    (4, 99, True, False),      # 24.75 % slow: held at the point only
])
def test_a_rung_is_judged_by_counts(late: int, slow: int, holds: bool, decided: bool) -> None:
    v = judge_rung(_rung(4, late, slow), TIER)
    assert (v.holds, v.decided) == (holds, decided), v.said
    assert v.said.startswith(f"{late} of 400 turns past the 2 s TTFT ceiling, {slow} of 400 below 30 tok/s")


def test_a_rung_without_a_first_token_does_not_hold() -> None:
    v = judge_rung(AgentRung(2, ()), TIER)
    assert not v.holds and not v.decided and v.ttft_p95_s is None
    failed = judge_rung(AgentRung(2, tuple((float(i), None, None) for i in range(100))), TIER)
    assert not failed.holds and failed.decided  # a turn without a first token is past any ceiling


def test_late_turns_bunched_in_one_stretch_are_not_significant() -> None:
    """30 of 400 turns late (7.5 %, significantly above 5 % by the count alone) but all in one busy stretch:
    the batches see one bad tenth, not a rate, and the rung stays undecided."""
    bunched = AgentRung(4, tuple((float(i), 3.0 if 100 <= i < 130 else 0.5, 80.0) for i in range(400)))
    spread = _rung(4, 30, 0)
    assert judge_rung(spread, TIER).decided and not judge_rung(spread, TIER).holds
    v = judge_rung(bunched, TIER)
    assert not v.holds and not v.decided, v.said


def _verdict(n: int, holds: bool, decided: bool = True) -> AgentVerdict:
    return AgentVerdict(n, holds, decided, None, None, "")


def test_the_walk_doubles_then_bisects_to_adjacent_integers() -> None:
    capacity = 11  # a lane that holds up to 11 sessions
    seen: list[AgentVerdict] = []
    asked = []
    while (n := next_sessions(seen, 64)) is not None:
        asked.append(n)
        seen.append(_verdict(n, n <= capacity))
    assert asked == [1, 2, 4, 8, 16, 12, 10, 11]
    assert agent_answer(seen).max_sessions == 11 and agent_answer(seen).bracket == (11, 12)
    assert agent_answer(seen).status == "settled"


def test_the_answers_statuses() -> None:
    assert agent_answer([]).status == "none"
    one = agent_answer([_verdict(1, False)])
    assert (one.status, one.max_sessions) == ("none", None) and next_sessions([_verdict(1, False)], 64) is None
    maybe = agent_answer([_verdict(1, False, decided=False)])
    assert (maybe.status, maybe.max_sessions, maybe.bracket) == ("undecided", None, (0, 1))
    top = [_verdict(n, True) for n in (1, 2, 4, 8)]
    assert next_sessions(top, 8) is None
    assert (agent_answer(top).status, agent_answer(top).max_sessions, agent_answer(top).bracket) == \
        ("unsaturated", 8, (8, None))
    open_ = [_verdict(1, True), _verdict(2, True), _verdict(4, False), _verdict(3, False, decided=False)]
    said = agent_answer(open_)
    assert (said.status, said.max_sessions, said.bracket) == ("undecided", 2, (2, 3))
