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
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from satbench.answer.policy import Cost
from satbench.core.agent_walk import AgentRungWindow, AgentWalk
from satbench.core.agents import AgentTier
from satbench.core.energy import EnergyFigures, cost_per_million_tokens, tokens_per_s_per_kw
from satbench.core.statistics import batch_mean_estimate, exceedance_p_value, quantile, shortfall_p_value

__all__ = ["AgentAnswer", "AgentEnergyModel", "AgentRung", "AgentRungModel", "AgentValidityModel", "AgentVerdict",
           "AgentsModel", "agent_answer", "agents_model", "answer_rung", "judge_rung", "next_sessions", "walk_verdicts"]

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


# --- the lane's agent answer in the document ---------------------------------------------------------------------

AGENTX_MIN_WINDOW_S = 900.0  # AgentX's shortest run; shorter windows are said, not refused


def walk_verdicts(walk: AgentWalk) -> list[AgentVerdict]:
    """A walk's rungs (``core.agent_walk``) as the judge's verdicts: an invalid rung neither held nor was decided."""
    return [AgentVerdict(r.sessions, r.holds and r.valid, r.decided and r.valid, r.ttft_p95_s, r.speed_p25_tok_s,
                         r.said) for r in walk.rungs]


class AgentRungModel(BaseModel):
    """One rung of the walk as the document says it."""

    model_config = ConfigDict(extra="forbid")

    sessions: int
    holds: bool
    decided: bool
    valid: bool
    reason: str | None
    said: str
    turns: int = Field(description="turns sent inside the window")
    judged: int = Field(description="turns the tier was judged on (not overflows, not cut by the drain)")
    ttft_p95_s: float | None
    speed_p25_tok_s: float | None
    output_tok_s: float = Field(description="output tokens of the window's turns per second of the window")
    cache_hit_share: float | None = Field(description="the share of the window's prompt tokens the runtime's "
                                                      "prompt cache served, by the runtime's own counts")
    trees_done: int
    overflows: int
    censored: int
    capped_delays: int
    cut_sessions: int


class AgentValidityModel(BaseModel):
    """The walk's validity stamp (``core.agent_walk``)."""

    model_config = ConfigDict(extra="forbid")

    valid: bool = Field(description="false where a rung of the answer's bracket is invalid")
    overflow_share: float | None = Field(description="context overflows over the turns of every rung")
    capped_delay_share: float | None = Field(description="tool delays cut at the cap over the turns of every rung")
    cut_sessions: int = Field(description="sessions cut to fit the lane's context")
    loop_lag_p99_s: float | None = Field(description="the client's worst p99 event-loop lag over the rungs")
    window_s: float
    agentx_duration: bool = Field(description="each window at least AgentX's 900 s")
    notes: list[str] = Field(default_factory=list)


class AgentEnergyModel(BaseModel):
    """Energy and cost at the agent answer's rung (``core.energy`` over its window): agents per kilowatt and what an
    agent-hour costs on a node at the policy's price."""

    model_config = ConfigDict(extra="forbid")

    scope: Literal["gpu", "cpu-package"] | None = Field(description="what the energy covers (answer.energy)")
    source: str | None = None
    watts: float | None = Field(description="mean draw over the rung's window, watts")
    joules_per_token: float | None = None
    sessions_per_kw: float | None = Field(description="concurrent sessions held per kilowatt drawn")
    tok_s_per_kw: float | None = None
    price_per_hour: float | None = Field(description="the node's price per hour (policy.cost)")
    currency: str | None = None
    cost_per_agent_hour: float | None = Field(description="the node's price over the sessions it holds")
    cost_per_million_tokens: float | None = None
    reason: str | None = Field(None, description="why a figure is missing")


class AgentsModel(BaseModel):
    """The most concurrent agent sessions the lane holds at the tier, its bracket, and the figures at it."""

    model_config = ConfigDict(extra="forbid")

    status: str = Field(description="settled, undecided, unsaturated or none (answer.agent_analysis)")
    max_sessions: int | None
    bracket: list[int | None] | None
    reason: str | None
    ttft_s: float = Field(description="the tier's p95 TTFT ceiling")
    speed_tok_s: float = Field(description="the tier's p25 output speed floor")
    source: str = Field(description="synthetic sessions, or the trajectory file played")
    source_sha256: str | None = None
    max_context_tokens: int
    output_tok_s: float | None = Field(None, description="output tokens per second at the answer's rung")
    output_tok_s_per_session: float | None = None
    cache_hit_share: float | None = None
    ttft_p95_s: float | None = None
    speed_p25_tok_s: float | None = None
    validity: AgentValidityModel
    energy: AgentEnergyModel | None = Field(None, description="energy and cost at the answer's rung; absent "
                                                              "without an answer")
    rungs: list[AgentRungModel]


