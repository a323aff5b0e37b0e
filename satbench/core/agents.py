"""Agent sessions: trees of turns whose context grows, drawn from published distributions or read from a
recorded trajectory corpus. The workload of the agent answer ("how many concurrent agents a node serves").

**The shape** (AIPerf's AgentX scenario, Artificial Analysis' AgentPerf): a session is a root agent working
through turns. Each turn sends the session's whole context so far (the shared system prompt and tool
definitions, the task, every earlier answer and every tool output appended since) and streams an answer; the
next turn is sent when the previous one ended plus a tool-call delay (end to start, never at recorded
timestamps: firing at timestamps made tail latency about 30 % worse in a published ablation). A turn may spawn
sub-agents when it ends, each a session of its own with a fresh context (the corpora's "spawn"); the parent's
next turn waits until all of them drained. A session tree holds its place in the concurrency count until all of
it drained, as AgentX counts it. Each played session opens with its own marker (the cache-bust marker), so
plays never share a prompt cache beyond the system prompt.

**Synthetic sessions** (``SyntheticAgents``): lognormal draws of the turns, the tokens each turn appends, its
output and its tool delay, from published figures of real coding agents:

- tokens appended per model call: median 875, output per call median 214, tool time per call median 0.3 s and
  p90 13.6 s (TraceLab: 357,161 model calls of Claude Code and Codex sessions, arXiv 2606.30560);
- tool delays capped at 10 s (AgentX caps recorded gaps at 10 s; TraceLab's long tail is human waits and slow
  builds, which a capacity test must not wait out);
- 11.8 turns per session on average, median 11, p95 25 (AIPerf's synthetic agentic code sessions);
- output heavy-tailed: median about 150, p95 about 2,000 (Artificial Analysis' AgentPerf corpus);
- sub-agents: no published rate; off unless configured (``spawn_share``).

Real sessions' contexts reach 100k+ tokens; a lane's context is what it is, so ``max_context_tokens`` ends a
session before a turn would not fit (the corpora's sessions end or compact there too), and the session says it
was cut. The figures are defaults, each a setting.

**Recorded sessions** (``read_weka_sessions``): the SemiAnalysis Claude Code corpora (``cc-traces-weka-*``,
Apache-2.0), one JSON object per session, a line each: ``requests`` in order, each ordinary request (``type``
``n`` or ``s``) with its input tokens ``in`` (the whole context), ``out``, its send time ``t`` and ``api_time``;
a ``subagent`` entry with its own ``requests``. A turn's appended tokens are its context less the previous
turn's context and output (a context that shrank was compacted: the turn starts a fresh context), its delay
the time from the previous request's end (``t + api_time``) to its own ``t``, capped at 10 s. A sub-agent
entry spawns after the turn before it. The whole file is read and checked first; a bad line is refused in one
line naming the file and the line, and nothing is played.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

__all__ = ["DELAY_CAP_S", "AgentSession", "AgentTier", "AgentTurn", "SyntheticAgents", "TrajectoryError",
           "read_weka_sessions"]

DELAY_CAP_S = 10.0  # AgentX's cap on a recorded gap between turns


@dataclass(frozen=True, slots=True)
class AgentTier:
    """An SLO tier (Artificial Analysis' AgentPerf): the p95 of the turns' TTFT within ``ttft_s`` and the p25 of
    their output speed ((output tokens - 1) over the time from the first token to the last) at least
    ``speed_tok_s``."""

    ttft_s: float
    speed_tok_s: float

    def __post_init__(self) -> None:
        if not (self.ttft_s > 0 and self.speed_tok_s > 0):
            raise ValueError("a tier's TTFT ceiling and output speed floor must be positive")


class TrajectoryError(ValueError):
    """A trajectory file that cannot be played; the message names the file and the line."""


@dataclass(frozen=True, slots=True)
class AgentTurn:
    """One model call of a session: ``new_tokens`` appended to the context before it (the task on the first
    turn, a tool's output after), its ``output_tokens``, the tool delay ``delay_s`` from the end of what it
    waits for to its send, and the sub-agents it spawns when it ends (its session's next turn waits for them)."""

    new_tokens: int
    output_tokens: int
    delay_s: float = 0.0
    spawns: tuple[AgentSession, ...] = ()
    fresh: bool = False  # the context was compacted before this turn: it starts again from the system prompt


@dataclass(frozen=True, slots=True)
class AgentSession:
    """A session: its turns in order; ``cut`` where it was ended early to fit the lane's context."""

    turns: tuple[AgentTurn, ...]
    cut: bool = False

    def contexts(self, system_tokens: int) -> list[int]:
        """Each turn's prompt length: the system prompt, then every earlier turn's appended tokens and output
        (from the last compaction on), then its own appended tokens."""
        out, held = [], system_tokens
        for turn in self.turns:
            if turn.fresh:
                held = system_tokens
            held += turn.new_tokens
            out.append(held)
            held += turn.output_tokens
        return out

    def requests(self) -> int:
        """Model calls in the tree: its turns and its sub-agents'."""
        return sum(1 + sum(s.requests() for s in t.spawns) for t in self.turns)

    def largest_context(self, system_tokens: int) -> int:
        """The most tokens any call of the tree holds (its prompt and its output)."""
        own = max((c + t.output_tokens for c, t in zip(self.contexts(system_tokens), self.turns, strict=True)),
                  default=0)
        return max([own, *(s.largest_context(system_tokens) for t in self.turns for s in t.spawns)])


def _lognormal(rng: random.Random, median: float, sigma: float, low: float, high: float) -> float:
    return min(high, max(low, median * math.exp(sigma * rng.gauss(0.0, 1.0))))


@dataclass(frozen=True, slots=True)
class SyntheticAgents:
    """Seeded synthetic sessions (module docstring gives each default's source). Lognormal (median, sigma)
    draws clamped to their bounds; ``spawn_share`` of turns spawn ``spawns`` sub-agents of ``spawn_turns``."""

    turns_median: float = 11.0
    turns_sigma: float = 0.55  # median 11, p95 about 25 (AIPerf)
    new_median: float = 875.0
    new_sigma: float = 1.0
    task_tokens: int = 1000
    output_median: float = 214.0
    output_sigma: float = 1.5  # a tail to about 2,000 at p95
    output_max: int = 2048
    delay_median_s: float = 0.3
    delay_sigma: float = 2.9  # p90 13.6 s before the cap
    delay_cap_s: float = DELAY_CAP_S
    spawn_share: float = 0.0
    spawns: int = 2
    spawn_turns_median: float = 4.0
    max_turns: int = 200
    max_context_tokens: int = 32768
    system_tokens: int = 2000
    tokens_floor: int = 16

    def __post_init__(self) -> None:
        if self.max_context_tokens <= self.system_tokens + self.task_tokens + self.tokens_floor:
            raise ValueError("max_context_tokens leaves no room for a turn after the system prompt and the task")
        if not 0.0 <= self.spawn_share <= 1.0:
            raise ValueError("spawn_share must lie in [0, 1]")

    def session(self, rng: random.Random, depth: int = 0) -> AgentSession:
        """One session tree (sub-agents one level deep: the corpora's spawns do not spawn)."""
        median = self.turns_median if depth == 0 else self.spawn_turns_median
        n = round(_lognormal(rng, median, self.turns_sigma, 1, self.max_turns))
        turns: list[AgentTurn] = []
        held = self.system_tokens
        for k in range(n):
            new = self.task_tokens if k == 0 else round(_lognormal(rng, self.new_median, self.new_sigma,
                                                                   self.tokens_floor, 16 * self.new_median))
            out = round(_lognormal(rng, self.output_median, self.output_sigma, 1, self.output_max))
            if held + new + out > self.max_context_tokens:
                return AgentSession(tuple(turns), cut=True) if turns else self._fit()
            delay = 0.0 if k == 0 else _lognormal(rng, self.delay_median_s, self.delay_sigma, 0.0, self.delay_cap_s)
            spawns: tuple[AgentSession, ...] = ()
            if depth == 0 and self.spawn_share and rng.random() < self.spawn_share:
                spawns = tuple(self.session(rng, depth + 1) for _ in range(self.spawns))
            turns.append(AgentTurn(new, out, delay, spawns))
            held += new + out
        return AgentSession(tuple(turns))

    def _fit(self) -> AgentSession:
        """A first turn whose output did not fit: the task with what output room is left."""
        room = self.max_context_tokens - self.system_tokens - self.task_tokens
        return AgentSession((AgentTurn(self.task_tokens, max(1, min(room, self.output_max))),), cut=True)

    def stream(self, seed: int) -> Iterator[AgentSession]:
        """Sessions without end, the same for the same seed."""
        rng = random.Random(seed)
        while True:
            yield self.session(rng)


# --- recorded sessions ----------------------------------------------------------------------------------------


def _number(entry: Mapping[str, Any], key: str, where: str, *, required: bool = True) -> float | None:
    value = entry.get(key)
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise TrajectoryError(f"{where}: {key!r} must be a non-negative number, got {value!r}")
    return float(value)


def _weka_session(requests: Any, where: str, depth: int = 0) -> AgentSession:
    """One session's (or sub-agent's) ordinary requests as turns; a sub-agent spawns after the turn before it
    (one listed before any turn, after the first)."""
    if not isinstance(requests, list) or not requests:
        raise TrajectoryError(f"{where}: 'requests' must be a non-empty list")
    turns: list[AgentTurn] = []
    spawned: dict[int, list[AgentSession]] = {}
    prev_context: float | None = None
    prev_out = prev_end = 0.0
    for i, entry in enumerate(requests):
        at = f"{where} request {i}"
        if not isinstance(entry, Mapping):
            raise TrajectoryError(f"{at}: not an object")
        kind = entry.get("type")
        if kind == "subagent":
            if depth > 0:
                raise TrajectoryError(f"{at}: a sub-agent inside a sub-agent is not supported")
            child = _weka_session(entry.get("requests"), f"{at} (sub-agent)", depth + 1)
            spawned.setdefault(max(0, len(turns) - 1), []).append(child)
            continue
        if kind not in ("n", "s"):
            raise TrajectoryError(f"{at}: 'type' must be 'n', 's' or 'subagent', got {kind!r}")
        context, out, t = _number(entry, "in", at), _number(entry, "out", at), _number(entry, "t", at)
        api = _number(entry, "api_time", at, required=False) or 0.0
        assert context is not None and out is not None and t is not None
        if context < 1:
            raise TrajectoryError(f"{at}: 'in' must be at least 1 token")
        grown = None if prev_context is None else context - prev_context - prev_out
        fresh = grown is not None and grown < 0  # the context shrank: compacted, a fresh context from here
        new = int(context if grown is None or fresh else grown)
        delay = 0.0 if prev_context is None else min(DELAY_CAP_S, max(0.0, t - prev_end))
        turns.append(AgentTurn(new, int(out), delay, (), fresh))
        prev_context, prev_out, prev_end = context, out, t + api
    if not turns:
        raise TrajectoryError(f"{where}: no ordinary request ('n' or 's')")
    for k, children in spawned.items():
        turns[k] = replace(turns[k], spawns=tuple(children))
    return AgentSession(tuple(turns))


def read_weka_sessions(path: Path) -> tuple[AgentSession, ...]:
    """Every session of a ``cc-traces-weka`` file (one JSON object a line; a ``.json`` file holding one object
    is one session), read and checked whole before anything is played (module docstring)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TrajectoryError(f"{path}: cannot read: {exc}") from exc
    stripped = text.strip()
    if path.suffix == ".json" and stripped.startswith("{") and "\n{" not in stripped:
        lines = [(1, stripped)]
    else:
        lines = [(n, line) for n, line in enumerate(text.splitlines(), start=1) if line.strip()]
    if not lines:
        raise TrajectoryError(f"{path}: no session in the file")
    sessions = []
    for n, line in lines:
        where = f"{path}:{n}"
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TrajectoryError(f"{where}: not JSON ({exc.msg})") from exc
        if not isinstance(data, Mapping):
            raise TrajectoryError(f"{where}: a session must be a JSON object")
        sessions.append(_weka_session(data.get("requests"), where))
    return tuple(sessions)
