"""A lane's agent walk (``[loadgen.agents]``): rungs of ``n`` concurrent agent session trees, each judged at an SLO
tier, 1, 2, 4 ... sessions until one fails, then bisection (``answer.agent_analysis``); after the ladder.

**A rung** (``AgentRung``) holds ``n`` places. Each place plays one session tree (``core.agents``) after another:
the next tree of the walk's stream takes the place as soon as the last one drained, so ``n`` trees are always in
play (AIPerf's AgentX counts concurrency so: a root and its sub-agents hold their place until all of them drained).
An agent sends each turn when its previous turn ended, or where that turn spawned sub-agents when the last of them
ended, plus the turn's tool delay: end to start, timed here, never at recorded times. Each turn's prompt is the
agent's context so far: the system prompt (the same for every session of the walk, as an agent harness's tool
definitions are), the tree's marker (the cache-bust marker, a digest unique to the run, the lane and the tree, so
trees never share a prompt cache beyond the system prompt), the task, then turn by turn each answer as received and
each tool output's new text (words of the run's prepared text, sized in the runtime's tokens by its ``/tokenize``).
A sub-agent starts from the system prompt, its tree's marker and its own task, as a coding agent's sub-agents do.
**Steady start**: a place's first tree joins at a turn drawn uniformly (seeded by the walk's seed, the rung and the
place), its earlier turns synthesized into its context (each answer the prepared text at its drawn length) and never
sent, so the window sees the mix of context depths a long run does, not every session's opening turns (the engine's
truth, ``simulator.agent_truth``, is read over a long stationary run); the warm-up prefills those contexts, cold,
once. A turn that failed ends its tree (its context cannot go on); the place takes the next tree, after a back-off
that doubles with each failed tree in a row (50 ms to 1 s), so a runtime that refuses is not hammered.
``ignore_eos`` holds every answer to its drawn length.

Each turn is recorded as it ends (``records.jsonl``, ``concurrency`` the rung's sessions, ``user`` the place),
``extra.agent`` saying its tree, its agent (``"7"`` a root, ``"7.2.0"`` the first sub-agent its turn 2 spawned), its
turn, its tool delay, the time it was ready (``ready_at``: its predecessor's end plus the delay) and whether the
delay was cut at the cap: the end-to-start timing is checkable from the records alone. The runtime's own counts
(prompt tokens, what its prompt cache served: ``timings.cache_n`` on llama-server) are the cache figures.

**The window**: the rung's trees start, ``warmup_s`` passes and every place's first turn has ended (the steady
start's cold contexts prefilled; at most a window more), then the turns sent in the next ``window_s`` are the rung's
(a window with fewer than ``core.agent_walk.MIN_TURNS`` turns is held on until it has them, at most ``HOLD_WINDOWS``
windows long: a stop on a count, never on what the turns said); the drain follows them to their end for at most
``drain_s`` with the load kept on, then every turn still in flight is cancelled (recorded ``dropped``). A window
turn without a first token counts past the TTFT ceiling where it failed or waited at least the ceiling, and is left
out (``censored``) where the drain cut it sooner; one the runtime refused for the context is an overflow, left out
of the tier and counted against the rung's validity (``core.agent_walk``).
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from satbench.answer.agent_analysis import AgentRung, agent_answer, judge_rung, next_sessions, walk_verdicts
from satbench.core.agent_walk import MAX_OVERFLOW_SHARE, MIN_TURNS, AgentRungWindow, AgentWalk
from satbench.core.agents import AgentSession, AgentTier, AgentTurn, SyntheticAgents, read_weka_sessions
from satbench.core.records import Phase, RecordsWriter
from satbench.core.sse import StreamParser
from satbench.core.statistics import quantile
from satbench.loadgen.client import LaneClient, RawResult
from satbench.loadgen.config import AgentsConfig, LaneConfig, LoadgenConfig
from satbench.loadgen.request_record import request_record
from satbench.loadgen.selfcheck import LoopLagProbe
from satbench.loadgen.step import Clock
from satbench.loadgen.workload import PromptText, RequestSpec, context_body, request_head

__all__ = ["AgentCorpus", "AgentRun", "AgentWalker", "agent_line", "agent_sessions", "context_limit",
           "load_agent_corpus"]

HOLD_WINDOWS = 4  # the longest a thin window is held on, in windows
CONTEXT_MARGIN_TOKENS = 64  # what a chat template and the marker add to a context the sessions were cut to


def context_limit(cfg: AgentsConfig, slot_context: int | None) -> int:
    """The most a session's call may hold: the configured limit, within a slot's context less a margin."""
    if slot_context is None or slot_context <= 0:
        return cfg.max_context_tokens
    return max(cfg.system_tokens + cfg.task_tokens + 17, min(cfg.max_context_tokens,
                                                                slot_context - CONTEXT_MARGIN_TOKENS))


def _cut(session: AgentSession, limit: int, system_tokens: int) -> AgentSession:
    """A recorded session ended before its first call that would not fit ``limit`` (its sub-agents likewise);
    said ``cut``. A session whose first call does not fit keeps it, its output shortened to what room is left."""
    turns: list[AgentTurn] = []
    for turn, context in zip(session.turns, session.contexts(system_tokens), strict=True):
        if context + turn.output_tokens > limit:
            if not turns:
                room = max(1, limit - context)
                turns.append(AgentTurn(min(turn.new_tokens, limit - 1), min(turn.output_tokens, room),
                                        turn.delay_s, (), turn.fresh))
            return AgentSession(tuple(turns), cut=True)
        spawns = tuple(_cut(s, limit, system_tokens) for s in turn.spawns)
        turns.append(AgentTurn(turn.new_tokens, turn.output_tokens, turn.delay_s, spawns, turn.fresh))
    return AgentSession(tuple(turns), cut=session.cut or any(s.cut for t in turns for s in t.spawns))


@dataclass(frozen=True, slots=True)
class AgentCorpus:
    """A recorded trajectory file's sessions, read and checked whole, with its name and sha256."""

    sessions: tuple[AgentSession, ...]
    name: str
    sha256: str


