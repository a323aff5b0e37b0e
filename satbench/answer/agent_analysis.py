"""The agent answer: the most concurrent agent sessions a lane holds at an SLO tier, from rungs of ``n``
concurrent session trees, each judged on its turns.

**A rung** holds the tier (``core.agents.AgentTier``, AgentPerf's) when the p95 of its turns' TTFT is within the
ceiling and the p25 of their output speed at least the floor. Each quantile is judged by a count, as every
quantile objective here is (``core.statistics.exceedance_p_value``): the turns past the ceiling against 5 %, the
turns slower than the floor against 25 %. A rung is *decided* when its point reading is also significant at the
policy's confidence (broken: significantly more than the share; held: significantly fewer), else it is read at
its point and said undecided.

**The walk** (``next_sessions``): 1, 2, 4 ... sessions until a rung fails, then bisection between the most that
held and the fewest that failed, down to adjacent integers (AgentPerf ramps exponentially, then binary-searches).
``agent_answer`` states the most that held, the bracket it was read in, and its status: ``settled`` where both
rungs of the bracket were decided, ``undecided`` where one was not (the answer is the point reading's),
``unsaturated`` where no rung failed up to the largest asked (a lower bound), ``none`` where one session fails.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from satbench.core.agents import AgentTier
from satbench.core.statistics import exceedance_p_value, quantile

__all__ = ["AgentAnswer", "AgentRung", "AgentVerdict", "agent_answer", "judge_rung", "next_sessions"]

TTFT_SHARE = 0.05  # turns a p95 ceiling lets past it
SPEED_SHARE = 0.25  # turns a p25 floor lets below it


@dataclass(frozen=True, slots=True)
class AgentRung:
    """One rung's turns (those of its window): each one's TTFT and output speed (a one-token turn has none)."""

    sessions: int
    ttft_s: tuple[float, ...]
    speed_tok_s: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class AgentVerdict:
    sessions: int
    holds: bool
    decided: bool
    ttft_p95_s: float | None
    speed_p25_tok_s: float | None
    said: str


def _below_p_value(k: int, n: int, share: float) -> float:
    """How likely ``k`` or fewer of ``n`` lie past a limit that a ``share`` of the population does."""
    if n <= 0:
        return 1.0
    from scipy import stats

    return float(stats.binom.cdf(k, n, share))


def _one(k: int, n: int, share: float, alpha: float) -> tuple[bool, bool]:
    """(within the share at the point reading, significant either way) for ``k`` of ``n`` past the limit."""
    within = k <= share * n
    p = _below_p_value(k, n, share) if within else exceedance_p_value(k, n, 1.0 - share)
    return within, p < alpha


def judge_rung(rung: AgentRung, tier: AgentTier, confidence: float = 0.95) -> AgentVerdict:
    """The tier at one rung (module docstring)."""
    alpha = 1.0 - confidence
    ttft, speed = sorted(rung.ttft_s), sorted(rung.speed_tok_s)
    if not ttft:
        return AgentVerdict(rung.sessions, False, False, None, None, "no turn with a first token")
    late = sum(t > tier.ttft_s for t in ttft)
    slow = sum(s < tier.speed_tok_s for s in speed)
    ttft_ok, ttft_sure = _one(late, len(ttft), TTFT_SHARE, alpha)
    speed_ok, speed_sure = _one(slow, len(speed), SPEED_SHARE, alpha) if speed else (True, True)
    holds = ttft_ok and speed_ok
    broken_sure = (not ttft_ok and ttft_sure) or (not speed_ok and speed_sure)
    decided = broken_sure if not holds else (ttft_sure and speed_sure)
    said = (f"{late} of {len(ttft)} turns past the {tier.ttft_s:g} s TTFT ceiling, {slow} of {len(speed)} below "
            f"{tier.speed_tok_s:g} tok/s")
    return AgentVerdict(rung.sessions, holds, decided, quantile(ttft, 0.95),
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
        return AgentAnswer("none", None, None, f"one session does not hold the tier: {by_n[min(by_n)].said}")
    if not above:
        return AgentAnswer("unsaturated", lo, (lo, None), f"every rung up to {lo} sessions held the tier")
    hi = min(above)
    sure = by_n[lo].decided and by_n[hi].decided
    reason = None if sure else "a rung of the bracket was not significant either way: read at its point"
    return AgentAnswer("settled" if sure else "undecided", lo, (lo, hi), reason)
