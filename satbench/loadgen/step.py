"""One rung of the ladder: c closed-loop users through warm-up, a measured window, and drain.

Each user sends its next request as soon as the previous one ended (after a short back-off only when a
request failed without a single token, so a dead server is not hammered in a busy loop). A controller
wakes four times a second (no busy polling) and ends the window when the minimum duration and the
minimum request count are met and throughput is stable: the 95% interval of its batch rates
(``core.statistics.autocorrelated_batch_ci``, the step's own interval), over tokens that are certainly all
known (those before the first token of the oldest request still streaming), is within ``ci_rel_bound`` of
its mean; or at ``max_window_s``.

Sequential measuring (``loadgen.stop_rule``): given the rung below and the gain a doubling must buy, a window
whose gain is undecided goes on, at a few growing lengths up to ``decide_max_window_s``, until it is decided or
the cap could not decide it either. With ``usable_ci_rel`` set, a window still too thin or too unsteady to use
at ``max_window_s`` (the lowest rung's included) goes on too, looked at each time its length has doubled, up
to the same cap (``stop_rule.held``; the looks are in the window's notes).

Drain (``wait``, the default): the users keep going, so the load stays what it was, until every request sent
inside the window has ended, or ``drain_timeout_s`` (default: the request timeout) has passed; then the users
stop, what they sent after the window gets ``drain_settle_s`` to end (it counts for nothing; a clean record
is all it buys), and every request still in flight is cancelled and recorded ``dropped``; one sent inside the
window is marked ``extra.censored``: followed as long as the drain allowed, its figures are lower bounds
(``core.step_figures``). A quantile over the window's requests is then over all of them, never a tail cut
short by a drain that favoured short requests. ``cancel`` ends at once (every request in flight censored).

A virtual user never dies silently: an unexpected error in its loop is recorded as a ``malformed`` request
with the error, and the user goes on; a window in which fewer than c users were alive at its end is invalid
and says so.

With ``gc_pause`` the cyclic garbage collector is off for the whole step (after one collection and a
freeze of what exists), so a full collection never lands inside a window; it runs again between steps.

A record is written as each request ends. Its phase: ``warmup`` if sent before the window opened,
``drain`` if it ended after the window closed, else ``window``. The step's window, validity and client
health are returned as a ``StepWindow``.

Memory stays flat however long a step runs: a finished request leaves only counters, its token bins
and one dispatch delay here; the records themselves are on disk, and the step's figures are computed from
``records.jsonl`` once the step has ended (``StepRun.records()``).
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import gc
import time
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field

from satbench.core.figures import StepFigures
from satbench.core.manifest import StepWindow
from satbench.core.records import Phase, RecordsWriter, RequestRecord, read_records
from satbench.core.sse import StreamParser
from satbench.core.stalls import BURST_GAP_S, longest_stalled_gap, token_gaps
from satbench.core.statistics import quantile
from satbench.core.step_figures import START_BATCHES, event_token_counts
from satbench.loadgen import stop_rule
from satbench.loadgen.client import LaneClient, RawResult
from satbench.loadgen.config import LaneConfig, LoadgenConfig
from satbench.loadgen.metrics import LoadgenMetrics
from satbench.loadgen.progress import Progress
from satbench.loadgen.request_record import request_record
from satbench.loadgen.selfcheck import LoopLagProbe, health_from, verdict
from satbench.loadgen.workload import PromptText, RequestSpec, UserWorkload, build_body

__all__ = ["Clock", "StepRun"]



@dataclass(frozen=True, slots=True)
class Clock:
    """Monotonic ns mapped once to wall time: ``wall(ns) = wall0 + (ns - mono0) / 1e9``."""

    wall0: float
    mono0: int

    @classmethod
    def now(cls) -> Clock:
        return cls(time.time(), time.perf_counter_ns())

    def wall(self, ns: int) -> float:
        return self.wall0 + (ns - self.mono0) / 1e9


@dataclass(slots=True)
class _Active:
    decided_ns: int
    parser: StreamParser
    prompt_tokens: int | None = None  # its prompt's length: an open rung's look judges its own TTFT deadline


@dataclass(slots=True)
class StepState:
    """What a step keeps of its finished requests: counters, never the records themselves."""

    requests: int = 0
    tokens_done: int = 0
    window_ok: int = 0
    window_errors: collections.Counter[str] = field(default_factory=collections.Counter)
    window_unreachable: int = 0
    retried: int = 0
    last_end: float | None = None
    window_dispatch_s: array[float] = field(default_factory=lambda: array("d"))
    window_busy_s: float = 0.0
    recent_ttft: collections.deque[float] = field(default_factory=lambda: collections.deque(maxlen=200))


class StepRun:
    """Runs one (lane, concurrency) rung; ``await run()`` returns its ``StepWindow``."""

    def __init__(self, *, config: LoadgenConfig, lane: LaneConfig, concurrency: int, run_id: str,
                 client: LaneClient, writer: RecordsWriter, clock: Clock, metrics: LoadgenMetrics,
                 text: PromptText, progress: Progress, reference: StepFigures | None = None) -> None:
        self.config, self.lane, self.c, self.run_id = config, lane, concurrency, run_id
        self.reference = reference
        self.id_tag = ""  # set on a rung measured twice (the drift check's re-measure: "-again"), so ids stay unique
        self.rate: float | None = None  # an open-loop rung's rate (``loadgen.open_step``)
        self.client, self.writer, self.clock, self.metrics = client, writer, clock, metrics
        self.text, self.progress = text, progress
        self.state = StepState()
        self.active: dict[int, _Active] = {}
        self.prefills: list[tuple[int, int]] = []
        self.pending_stalls: list[tuple[list[int], list[tuple[float, float]]]] = []  # (token ns, per-token gaps)
        self._prune_at = 64  # the prefills list is pruned when it reaches this length
        self.window_start_ns: int | None = None
        self.window_end_ns: int | None = None
        self.stopping = False
        self.users_alive = concurrency
        self.answered: set[int] = set()
        self.decision: str | None = None
        self.looks: list[str] = []
        self.held_looks: list[str] = []  # each look at which the window was too thin or unsteady to use
        self._bins: dict[int, int] = {}
        self._stall_hist = metrics.histogram("stall", lane.key)
        self._itl_hist = metrics.histogram("itl", lane.key)
        self._ttft_hist = metrics.histogram("ttft", lane.key)
        self._e2e_hist = metrics.histogram("e2e", lane.key)
        self._tpot_hist = metrics.histogram("tpot", lane.key)
        self._queue_hist = metrics.histogram("queue", lane.key)

    @property
    def _batch_s(self) -> float:
        """Batch length of the throughput-stability check: ``batch_s``, else a 32nd of the minimum window (the
        check merges batches until they are uncorrelated, as the step's interval does)."""
        return self.config.batch_s or self.config.min_window_s / START_BATCHES

    def _live_tokens(self) -> list[tuple[str, str, int]]:
        lane = self.lane.key
        return [(lane, str(u), len(a.parser.token_ns)) for u, a in list(self.active.items())]

    async def run(self) -> StepWindow:
        self.metrics.live_tokens = self._live_tokens
        if self.config.gc_pause:
            gc.collect()
            gc.freeze()
            gc.disable()
        try:
            return await self._run()
        finally:
            self.metrics.live_tokens = None
            if self.config.gc_pause:
                gc.enable()
                gc.unfreeze()

    async def _run(self) -> StepWindow:
        await self.client.preopen(self.c)
        # Kernel-timed steps keep loop lag as a note only: a slower probe (fewer wake-ups) will do.
        probe = LoopLagProbe(0.1 if self.client.kernel_timed else 0.02)
        probe.start()
        cpu0 = time.process_time()
        warm_ns = time.perf_counter_ns()
        users = [asyncio.create_task(self._user(u), name=f"user-{u}") for u in range(self.c)]
        try:
            await self._control(warm_ns)
            probe_lags = probe.take()
            read_lags = [ns / 1e9 for ns in self.client.take_read_lags()]
            cpu_window = time.process_time() - cpu0
            self.users_alive = sum(not task.done() for task in users)
            await self._drain(users)
        finally:
            self.metrics.set_step(self.lane.key, self.run_id, 0)
            for task in users:
                task.cancel()
            await asyncio.gather(*users, return_exceptions=True)
            self._flush_stalls(force=True)
            await probe.stop()
            self.writer.sync()
        return self._window(warm_ns, probe_lags, read_lags, cpu_window)

    async def _control(self, warm_ns: int) -> None:
        cfg = self.config
        await self._tick_until(warm_ns + int(cfg.warmup_s * 1e9), "warmup", warm_ns)
        conv = cfg.workload.conversation
        if conv is not None and conv.start == "steady":  # every user's synthesized history prefilled once
            warm_cap = warm_ns + int((cfg.warmup_s + cfg.max_window_s) * 1e9)
            while len(self.answered) < self.c and time.perf_counter_ns() < warm_cap:
                self._show("warmup", warm_ns, time.perf_counter_ns())
                await asyncio.sleep(0.05)
        self.client.take_read_lags()  # the warm-up's
        self.window_start_ns = time.perf_counter_ns()
        self.metrics.set_step(self.lane.key, self.run_id, self.c)
        start = self.window_start_ns
        min_end = start + int(cfg.min_window_s * 1e9)
        rule = stop_rule.WindowEnd.of(cfg.min_window_s, cfg.max_window_s, cfg.decide_max_window_s, self._deciding,
                                      cfg.usable_ci_rel, cfg.hold_max_window_s)
        cap_end = start + int(rule.cap_s * 1e9)
        batch = self._batch_s
        while True:
            now = time.perf_counter_ns()
            enough = now >= min_end and self.state.window_ok >= cfg.min_requests
            if rule.ends((now - start) / 1e9, enough, lambda: self._stable(start, batch),
                         lambda: self._decide(start, batch), lambda: self._deciding_worth(start, batch),
                         lambda: stop_rule.held(self._held_rates(start, batch), self.state.window_ok,
                                                cfg.min_requests, cfg.usable_ci_rel)):
                break
            self._show("window", start, now)
            await asyncio.sleep(min(0.25, max(0.01, (cap_end - now) / 1e9)))
        self.decision, self.held_looks = rule.decision, rule.held_looks
        self.window_end_ns = time.perf_counter_ns()
        self.metrics.set_step(self.lane.key, self.run_id, 0)

    async def _tick_until(self, deadline_ns: int, phase: str, since_ns: int) -> None:
        while True:
            now = time.perf_counter_ns()
            if now >= deadline_ns:
                return
            self._show(phase, since_ns, now)
            await asyncio.sleep(min(0.25, (deadline_ns - now) / 1e9))

    def records(self) -> Iterator[RequestRecord]:
        """This step's records, read back from the records file (flushed as each request ended)."""
        for rec in read_records(self.writer.path):
            if rec.run_id == self.run_id and rec.lane == self.lane.key and rec.concurrency == self.c \
                    and rec.rate_rps == self.rate:
                yield rec

    def _live_rates(self, start_ns: int, batch_s: float) -> list[float]:
        """Batch rates over the bins that are complete: a request's tokens are binned when it ends, so the bins
        from the first token of the oldest request still streaming on are not (one still waiting for its
        first token adds nothing before now)."""
        now = time.perf_counter_ns()
        streaming = [a.parser.token_ns[0] for a in list(self.active.values()) if a.parser.token_ns]
        horizon = min([*streaming, now])
        k = (horizon - start_ns) // int(batch_s * 1e9)
        return [self._bins.get(i, 0) / batch_s for i in range(max(0, k))]

    def _held_rates(self, start_ns: int, batch_s: float) -> list[float]:
        """The complete bins' rates in the batches of the step's own interval (``stop_rule.as_final_batches``)."""
        elapsed = (time.perf_counter_ns() - start_ns) / 1e9
        return stop_rule.as_final_batches(self._live_rates(start_ns, batch_s), batch_s, elapsed, self.config.batch_s)

    def _stable(self, start_ns: int, batch_s: float) -> bool:
        return stop_rule.stable(self._live_rates(start_ns, batch_s), self.config.ci_rel_bound)

    @property
    def _deciding(self) -> bool:
        return stop_rule.deciding(self.reference, self.c, self.config.decide_gain)

    def _decide(self, start_ns: int, batch_s: float) -> str:
        """This rung's gain over ``reference`` so far (``loadgen.stop_rule.decide``); each look is kept for the
        window's notes."""
        assert self.reference is not None and self.config.decide_gain is not None
        decision, look = stop_rule.decide(self._live_rates(start_ns, batch_s), self.reference, self.c,
                                          self.config.decide_gain, (time.perf_counter_ns() - start_ns) / 1e9)
        self.looks.append(look)
        return decision

    def _deciding_worth(self, start_ns: int, batch_s: float) -> bool:
        assert self.reference is not None and self.config.decide_gain is not None
        cap = max(self.config.max_window_s, self.config.decide_max_window_s)
        return stop_rule.worth_deciding(self._live_rates(start_ns, batch_s), self.reference, self.c,
                                        self.config.decide_gain, (time.perf_counter_ns() - start_ns) / 1e9, cap)

    def _show(self, phase: str, since_ns: int, now_ns: int) -> None:
        if not self.progress.enabled:
            return
        elapsed = (now_ns - since_ns) / 1e9
        p95 = quantile(sorted(self.state.recent_ttft), 0.95)
        self.progress.show(self.lane.key, self.c, phase, elapsed, self.state.requests,
                           self.state.tokens_done / max(elapsed, 1e-3), p95)

    async def _drain(self, users: list[asyncio.Task[None]]) -> None:
        """Follows the window's requests to their end with the load kept on, up to the drain's cap; then stops
        (module docstring)."""
        cfg = self.config
        cap = cfg.request_timeout_s if cfg.drain_timeout_s is None else cfg.drain_timeout_s
        deadline = time.perf_counter_ns() + int(cap * 1e9)
        end = self.window_end_ns
        assert end is not None
        while cfg.drain == "wait" and time.perf_counter_ns() < deadline and any(
                a.decided_ns <= end for a in self.active.values()) and not all(t.done() for t in users):
            await asyncio.sleep(0.02)
        self.stopping = True
        if cfg.drain == "wait" and cfg.drain_settle_s > 0 and not any(
                a.decided_ns <= end for a in self.active.values()):
            # what was sent after the window counts for nothing: let it end (a clean record) for a short while
            await asyncio.wait(users, timeout=min(cfg.drain_settle_s, max(0.0, (deadline - time.perf_counter_ns())
                                                                          / 1e9)))

    async def _user(self, user: int) -> None:
        # a rung measured again (id_tag) sends its own prompts: the first window's would come back from the cache
        workload = UserWorkload(self.config.workload, self.lane.key, self.c, user, self.text,
                                stream=f"{self.lane.key}:{self.c}{self.id_tag}:{user}" if self.id_tag else None)
        backoff = 0.0
        prev_end = time.perf_counter_ns()
        tag = f"u{user}"
        while not self.stopping:
            spec = workload.next_spec()
            body = build_body(self.lane.api, self.lane.model, spec, self.text, self.config.workload, tag)
            rid = f"{self.run_id}-{self.lane.key}-c{self.c}{self.id_tag}-u{user}-{spec.index}"
            parser = StreamParser(self.lane.api, self.config.max_event_bytes, keep_text=workload.converses)
            decided = time.perf_counter_ns()
            self.active[user] = _Active(decided, parser)
            self.metrics.add_in_flight(self.lane.key, 1)
            try:
                result = await self.client.send(body, rid, parser)
            except asyncio.CancelledError:
                end = time.perf_counter_ns()
                cut = self.window_end_ns is not None and self.window_start_ns is not None \
                    and self.window_start_ns <= decided <= self.window_end_ns
                self._finish(user, spec, rid, RawResult(decided, end, parser.token_ns, "dropped",
                                                        error="cancelled at drain",
                                                        extra={"censored": True} if cut else {}), prev_end, parser)
                raise
            except Exception as exc:  # a client bug on a hostile answer must not kill the user silently
                result = RawResult(decided, time.perf_counter_ns(), parser.token_ns, "malformed",
                                   error=f"client failed on the answer: {exc!r}"[:200])
            finally:
                self.metrics.add_in_flight(self.lane.key, -1)
                self.active.pop(user, None)
            self._finish(user, spec, rid, result, prev_end, parser)
            if workload.converses:
                workload.answered(spec, parser.answer_text() if result.outcome == "ok" else None)
            prev_end = result.end_ns
            if result.outcome != "ok" and not result.token_ns:
                backoff = min(1.0, backoff * 2 or 0.05)
                await asyncio.sleep(backoff)
                prev_end = time.perf_counter_ns()
            else:
                backoff = 0.0

    def _finish(self, user: int, spec: RequestSpec, rid: str, res: RawResult, prev_end_ns: int,
                parser: StreamParser | None = None, intended_ns: int | None = None) -> None:
        lane = self.lane.key
        tok = res.token_ns
        send = res.send_ns
        meant = send if intended_ns is None else intended_ns
        closed = self.window_end_ns is not None and res.end_ns > self.window_end_ns
        phase: Phase = "warmup"
        if closed:
            phase = "drain"
        elif self.window_start_ns is not None and meant >= self.window_start_ns:
            phase = "window"
        record = request_record(
            res, spec, parser, run_id=self.run_id, lane=lane, concurrency=self.c, user=user, request_id=rid,
            phase=phase, wall=self.clock.wall, rate_rps=self.rate, intended_ns=intended_ns)
        ttft, queue, output = record.ttft_s, record.queue_s, record.output_tokens
        counts, _ = event_token_counts(record)
        self.writer.write(record)
        self.answered.add(user)
        self._count(record, tok, counts, max(0.0, (send - prev_end_ns) / 1e9))
        self.metrics.request_done(lane, res.outcome, user, max(output, len(tok)))
        self.metrics.runtime_counts(lane, record)
        admitted = send + int((queue or 0.0) * 1e9)
        self.prefills.append((admitted, tok[0] if tok else res.end_ns))
        if res.outcome == "ok":
            self._e2e_hist.observe(record.e2e_s or 0.0)
            tpot = record.tpot_s
            if tpot is not None:
                self._tpot_hist.observe(tpot)
        if ttft is not None:
            self._ttft_hist.observe(ttft)
        if queue is not None:
            self._queue_hist.observe(queue)
        per_token = token_gaps(tok, counts, BURST_GAP_S * 1e9)  # per token, as the records' figures (core.stalls)
        if per_token:
            self._itl_hist.observe_many([(b - a) / 1e9 for a, b in per_token])
            self.pending_stalls.append((tok, per_token))
        self._flush_stalls()

    def _count(self, record: RequestRecord, tok: list[int], counts: list[int], dispatch_s: float) -> None:
        """Folds a finished request into the step's counters and throughput bins (``tok``: its content events'
        arrival times in ns, sorted; ``counts``: the tokens each carried, ``core.step_figures.event_token_counts``)."""
        state = self.state
        state.requests += 1
        state.tokens_done += record.output_tokens
        state.retried += record.retried
        if record.ttft_s is not None:
            state.recent_ttft.append(record.ttft_s)
        ended = record.ended_at if record.ended_at is not None else record.sent_at
        state.last_end = ended if state.last_end is None else max(state.last_end, ended)
        if record.phase == "window":
            state.window_dispatch_s.append(dispatch_s)
            state.window_busy_s += record.e2e_s or 0.0
        if self.window_start_ns is not None and record.phase != "drain" \
                and ended >= self.clock.wall(self.window_start_ns):
            if record.ok:
                state.window_ok += 1
            else:
                state.window_errors[record.outcome] += 1
                state.window_unreachable += record.outcome == "refused" and record.status is None
            self._bin_tokens(tok, counts)

    def _bin_tokens(self, tok: list[int], counts: list[int]) -> None:
        """Adds the tokens at or after the window start to their batch bins: one bisection per bin touched,
        not a step per token, where every event carried one token; else a step per event."""
        start = self.window_start_ns
        assert start is not None
        width = int(self._batch_s * 1e9)
        bins = self._bins
        pos, n = bisect.bisect_left(tok, start), len(tok)
        if len(counts) == n and sum(counts) != n:
            for t, k in zip(tok[pos:], counts[pos:], strict=True):
                i = (t - start) // width
                bins[i] = bins.get(i, 0) + k
            return
        while pos < n:
            i = (tok[pos] - start) // width
            nxt = bisect.bisect_left(tok, start + (i + 1) * width, pos)
            bins[i] = bins.get(i, 0) + nxt - pos
            pos = nxt

    def _in_flight_since(self) -> list[int]:
        """When each request that may still be in flight was decided (perf_counter ns): none of them can have
        been admitted before it."""
        return [a.decided_ns for a in self.active.values()]

    def _flush_stalls(self, force: bool = False) -> None:
        """Observes the decode stall of each finished request once every request that could have been in
        prefill during its decode has finished too (all still in flight were sent after its last token), so
        each prefill interval is known exactly: admission (sent + server-reported queue time) to first token,
        the definition the records use. ``force`` (step end) observes the rest with what is known."""
        active = self._in_flight_since()
        horizon = None if force or not active else min(active)
        keep: list[tuple[list[int], list[tuple[float, float]]]] = []
        for tok, per_token in self.pending_stalls:
            if horizon is not None and tok[-1] > horizon:
                keep.append((tok, per_token))
                continue
            first, last = tok[0], tok[-1]
            overlapping = [iv for iv in self.prefills if iv[1] > first and iv[0] < last]
            stall = longest_stalled_gap(per_token, overlapping) if overlapping else None
            if stall is not None:
                self._stall_hist.observe(stall / 1e9)
        self.pending_stalls = keep
        if len(self.prefills) >= self._prune_at or force:  # amortized: a prune per doubling, not per request
            bound = min([tok[0] for tok, _ in keep] + active + [time.perf_counter_ns()])
            self.prefills = [iv for iv in self.prefills if iv[1] > bound]
            self._prune_at = max(64, 2 * len(self.prefills))

    def _window(self, warm_ns: int, lags: list[float], read_lags: list[float], cpu_s: float) -> StepWindow:
        assert self.window_start_ns is not None and self.window_end_ns is not None
        start, end = self.clock.wall(self.window_start_ns), self.clock.wall(self.window_end_ns)
        wall = (self.window_end_ns - warm_ns) / 1e9
        state = self.state
        health = health_from(lags, list(state.window_dispatch_s), cpu_s, wall, busy_s=state.window_busy_s,
                             read_lags=read_lags, kernel_timed=self.client.kernel_timed)
        ok, errors, retried = state.window_ok, state.window_errors, state.retried
        notes = [f"client {k}={v:.4g}" for k, v in health.to_dict().items() if v is not None]
        notes.append("timed by " + ("kernel receive stamps" if health.kernel_timed else "client reads"))
        if errors:
            notes.append("errors: " + ", ".join(f"{k}={v}" for k, v in sorted(errors.items())))
        if retried:
            notes.append(f"retried on a fresh connection: {retried}")
        # The runtime's absence is named first: users whose connections are refused wait between tries, which
        # the client's own health reads as idle time, so "client left its users idle" would blame the client
        # for a runtime that was gone.
        unreachable = state.window_unreachable
        reason = f"runtime unreachable during the window ({unreachable} connections refused)" if unreachable else None
        if reason is None and self.users_alive < self.c:
            reason = f"only {self.users_alive} of {self.c} users were running at the window's end"
        if self.looks and self.reference is not None:
            notes.append(f"gain over c={self.reference.concurrency}, looked at " + "; ".join(self.looks))
        if self.held_looks:
            notes.append("measured on, not yet usable at " + "; ".join(self.held_looks))
        if reason is None:
            reason = verdict(health, self.config.max_loop_lag_s, max_idle_share=self.config.max_idle_share)
        if reason is None and errors and sum(errors.values()) > ok:
            reason = f"most requests failed ({sum(errors.values())} errors, {ok} ok)"
        if reason is None and ok < self.config.min_requests:
            reason = f"too few requests in window ({ok} < {self.config.min_requests})"
        drain_end = end if state.last_end is None else max(state.last_end, end)
        return StepWindow(lane=self.lane.key, concurrency=self.c, start=start, end=end,
                          warmup_start=self.clock.wall(warm_ns), drain_end=drain_end,
                          valid=reason is None, reason=reason, notes=tuple(notes), rate_rps=self.rate)
