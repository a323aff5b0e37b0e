"""The engine's truth for agent sessions: ``n`` concurrent session trees played in virtual time, and the most
trees a profile holds at an SLO tier.

A tree holds one of ``n`` places from its root's first turn until its root and every sub-agent drained; then a
new tree (the next of the stream) takes the place at once. Each agent sends its next turn when its previous
turn ended (or, where that turn spawned sub-agents, when the last of them ended) plus the turn's tool delay:
end to start, never at recorded times. A turn's prompt is the agent's context as token ids: the system prompt
(shared by every session), the tree's marker (the cache-bust marker: its own ids, so trees never share more
than the system prompt), then the task and, turn by turn, each answer's generated ids and each tool output's
new ids. The engine's prompt cache serves what its slot (or, with ``cache_ram_tokens``, host memory) holds of
it, as llama-server's does. A sub-agent starts from the system prompt, its tree's marker and its own task.

**The tier** (Artificial Analysis' AgentPerf): at ``n`` trees the p95 of the turns' TTFT is within
``ttft_s`` and the p25 of their output speed ((output tokens - 1) over the time from the first token to the
last) at least ``speed_tok_s``: three quarters of the turns stream at least that fast. ``capacity`` is the
largest ``n`` that holds, over a long run at every ``n`` (the first ``warmup_share`` of the run's turns left
out), on the same session stream: doublings until one fails, then bisection to the integer.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from satbench.core.agents import AgentSession, AgentTier
from satbench.core.statistics import quantile
from satbench.simulator.engine import Engine, Request, RequestSpec
from satbench.simulator.profile import Profile
from satbench.simulator.tokens import token_at

__all__ = ["PlayedTurn", "TierResult", "capacity", "play", "tier_holds"]

MARKER_TOKENS = 8  # ``[rid:<12 hex>]`` and a blank line, about eight tokens
_FRESH_IDS = 1 << 24  # ids of new text (markers, tasks, tool outputs): far above the vocabulary's


@dataclass(frozen=True, slots=True)
class PlayedTurn:
    """One turn as the engine served it (model time): when it was ready (its predecessor's end plus its delay),
    sent, first and last token, its prompt and what the cache served of it."""

    tree: int
    agent: str
    turn: int
    ready: float
    sent: float
    first_token: float | None
    last_token: float | None
    prompt_tokens: int
    cached_tokens: int
    output_tokens: int

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token is None else self.first_token - self.sent

    @property
    def speed_tok_s(self) -> float | None:
        """Output tokens after the first over the time they took (None for a turn of one token)."""
        if self.first_token is None or self.last_token is None or self.output_tokens < 2:
            return None
        span = self.last_token - self.first_token
        return (self.output_tokens - 1) / span if span > 0 else None


@dataclass
class _Agent:
    tree: int
    name: str
    session: AgentSession
    ids: tuple[int, ...]  # its context so far
    turn: int = 0
    waiting: int = 0  # sub-agents still running
    parent: _Agent | None = None


class _Player:
    def __init__(self, profile: Profile, sessions: Iterator[AgentSession], n: int, system_tokens: int) -> None:
        self.engine = Engine(profile)
        self.sessions, self.n = sessions, n
        self.system = tuple(range(1, system_tokens + 1))
        self.fresh = itertools.count(_FRESH_IDS)
        self.trees = itertools.count()
        self.ready: list[tuple[float, int, _Agent]] = []
        self.order = itertools.count()
        self.running: dict[str, tuple[_Agent, float, float]] = {}  # request id -> agent, ready, sent
        self.played: list[PlayedTurn] = []
        self.alive: dict[int, int] = {}  # tree -> agents not yet done
        self.markers: dict[int, tuple[int, ...]] = {}

    def _new_ids(self, k: int) -> tuple[int, ...]:
        return tuple(itertools.islice(self.fresh, k))

    def _start_tree(self, at: float) -> None:
        tree = next(self.trees)
        self.markers[tree] = self._new_ids(MARKER_TOKENS)
        self.alive[tree] = 1
        self._schedule(_Agent(tree, "0", next(self.sessions), self.system + self.markers[tree]), at)

    def _schedule(self, agent: _Agent, since: float) -> None:
        at = since + agent.session.turns[agent.turn].delay_s
        heapq.heappush(self.ready, (at, next(self.order), agent))

    def _send(self, agent: _Agent, ready: float, now: float) -> None:
        turn = agent.session.turns[agent.turn]
        if turn.fresh:  # compacted: the context starts again from the system prompt and the marker
            agent.ids = self.system + self.markers[agent.tree]
        agent.ids = agent.ids + self._new_ids(turn.new_tokens)
        rid = f"t{agent.tree}-a{agent.name}-k{agent.turn}"
        key = next(self.fresh)
        self.engine.submit(RequestSpec(rid, len(agent.ids), turn.output_tokens, ignore_eos=True,
                                       user=str(agent.tree), prompt_ids=agent.ids, text_key=key), now)
        agent.ids = agent.ids + tuple(token_at(key, j)[0] for j in range(turn.output_tokens))
        self.running[rid] = (agent, ready, now)

    def _ended(self, request: Request, end: float) -> None:
        agent, ready, sent = self.running.pop(request.spec.request_id)
        turn = agent.session.turns[agent.turn]
        self.played.append(PlayedTurn(agent.tree, agent.name, agent.turn, ready, sent, request.first_token,
                                      request.last_token, request.spec.prompt_tokens, request.cache_n,
                                      request.output))
        for j, child in enumerate(turn.spawns):  # named by the turn that spawned it: "0.3-1", turn 3's second
            sub = _Agent(agent.tree, f"{agent.name}.{agent.turn}-{j}", child, self.system + self.markers[agent.tree],
                         parent=agent)
            agent.waiting += 1
            self.alive[agent.tree] += 1
            self._schedule(sub, end)
        agent.turn += 1
        if not turn.spawns:
            self._next(agent, end)

    def _next(self, agent: _Agent, end: float) -> None:
        """``agent``'s turn (and its sub-agents) ended at ``end``: its next turn, or its end."""
        if agent.turn < len(agent.session.turns):
            self._schedule(agent, end)
            return
        self.alive[agent.tree] -= 1
        parent = agent.parent
        if parent is not None:
            parent.waiting -= 1
            if parent.waiting == 0:
                self._next(parent, end)
        elif self.alive[agent.tree] == 0:
            del self.alive[agent.tree], self.markers[agent.tree]
            self._start_tree(end)

    def run(self, turns: int) -> list[PlayedTurn]:
        for _ in range(self.n):
            self._start_tree(0.0)
        now = 0.0
        while len(self.played) < turns:
            while self.ready and self.ready[0][0] <= now:
                ready, _, agent = heapq.heappop(self.ready)
                self._send(agent, ready, now)
            plan = self.engine.begin_step(now)
            if plan is None:
                if not self.ready:
                    break
                now = self.ready[0][0]
                continue
            result = self.engine.finish_step()
            now = result.end
            for e in result.emissions:
                if e.finished:
                    self._ended(e.request, now)
        return self.played


def play(profile: Profile, sessions: Iterator[AgentSession], n: int, *, turns: int,
         system_tokens: int = 2000) -> list[PlayedTurn]:
    """``n`` concurrent trees of ``sessions`` played until ``turns`` turns ended (module docstring)."""
    if n < 1 or turns < 1:
        raise ValueError("need n >= 1 and turns >= 1")
    return _Player(profile, sessions, n, system_tokens).run(turns)


@dataclass(frozen=True, slots=True)
class TierResult:
    n: int
    holds: bool
    ttft_p95_s: float | None
    speed_p25_tok_s: float | None
    turns: int


def tier_holds(played: list[PlayedTurn], n: int, tier: AgentTier, warmup_share: float = 0.1) -> TierResult:
    """The tier at ``n`` from a run's turns, the first ``warmup_share`` of them (by send time) left out."""
    kept = sorted(played, key=lambda p: p.sent)[int(warmup_share * len(played)):]
    ttft = sorted(t for p in kept if (t := p.ttft_s) is not None)
    speed = sorted(s for p in kept if (s := p.speed_tok_s) is not None)
    p95 = quantile(ttft, 0.95) if ttft else None
    p25 = quantile(speed, 0.25) if speed else None
    holds = p95 is not None and p95 <= tier.ttft_s and (p25 is None or p25 >= tier.speed_tok_s)
    return TierResult(n, holds, p95, p25, len(kept))


def capacity(profile: Profile, sessions: Callable[[], Iterator[AgentSession]], tier: AgentTier, *, turns: int,
             system_tokens: int = 2000, max_n: int = 256) -> tuple[int, list[TierResult]]:
    """The most concurrent trees that hold ``tier`` (0: not even one), and every ``n`` tried. ``sessions`` gives
    the same stream each call (common random numbers)."""
    tried: dict[int, TierResult] = {}

    def at(n: int) -> bool:
        if n not in tried:
            tried[n] = tier_holds(play(profile, sessions(), n, turns=turns, system_tokens=system_tokens), n, tier)
        return tried[n].holds

    if not at(1):
        return 0, list(tried.values())
    lo, hi = 1, 2
    while hi <= max_n and at(hi):
        lo, hi = hi, hi * 2
    hi = min(hi, max_n + 1)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if at(mid) else (lo, mid)
    return lo, sorted(tried.values(), key=lambda r: r.n)