def load_agent_corpus(cfg: AgentsConfig | None) -> AgentCorpus | None:
    """The config's trajectory file read whole (``core.agents.read_weka_sessions``); None where it names none.
    A bad file raises ``TrajectoryError`` naming the file and the line."""
    if cfg is None or cfg.trajectories is None:
        return None
    path = Path(cfg.trajectories)
    sessions = read_weka_sessions(path)
    return AgentCorpus(sessions, path.name, hashlib.sha256(path.read_bytes()).hexdigest())


def agent_sessions(cfg: AgentsConfig, limit: int, corpus: AgentCorpus | None = None
                   ) -> tuple[Iterator[AgentSession], str, str | None]:
    """The walk's session stream (without end: a recorded corpus is played round and round, shuffled by the
    seed, each session cut to ``limit``), its source's name and, for a file, its sha256."""
    if cfg.trajectories is None:
        syn = SyntheticAgents(turns_median=cfg.turns_median, new_median=cfg.new_tokens_median,
                              task_tokens=cfg.task_tokens, output_median=cfg.output_tokens_median,
                              output_max=cfg.output_tokens_max, delay_median_s=cfg.delay_median_s,
                              delay_cap_s=cfg.delay_cap_s, spawn_share=cfg.spawn_share, spawns=cfg.spawns,
                              max_context_tokens=limit, system_tokens=cfg.system_tokens)
        return syn.stream(cfg.seed), "synthetic", None
    corpus = corpus or load_agent_corpus(cfg)
    assert corpus is not None
    sessions = [_cut(s, limit, cfg.system_tokens) for s in corpus.sessions]
    rng = random.Random(cfg.seed)

    def rounds() -> Iterator[AgentSession]:
        while True:
            order = list(sessions)
            rng.shuffle(order)
            yield from order

    return rounds(), corpus.name, corpus.sha256


@dataclass(slots=True)
class _Turn:
    """What the window keeps of one of its turns: its send time and what the tier reads."""

    sent_ns: int
    ttft_s: float | None
    speed_tok_s: float | None
    output_tokens: int
    failed: bool
    overflow: bool
    capped: bool
    prompt_tokens: int | None
    cached_tokens: int | None
    first_token: bool


@dataclass(slots=True)
class _Counts:
    trees_started: int = 0
    trees_done: int = 0
    cut_sessions: int = 0
    window: list[_Turn] = field(default_factory=list)


def _overflowed(res: RawResult) -> bool:
    """The runtime refused the turn for the context (llama-server: HTTP 400, ``exceed_context_size_error``)."""
    text = (res.error or "").lower()
    return res.status == 400 and ("context" in text or "n_ctx" in text)


