"""A lane's agent walk as the manifest keeps it: the tier it was judged at, where its sessions came from, and each
rung of ``n`` concurrent session trees with its verdict, its figures and its validity stamp.

The walk (``loadgen.agent_walk``) plays session trees end to start (``core.agents``) and judges each rung's
window of turns at the tier (``answer.agent_analysis.judge_rung``); the answer is read from these rungs
(``answer.agent_analysis.agent_answer``), whichever path the rest of the run's figures took.

**The validity stamp** of a rung (AIPerf's AgentX rules where it has one): more than ``MAX_OVERFLOW_SHARE`` of the
window's turns refused for exceeding the context makes the rung invalid (AgentX: a run with more than 1 %
context overflows is invalid); a client whose event loop lagged past the run's ``max_loop_lag_s`` at its p99 made
the turns' times its own and the rung invalid; a rung with fewer judged turns than ``MIN_TURNS`` says too little.
The tool delays cut at the cap (idle gaps a capacity test does not wait out) and the sessions cut to fit the
context are counted and said, never hidden.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, FiniteFloat

__all__ = ["MAX_OVERFLOW_SHARE", "MIN_TURNS", "AgentRungWindow", "AgentWalk"]

MAX_OVERFLOW_SHARE = 0.01  # AgentX: a run with more than 1 % context overflows is invalid
MIN_TURNS = 20  # fewer judged turns than this say nothing of a p95 (one late turn is 5 %)


class AgentRungWindow(BaseModel):
    """One rung of the walk: ``sessions`` concurrent trees, its window and what its turns said."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    sessions: Annotated[int, Field(ge=1)]
    start: FiniteFloat
    end: FiniteFloat
    turns: Annotated[int, Field(ge=0)]  # turns sent inside the window
    judged: Annotated[int, Field(ge=0)]  # of them, those the tier was judged on (not overflows, not censored)
    holds: bool
    decided: bool
    said: str
    ttft_p95_s: FiniteFloat | None = None
    speed_p25_tok_s: FiniteFloat | None = None
    output_tok_s: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.0  # window turns' output per window second
    trees_started: Annotated[int, Field(ge=0)] = 0
    trees_done: Annotated[int, Field(ge=0)] = 0
    failed: Annotated[int, Field(ge=0)] = 0  # window turns that ended without an answer (counted late)
    overflows: Annotated[int, Field(ge=0)] = 0  # window turns the runtime refused for the context
    censored: Annotated[int, Field(ge=0)] = 0  # window turns cut at the drain before the ceiling passed
    capped_delays: Annotated[int, Field(ge=0)] = 0  # tool delays of the window's turns cut at the cap
    cut_sessions: Annotated[int, Field(ge=0)] = 0  # trees started in the rung that were cut to fit the context
    prompt_tokens: Annotated[int, Field(ge=0)] = 0  # the runtime's own count over the window's answered turns
    cached_prompt_tokens: Annotated[int, Field(ge=0)] | None = None  # what its prompt cache served of them
    loop_lag_p99_s: FiniteFloat | None = None
    valid: bool = True
    reason: str | None = None

    @property
    def cache_hit_share(self) -> float | None:
        """The share of the window's prompt tokens the runtime's prompt cache served (its own counters)."""
        if self.cached_prompt_tokens is None or self.prompt_tokens <= 0:
            return None
        return self.cached_prompt_tokens / self.prompt_tokens


class AgentWalk(BaseModel):
    """A lane's agent walk in the manifest: its tier, its sessions' source and its rungs in walk order."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ttft_s: Annotated[float, Field(gt=0, allow_inf_nan=False)]
    speed_tok_s: Annotated[float, Field(gt=0, allow_inf_nan=False)]
    confidence: Annotated[float, Field(gt=0.5, lt=1.0)] = 0.95
    source: str  # "synthetic" or the trajectory file's name
    source_sha256: str | None = None
    max_context_tokens: Annotated[int, Field(ge=1)]
    tokens_per_word: FiniteFloat | None = None
    window_s: Annotated[float, Field(gt=0, allow_inf_nan=False)]
    rungs: tuple[AgentRungWindow, ...] = ()
    ended: str | None = None  # why the walk stopped before its answer was bracketed (an invalid rung)

    def with_rung(self, rung: AgentRungWindow) -> AgentWalk:
        return self.model_copy(update={"rungs": (*self.rungs, rung)})
