"""The agent answer: the most concurrent agent sessions a lane holds at an SLO tier, from rungs of ``n``
concurrent session trees, each judged on its turns.

**A rung** holds the tier (``core.agents.AgentTier``, AgentPerf's) when the p95 of its turns' TTFT is within the
ceiling and the p25 of their output speed at least the floor. Each quantile is judged by a count, as every
quantile objective here is (``core.statistics.exceedance_p_value``): the turns past the ceiling against 5 %, the
turns slower than the floor against 25 %. A rung is *decided* when its point reading is also significant at the
policy's confidence (broken: significantly more than the share; held: significantly fewer) by the count test and
by an interval over ten batches of turns in send order whose autocorrelation is counted (turns of one session,
and of one busy stretch, are not independent: the count test alone settled one of sixteen walks one session
low), else it is read at its point and said undecided.

**The walk** (``next_sessions``): 1, 2, 4 ... sessions until a rung fails, then bisection between the most that
held and the fewest that failed, down to adjacent integers (AgentPerf ramps exponentially, then binary-searches).
``agent_answer`` states the most that held, the bracket it was read in, and its status: ``settled`` where both
rungs of the bracket were decided, ``undecided`` where one was not (the answer is the point reading's; where one
session failed, not significantly, the bracket is 0 to 1 and the answer none), ``unsaturated`` where no rung
failed up to the largest asked (a lower bound), ``none`` where one session fails significantly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from satbench.core.agents import AgentTier
from satbench.core.statistics import batch_mean_estimate, exceedance_p_value, quantile, shortfall_p_value

__all__ = ["AgentAnswer", "AgentRung", "AgentVerdict", "agent_answer", "judge_rung", "next_sessions"]

TTFT_SHARE = 0.05  # turns a p95 ceiling lets past it
SPEED_SHARE = 0.25  # turns a p25 floor lets below it
BATCHES = 10  # equal batches of turns in send order, for the interval that counts their dependence


@dataclass(frozen=True, slots=True)
class AgentRung:
    """One rung's turns (those of its window), in the order they were sent: each one's send time, TTFT (None:
    no first token, a turn past any ceiling) and output speed (None for a one-token turn)."""

    sessions: int
    turns: tuple[tuple[float, float | None, float | None], ...]


@dataclass(frozen=True, slots=True)
class AgentVerdict:
    sessions: int
    holds: bool
    decided: bool
    ttft_p95_s: float | None
    speed_p25_tok_s: float | None
    said: str


def _batched(flags: list[bool], confidence: float) -> tuple[float, float] | None:
    """The interval of the share of ``flags`` (in send order) from ``BATCHES`` equal batches in a row, their
    autocorrelation counted (``core.statistics.batch_mean_estimate``): turns of one session and of one busy
    stretch are not independent, which the count test assumes."""
    size = len(flags) // BATCHES
    if size < 1:
        return None
    shares = [sum(flags[i * size:(i + 1) * size]) / size for i in range(BATCHES)]
    estimate = batch_mean_estimate(shares)
    return None if estimate is None else estimate.interval(confidence)


def _one(flags: list[bool], share: float, confidence: float) -> tuple[bool, bool]:
    """(within the share at the point reading, significant either way) for the turns flagged past the limit:
    significant where the count test and the batches' interval both say so."""
    k, n = sum(flags), len(flags)
    within = k <= share * n
    p = shortfall_p_value(k, n, share) if within else exceedance_p_value(k, n, 1.0 - share)
    interval = _batched(flags, confidence)
    batched = interval is not None and (interval[1] < share if within else interval[0] > share)
    return within, p < 1.0 - confidence and batched


def judge_rung(rung: AgentRung, tier: AgentTier, confidence: float = 0.95) -> AgentVerdict:
    """The tier at one rung (module docstring)."""
    if not rung.turns:
        return AgentVerdict(rung.sessions, False, False, None, None, "no turn in the window")
    late = [t is None or t > tier.ttft_s for _, t, _ in rung.turns]
    slow = [s < tier.speed_tok_s for _, _, s in rung.turns if s is not None]
    ttft_ok, ttft_sure = _one(late, TTFT_SHARE, confidence)
    speed_ok, speed_sure = _one(slow, SPEED_SHARE, confidence) if slow else (True, True)
    holds = ttft_ok and speed_ok
    broken_sure = (not ttft_ok and ttft_sure) or (not speed_ok and speed_sure)
    decided = broken_sure if not holds else (ttft_sure and speed_sure)
    ttft = sorted(t for _, t, _ in rung.turns if t is not None)
    speed = sorted(s for _, _, s in rung.turns if s is not None)
    said = (f"{sum(late)} of {len(late)} turns past the {tier.ttft_s:g} s TTFT ceiling, {sum(slow)} of {len(slow)} "
            f"below {tier.speed_tok_s:g} tok/s")
    return AgentVerdict(rung.sessions, holds, decided, quantile(ttft, 0.95) if ttft else None,
                        quantile(speed, 0.25) if speed else None, said)


def next_sessions(verdicts: Sequence[AgentVerdict], max_sessions: int) -> int | None:
    """The next rung of the walk, or None when it is over (module docstring)."""
    if not verdicts:
        return 1
    held = [v.sessions for v in verdicts if v.holds]
    failed = [v.sessions for v in verdicts if not v.holds]
    lo = max(held, default=0)
    above = [n for n in failed if n > lo]
    if not above:  # nothing failed yet: double (lo >= 1 here, the first rung having been asked)
        nxt = min(2 * lo, max_sessions)
        return None if nxt <= lo else nxt
    hi = min(above)
    return None if hi - lo <= 1 else (lo + hi) // 2


@dataclass(frozen=True, slots=True)
class AgentAnswer:
    status: str
    max_sessions: int | None
    bracket: tuple[int, int | None] | None
    reason: str | None


def agent_answer(verdicts: Sequence[AgentVerdict]) -> AgentAnswer:
    """The most sessions that held, read from the walk's rungs (module docstring)."""
    by_n = {v.sessions: v for v in verdicts}
    held = [n for n, v in by_n.items() if v.holds]
    if not by_n:
        return AgentAnswer("none", None, None, "no rung was measured")
    lo = max(held, default=0)
    above = [n for n, v in by_n.items() if not v.holds and n > lo]
    if lo == 0:
        first = by_n[min(by_n)]
        if not first.decided:  # one session read past the tier, but not significantly: it may hold
            return AgentAnswer("undecided", None, (0, first.sessions),
                               f"one session read past the tier, not significantly: {first.said}")
        return AgentAnswer("none", None, None, f"one session does not hold the tier: {first.said}")
    if not above:
        return AgentAnswer("unsaturated", lo, (lo, None), f"every rung up to {lo} sessions held the tier")
    hi = min(above)
    sure = by_n[lo].decided and by_n[hi].decided
    reason = None if sure else "a rung of the bracket was not significant either way: read at its point"
    return AgentAnswer("settled" if sure else "undecided", lo, (lo, hi), reason)