class AgentRun:
    """One rung: ``sessions`` places playing trees from ``stream``; ``await run()`` returns its window."""

    def __init__(self, *, config: LoadgenConfig, cfg: AgentsConfig, lane: LaneConfig, sessions: int, run_id: str,
                 client: LaneClient, writer: RecordsWriter, clock: Clock, text: PromptText,
                 stream: Iterator[AgentSession], trees: itertools.count[int], per_word: float | None) -> None:
        self.config, self.cfg, self.lane, self.n, self.run_id = config, cfg, lane, sessions, run_id
        self.client, self.writer, self.clock, self.text = client, writer, clock, text
        self.stream, self.trees, self.per_word = stream, trees, per_word
        self.system = text.prompt(self._words(cfg.system_tokens))
        self.workload = config.workload.model_copy(update={"ignore_eos": True})  # every answer its drawn length
        self.counts = _Counts()
        self.window_start_ns: int | None = None
        self.window_end_ns: int | None = None
        self.stopping = False
        self.active: dict[str, int] = {}  # request id -> when it was sent (ns), for the drain
        self.started: set[int] = set()  # the places whose first turn has ended

    def _words(self, tokens: int) -> int:
        return max(1, round(tokens / self.per_word)) if self.per_word else max(1, tokens)

    async def run(self) -> AgentRungWindow:
        probe = LoopLagProbe(0.02)
        probe.start()
        places = [asyncio.create_task(self._place(p), name=f"agent-place-{p}") for p in range(self.n)]
        try:
            await asyncio.sleep(self.cfg.warmup_s)
            # the steady start's contexts are prefilled cold at once: the window opens once every place's first
            # turn was answered (at most a window later), as the ladder's steady conversations do
            cap = time.perf_counter_ns() + int(self.cfg.window_s * 1e9)
            while len(self.started) < self.n and time.perf_counter_ns() < cap:
                await asyncio.sleep(0.05)
            probe.take()
            self.window_start_ns = time.perf_counter_ns()
            await asyncio.sleep(self.cfg.window_s)
            # a window too thin to read a p95 from goes on until it has the turns, at most HOLD_WINDOWS long (a
            # stop on a count, never on what the turns said)
            cap = self.window_start_ns + int(HOLD_WINDOWS * self.cfg.window_s * 1e9)
            while len(self.counts.window) < MIN_TURNS and time.perf_counter_ns() < cap:
                await asyncio.sleep(0.25)
            self.window_end_ns = time.perf_counter_ns()
            lags = probe.take()
            await self._drain()
        finally:
            self.stopping = True
            for task in places:
                task.cancel()
            await asyncio.gather(*places, return_exceptions=True)
            await probe.stop()
            self.writer.sync()
        return self._window(lags)

    async def _drain(self) -> None:
        end = self.window_end_ns
        assert end is not None
        deadline = time.perf_counter_ns() + int(self.cfg.drain_s * 1e9)
        while time.perf_counter_ns() < deadline and any(sent <= end for sent in self.active.values()):
            await asyncio.sleep(0.05)

    async def _place(self, place: int) -> None:
        first, backoff = True, 0.0
        while not self.stopping:
            tree, session = next(self.trees), next(self.stream)
            self.counts.trees_started += 1
            self.counts.cut_sessions += session.cut
            marker = "[" + request_head(self.text.nonce, f"{self.lane.key}:agents", tree) + "]"
            # steady start: a place's first tree joins at a turn drawn uniformly, its earlier turns synthesized
            skip = random.Random(f"{self.cfg.seed}:{self.n}:{place}").randrange(len(session.turns)) if first else 0
            first = False
            if await self._agent(place, tree, str(tree), session, marker, skip):
                self.counts.trees_done += 1
                backoff = 0.0
            elif not self.stopping:  # a failed tree: a runtime that refuses is not hammered in a busy loop
                backoff = min(1.0, backoff * 2 or 0.05)
                await asyncio.sleep(backoff)

    async def _agent(self, place: int, tree: int, agent: str, session: AgentSession, marker: str,
                     skip: int = 0) -> bool:
        """Plays one agent of a tree to its end (its sub-agents as child tasks), from turn ``skip`` on (the
        turns before it synthesized into its context, unsent); False where a turn failed."""
        pieces = self._synthesized(session, marker, skip)
        ready = time.perf_counter_ns()
        for k, turn in enumerate(session.turns):
            if k < skip:
                continue
            ready += 0 if k == skip else int(turn.delay_s * 1e9)
            wait = (ready - time.perf_counter_ns()) / 1e9
            if wait > 0:
                await asyncio.sleep(wait)
            if self.stopping:
                return False
            if turn.fresh:
                pieces = []
            own = self.text.prompt(self._words(turn.new_tokens))
            pieces.append(("user", f"{marker} {own}" if not pieces else own))
            answer = await self._turn(place, tree, agent, k, turn.delay_s, ready, pieces, turn.output_tokens)
            if answer is None:
                return False
            pieces.append(("assistant", answer))
            if turn.spawns:
                done = await asyncio.gather(*(self._agent(place, tree, f"{agent}.{k}.{i}", child, marker)
                                              for i, child in enumerate(turn.spawns)))
                if not all(done):
                    return False
            ready = time.perf_counter_ns()
        return True

    def _synthesized(self, session: AgentSession, marker: str, turns: int) -> list[tuple[str, str]]:
        """The context of a session's first ``turns`` turns as if played: each appended text, each answer the
        prepared text at its drawn length (a steady start's; the runtime prefills it once, cold, in the warm-up)."""
        pieces: list[tuple[str, str]] = []
        for turn in session.turns[:turns]:
            if turn.fresh:
                pieces = []
            own = self.text.prompt(self._words(turn.new_tokens))
            pieces.append(("user", f"{marker} {own}" if not pieces else own))
            pieces.append(("assistant", " " + self.text.prompt(self._words(turn.output_tokens))))
        return pieces

    async def _turn(self, place: int, tree: int, agent: str, k: int, delay_s: float, ready_ns: int,
                    pieces: list[tuple[str, str]], output_tokens: int) -> str | None:
        """Sends one turn and records it; its answer as received, or None where it failed."""
        body = context_body(self.lane.api, self.lane.model, self.system, pieces, output_tokens, self.workload,
                            f"a{tree}")
        rid = f"{self.run_id}-{self.lane.key}-a{self.n}-t{tree}-{agent}-{k}"
        parser = StreamParser(self.lane.api, self.config.max_event_bytes, keep_text=True)
        spec = RequestSpec(place, k, 0, output_tokens, False)
        capped = delay_s >= self.cfg.delay_cap_s > 0
        tags = {"tree": tree, "agent": agent, "turn": k, "delay_s": round(delay_s, 6),
                "ready_at": self.clock.wall(ready_ns), "capped": capped}
        sent = time.perf_counter_ns()
        self.active[rid] = sent
        try:
            result = await self.client.send(body, rid, parser)
        except asyncio.CancelledError:
            cut = RawResult(sent, time.perf_counter_ns(), parser.token_ns, "dropped", error="cancelled at drain")
            self._record(place, spec, rid, cut, parser, tags)
            raise
        except Exception as exc:  # a client bug on a hostile answer must not kill the place silently
            result = RawResult(sent, time.perf_counter_ns(), parser.token_ns, "malformed",
                               error=f"client failed on the answer: {exc!r}"[:200])
        finally:
            self.active.pop(rid, None)
        self._record(place, spec, rid, result, parser, tags)
        self.started.add(place)
        return parser.answer_text() if result.outcome == "ok" else None

    def _record(self, place: int, spec: RequestSpec, rid: str, res: RawResult, parser: StreamParser,
                tags: dict[str, object]) -> None:
        start, end = self.window_start_ns, self.window_end_ns
        inside = start is not None and res.send_ns >= start and (end is None or res.send_ns <= end)
        phase: Phase = "window" if inside else ("drain" if end is not None and res.send_ns > end else "warmup")
        record = request_record(res, spec, parser, run_id=self.run_id, lane=self.lane.key, concurrency=self.n,
                                user=place, request_id=rid, phase=phase, wall=self.clock.wall, rate_rps=None,
                                intended_ns=None)
        record.extra["agent"] = tags
        self.writer.write(record)
        if not inside:
            return
        tok = res.token_ns
        speed = None
        if record.ok and record.output_tokens > 1 and len(tok) > 1 and tok[-1] > tok[0]:
            speed = (record.output_tokens - 1) / ((tok[-1] - tok[0]) / 1e9)
        self.counts.window.append(_Turn(
            res.send_ns, record.ttft_s, speed, record.output_tokens if record.ok else 0,
            failed=not record.ok and res.outcome != "dropped", overflow=_overflowed(res),
            capped=bool(tags["capped"]), prompt_tokens=record.prompt_tokens if record.ok else None,
            cached_tokens=record.cached_prompt_tokens if record.ok else None, first_token=bool(tok)))

    def _judged(self) -> tuple[list[tuple[float, float | None, float | None]], int]:
        """The window's turns the tier reads, in send order (module docstring), and how many were censored."""
        ceiling = self.cfg.ttft_s
        cut_at = time.perf_counter_ns()
        judged, censored = [], 0
        for t in sorted(self.counts.window, key=lambda t: t.sent_ns):
            if t.overflow:
                continue
            ttft = t.ttft_s
            if ttft is None and not t.failed and (cut_at - t.sent_ns) / 1e9 < ceiling:
                censored += 1
                continue
            judged.append((t.sent_ns / 1e9, ttft if t.first_token else None, t.speed_tok_s))
        return judged, censored

    def _window(self, lags: list[float]) -> AgentRungWindow:
        start, end = self.window_start_ns, self.window_end_ns
        assert start is not None and end is not None
        cfg, turns = self.cfg, self.counts.window
        judged, censored = self._judged()
        verdict = judge_rung(AgentRung(self.n, tuple(judged)), AgentTier(cfg.ttft_s, cfg.speed_tok_s),
                             cfg.confidence)
        answered = [t for t in turns if t.prompt_tokens is not None]
        cached = [t.cached_tokens for t in answered]
        overflows = sum(t.overflow for t in turns)
        lag = quantile(sorted(lags), 0.99) if lags else None
        reason = None
        if turns and overflows > MAX_OVERFLOW_SHARE * len(turns):
            reason = f"{overflows} of {len(turns)} turns overflowed the context (more than 1 %)"
        elif lag is not None and lag > self.config.max_loop_lag_s:
            reason = f"the client's event loop lagged {lag * 1e3:.1f} ms at its p99 (limit " \
                     f"{self.config.max_loop_lag_s * 1e3:g} ms): the turns' times were the client's"
        elif len(judged) < MIN_TURNS:
            reason = f"only {len(judged)} turns judged in the window (at least {MIN_TURNS} are needed)"
        window_s = (end - start) / 1e9
        return AgentRungWindow(
            sessions=self.n, start=self.clock.wall(start), end=self.clock.wall(end), turns=len(turns),
            judged=len(judged), holds=verdict.holds, decided=verdict.decided and reason is None, said=verdict.said,
            ttft_p95_s=verdict.ttft_p95_s, speed_p25_tok_s=verdict.speed_p25_tok_s,
            output_tok_s=sum(t.output_tokens for t in turns) / max(window_s, 1e-9),
            trees_started=self.counts.trees_started, trees_done=self.counts.trees_done,
            failed=sum(t.failed for t in turns), overflows=overflows, censored=censored,
            capped_delays=sum(t.capped for t in turns), cut_sessions=self.counts.cut_sessions,
            prompt_tokens=sum(t.prompt_tokens or 0 for t in answered),
            cached_prompt_tokens=None if not cached or any(c is None for c in cached) else sum(
                c or 0 for c in cached),
            loop_lag_p99_s=lag, valid=reason is None, reason=reason)


