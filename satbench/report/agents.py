"""The agent part of a lane's report: the answer in a sentence, its validity stamp and the walk's rungs.

The answer is the document's ``lanes.<key>.agents`` (``answer.agent_analysis``): the most concurrent agent
sessions the lane holds at its tier (a p95 TTFT ceiling, a p25 output speed floor), read from rungs of session
trees played end to start (``loadgen.agent_walk``).
"""

from __future__ import annotations

from satbench.answer.agent_analysis import AgentsModel

__all__ = ["AGENT_HEADERS", "agents_fact", "agents_sentence", "agents_stamp", "agents_table"]

AGENT_HEADERS = ("sessions", "holds", "turns", "TTFT p95 (s)", "speed p25 (tok/s)", "output tok/s", "cache hit",
                 "valid")


def _tier(a: AgentsModel) -> str:
    return f"p95 TTFT <= {a.ttft_s:g} s, p25 output speed >= {a.speed_tok_s:g} tok/s"


def agents_fact(a: AgentsModel) -> str:
    """The answer in a few words: "6 sessions (settled, 6..7)"."""
    if a.max_sessions is None:
        return f"none hold the tier ({a.status})"
    bound = "at least " if a.status == "unsaturated" else ""
    bracket = "" if a.bracket is None else f", {a.bracket[0]}..{a.bracket[1] if a.bracket[1] else '?'}"
    return f"{bound}{a.max_sessions} sessions ({a.status}{bracket})"


def agents_sentence(a: AgentsModel) -> str:
    """The answer, its tier and its figures at the answer's rung, in one sentence."""
    said = f"concurrent agent sessions at the tier ({_tier(a)}): {agents_fact(a)}"
    if a.reason:
        said += f": {a.reason}"
    if a.output_tok_s is not None:
        said += f"; there {a.output_tok_s:,.0f} output tok/s ({a.output_tok_s_per_session or 0:,.1f} a session)"
    if a.cache_hit_share is not None:
        said += f", the prompt cache served {a.cache_hit_share:.0%} of the prompt tokens"
    e = a.energy
    if e is not None and e.watts is not None:
        said += f"; {e.watts:,.0f} W ({e.scope})"
        if e.sessions_per_kw is not None:
            said += f", {e.sessions_per_kw:,.1f} sessions per kW"
    if e is not None and e.cost_per_agent_hour is not None:
        said += f", {e.cost_per_agent_hour:,.3f} {e.currency or ''} an agent-hour".replace("  ", " ")
    return said + f"; sessions: {a.source}, contexts up to {a.max_context_tokens:,} tokens"


def agents_stamp(a: AgentsModel) -> list[str]:
    """The validity stamp as lines."""
    v = a.validity
    lines = [f"validity: {'valid' if v.valid else 'invalid'} (context overflows "
             f"{'-' if v.overflow_share is None else f'{v.overflow_share:.1%}'}, tool delays cut at the cap "
             f"{'-' if v.capped_delay_share is None else f'{v.capped_delay_share:.1%}'}, sessions cut to the "
             f"context {v.cut_sessions}, client loop lag p99 "
             f"{'-' if v.loop_lag_p99_s is None else f'{v.loop_lag_p99_s * 1e3:.1f} ms'})"]
    return lines + list(v.notes)


def agents_table(a: AgentsModel) -> tuple[tuple[str, ...], list[list[str]]]:
    """The walk's rungs in walk order."""
    rows = [[str(r.sessions), ("yes" if r.holds else "no") + ("" if r.decided else " (not significant)"),
             f"{r.judged} of {r.turns}", "" if r.ttft_p95_s is None else f"{r.ttft_p95_s:.2f}",
             "" if r.speed_p25_tok_s is None else f"{r.speed_p25_tok_s:,.0f}", f"{r.output_tok_s:,.0f}",
             "" if r.cache_hit_share is None else f"{r.cache_hit_share:.0%}",
             "yes" if r.valid else f"no: {r.reason}"] for r in a.rungs]
    return AGENT_HEADERS, rows