def _rung_model(r: AgentRungWindow) -> AgentRungModel:
    return AgentRungModel(
        sessions=r.sessions, holds=r.holds, decided=r.decided, valid=r.valid, reason=r.reason, said=r.said,
        turns=r.turns, judged=r.judged, ttft_p95_s=r.ttft_p95_s, speed_p25_tok_s=r.speed_p25_tok_s,
        output_tok_s=r.output_tok_s, cache_hit_share=r.cache_hit_share, trees_done=r.trees_done,
        overflows=r.overflows, censored=r.censored, capped_delays=r.capped_delays, cut_sessions=r.cut_sessions)


def _validity(walk: AgentWalk, answer: AgentAnswer) -> AgentValidityModel:
    rungs = walk.rungs
    turns = sum(r.turns for r in rungs)
    bracket = [] if answer.bracket is None else [n for n in answer.bracket if n]
    invalid = [r for r in rungs if not r.valid and r.sessions in bracket]
    lags = [r.loop_lag_p99_s for r in rungs if r.loop_lag_p99_s is not None]
    notes = [f"{r.sessions} sessions: {r.reason}" for r in rungs if not r.valid]
    if walk.window_s < AGENTX_MIN_WINDOW_S:
        notes.append(f"windows of {walk.window_s:g} s, shorter than AgentX's {AGENTX_MIN_WINDOW_S:g} s runs")
    return AgentValidityModel(
        valid=not invalid, overflow_share=sum(r.overflows for r in rungs) / turns if turns else None,
        capped_delay_share=sum(r.capped_delays for r in rungs) / turns if turns else None,
        cut_sessions=sum(r.cut_sessions for r in rungs), loop_lag_p99_s=max(lags, default=None),
        window_s=walk.window_s, agentx_duration=walk.window_s >= AGENTX_MIN_WINDOW_S, notes=notes)


def answer_rung(walk: AgentWalk, answer: AgentAnswer | None = None) -> AgentRungWindow | None:
    """The rung the walk's answer (``answer``, else read here) was read at (None: no session held)."""
    answer = answer or agent_answer(walk_verdicts(walk))
    return next((r for r in walk.rungs if r.sessions == answer.max_sessions), None)


def _energy(at: AgentRungWindow | None, energy: EnergyFigures | None, cost: Cost | None, node: str,
            unread: str) -> AgentEnergyModel | None:
    if at is None:
        return None
    e = energy or EnergyFigures()
    price = None if cost is None else cost.price(node)
    watts = e.watts
    reason = None if e.scope is not None else unread
    return AgentEnergyModel(
        scope=e.scope, source=e.gpu_source if e.scope == "gpu" else "rapl" if e.scope == "cpu-package" else None,
        watts=watts, joules_per_token=e.joules_per_token,
        sessions_per_kw=None if not watts else at.sessions / (watts / 1000.0),
        tok_s_per_kw=tokens_per_s_per_kw(at.output_tok_s, watts), price_per_hour=price,
        currency=None if price is None or cost is None else cost.currency,
        cost_per_agent_hour=None if price is None else price / at.sessions,
        cost_per_million_tokens=cost_per_million_tokens(price, at.output_tok_s), reason=reason)


def agents_model(walk: AgentWalk, energy: EnergyFigures | None = None, cost: Cost | None = None,
                 node: str = "", unread: str = "no energy reading in the answer's window") -> AgentsModel:
    """The lane's agent answer from its walk (the manifest's ``agents``), with its figures at the answer's rung,
    its validity stamp and, read over that rung's window (``energy``), its energy and, with a price, its cost."""
    answer = agent_answer(walk_verdicts(walk))
    at = answer_rung(walk, answer)
    return AgentsModel(
        status=answer.status, max_sessions=answer.max_sessions,
        bracket=None if answer.bracket is None else list(answer.bracket), reason=answer.reason,
        ttft_s=walk.ttft_s, speed_tok_s=walk.speed_tok_s, source=walk.source, source_sha256=walk.source_sha256,
        max_context_tokens=walk.max_context_tokens,
        output_tok_s=None if at is None else at.output_tok_s,
        output_tok_s_per_session=None if at is None else at.output_tok_s / at.sessions,
        cache_hit_share=None if at is None else at.cache_hit_share,
        ttft_p95_s=None if at is None else at.ttft_p95_s, speed_p25_tok_s=None if at is None else at.speed_p25_tok_s,
        validity=_validity(walk, answer), energy=_energy(at, energy, cost, node, unread),
        rungs=[_rung_model(r) for r in walk.rungs])