class AgentWalker:
    """The walk's state for one lane: its rungs so far and the next one to measure (module docstring)."""

    def __init__(self, cfg: AgentsConfig, slot_context: int | None, per_word: float | None,
                 corpus: AgentCorpus | None = None) -> None:
        self.cfg = cfg
        self.limit = context_limit(cfg, slot_context)
        self.stream, source, digest = agent_sessions(cfg, self.limit, corpus)
        self.trees = itertools.count()
        self.walk = AgentWalk(ttft_s=cfg.ttft_s, speed_tok_s=cfg.speed_tok_s, confidence=cfg.confidence,
                              source=source, source_sha256=digest, max_context_tokens=self.limit,
                              tokens_per_word=per_word, window_s=cfg.window_s)

    def next_rung(self) -> int | None:
        if self.walk.ended is not None:
            return None
        return next_sessions(walk_verdicts(self.walk), self.cfg.max_sessions)

    def measured(self, rung: AgentRungWindow) -> None:
        self.walk = self.walk.with_rung(rung)
        if not rung.valid:
            self.walk = self.walk.model_copy(update={"ended": f"{rung.sessions} sessions: {rung.reason}"})

    def answer_line(self, lane: str) -> str:
        said = agent_answer(walk_verdicts(self.walk))
        bracket = "" if said.bracket is None else f", bracket {said.bracket[0]}..{said.bracket[1] or '?'}"
        most = "none" if said.max_sessions is None else said.max_sessions
        return f"  {lane}: agents at the tier: {most} ({said.status}{bracket})"


def agent_line(lane: str, rung: AgentRungWindow) -> str:
    """The line a finished agent rung leaves."""
    hit = rung.cache_hit_share
    cache = "" if hit is None else f", cache {hit:.0%}"
    state = "holds" if rung.holds else "fails"
    state += "" if rung.decided else " (not significant)"
    line = (f"  {lane} agents n={rung.sessions}: {state}; {rung.said}; {rung.turns} turns, "
            f"{rung.output_tok_s:.0f} tok/s{cache}")
    return line + ("" if rung.valid else f" (invalid: {rung.reason})")
