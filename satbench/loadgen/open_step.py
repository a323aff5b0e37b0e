"""One open-loop rung: requests sent on a seeded arrival schedule at a rate, whatever the server does.

A closed loop's users wait for their answers, so a slow server slows its own load and its latency reads
better than open traffic would see at the same throughput (coordinated omission). Here a scheduler sends
each request at its intended time from ``core.arrivals`` (``constant``, ``poisson`` or ``gamma``), each request
its own task; with ``arrival.max_in_flight`` a request that finds the cap full waits in the client until one
ends, and that wait is part of its latency. Every record carries the rung's ``rate_rps`` and its
``intended_at``: its TTFT and e2e from the intended time are in the step figures (``ttft_intended_s``,
``latency_intended_s``) and in goodput, so neither a client that fell behind nor a server stall can hide a
wait. The client's own lag (sent against intended, ``schedule_lag_s``) is measured; a rung whose p99 lag
passes ``arrival.max_lag_s`` is marked invalid, as the closed loop's self-check marks a client that could not
keep up.

Warm-up, window, drain and the records are the closed loop's (``loadgen.step.StepRun``): the scheduler keeps
sending through the drain until every request meant to be sent inside the window has ended, then stops. A
rung is named ``(lane, concurrency, rate_rps)``: its ``concurrency`` is the in-flight cap, 0 without one;
every request is user 0 (an open stream has no users).

A trace rung (``loadgen.trace_step``) is this rung with two parts of its own: the send offsets (``_stream``:
the trace's, scaled, ``None`` when over) and each request (``_request``: the trace's lengths and prompt), and
its window's longest look (``_window_cap_s``) is the replayed trace's length.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol

from satbench.core.arrivals import ArrivalStream, gamma_shape
from satbench.core.attainment import RateVerdict, rate_look
from satbench.core.manifest import StepWindow
from satbench.core.objectives import Objectives
from satbench.core.sse import StreamParser
from satbench.core.statistics import quantile
from satbench.loadgen.client import RawResult
from satbench.loadgen.step import StepRun, _Active
from satbench.loadgen.workload import RequestSpec, UserWorkload, build_body

__all__ = ["OpenStepRun", "SendStream"]


class SendStream(Protocol):
    """A rung's send offsets one at a time, in seconds since its start; ``None`` once a finite one is over."""

    def next_offset(self) -> float | None: ...


class OpenStepRun(StepRun):
    """Runs one (lane, rate) rung; ``await run()`` returns its ``StepWindow`` (``rate_rps`` set)."""

    decide_early = True  # a look that decides ends the window (a trace rung replays its whole window)
    # a trace rung's window is its schedule's own stretch [warm-up, warm-up + window cap]: never cut, never ended
    # early, its bounds exact (loadgen.trace_step)
    fixed_window = False
    look_period: float | None = None  # a trace rung's pass: its looks' backlog growth is pass against pass

    def __init__(self, *, rate: float, capacity_rps: float | None = None, warmup_s: float | None = None,
                 **kwargs: object) -> None:
        arrival = kwargs["config"].arrival  # type: ignore[attr-defined]
        super().__init__(concurrency=arrival.max_in_flight or 0, **kwargs)  # type: ignore[arg-type]
        self.rate = self.open_rate = rate
        self.capacity_rps = capacity_rps
        self.warmup_s = self.config.warmup_s if warmup_s is None else warmup_s
        objectives = self.config.objectives
        self.objectives = Objectives() if objectives is None else objectives.objectives()
        self._done: list[tuple[float, float, float, bool]] = []  # (intended, wait, end, attained), seconds
        self._warm_ns = 0
        self.steady: bool | None = None
        self.stream = self._stream()
        # its requests' heads name the rate: the same lengths as at any other rate, never the same prompts
        self.workload = UserWorkload(self.config.workload, self.lane.key, 0, 0, self.text,
                                     stream=f"{self.lane.key}:rate:{self.rate!r}")
        self._index = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._room = asyncio.Condition()
        self._lags: list[float] = []

    def _live_tokens(self) -> list[tuple[str, str, int]]:
        return [(self.lane.key, "0", len(a.parser.token_ns)) for a in list(self.active.values())]

    async def _run(self) -> StepWindow:
        await self.client.preopen(min(64, max(4, self.c or round(self.open_rate))))
        from satbench.loadgen.selfcheck import LoopLagProbe

        probe = LoopLagProbe(0.1 if self.client.kernel_timed else 0.02)
        probe.start()
        cpu0 = time.process_time()
        warm_ns = self._warm_ns = time.perf_counter_ns()
        scheduler = asyncio.create_task(self._schedule(warm_ns), name="arrivals")
        try:
            await self._control(warm_ns)
            probe_lags = probe.take()
            read_lags = [ns / 1e9 for ns in self.client.take_read_lags()]
            cpu_window = time.process_time() - cpu0
            await self._drain([scheduler])
            if self._tasks and self.config.drain_settle_s > 0:  # what was sent after the window: a clean end
                await asyncio.wait(list(self._tasks), timeout=self.config.drain_settle_s)
        finally:
            self.stopping = True
            self.metrics.set_step(self.lane.key, self.run_id, 0)
            scheduler.cancel()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(scheduler, *self._tasks, return_exceptions=True)
            self._flush_stalls(force=True)
            await probe.stop()
            self.writer.sync()
        return self._open_window(warm_ns, probe_lags, read_lags, cpu_window)

    async def _control(self, warm_ns: int) -> None:
        """Warm-up, then a window looked at (``core.attainment.rate_look``) at ``min_window_s`` and 1.5x growing
        lengths up to ``arrival.max_window_s``, ending at the first look that decides the rate; the warm-up
        cut of the last look moves the window's start past the idle start. A ``fixed_window`` (a trace rung's)
        is exactly ``[warm-up, warm-up + _window_cap_s()]``, looked at but neither cut nor ended early."""
        cfg = self.config
        await self._tick_until(warm_ns + int(self.warmup_s * 1e9), "warmup", warm_ns)
        self.client.take_read_lags()
        self.window_start_ns = start = warm_ns + int(self.warmup_s * 1e9) if self.fixed_window \
            else time.perf_counter_ns()
        self.metrics.set_step(self.lane.key, self.run_id, self.c)
        cap_end = start + int(self._window_cap_s() * 1e9)
        look_at = min(cap_end, start + int(cfg.min_window_s * 1e9))
        verdict = None
        while True:
            now = time.perf_counter_ns()
            if now >= look_at:
                verdict = self._look(start, now, early=self.decide_early and now < cap_end)
                elapsed = (now - start) / 1e9
                self.looks.append(f"{elapsed:.0f} s: {verdict.verdict} ({verdict.reason})")
                if (verdict.verdict != "undecided" and self.decide_early) or now >= cap_end:
                    break
                look_at = min(cap_end, start + int(1.5 * (now - start)))
            self._show("window", start, now)
            await asyncio.sleep(min(0.25, max(0.01, (look_at - now) / 1e9)))
        self.window_end_ns = cap_end if self.fixed_window else time.perf_counter_ns()
        if verdict is not None and not self.fixed_window:
            self.steady = verdict.steady
            if verdict.start is not None:
                self.window_start_ns = max(start, self._warm_ns + int(verdict.start * 1e9))
        self.metrics.set_step(self.lane.key, self.run_id, 0)

    def _look(self, start_ns: int, now_ns: int, *, early: bool = False) -> RateVerdict:
        """What the rung shows so far (``core.attainment.rate_look``), on seconds since the rung began; ``early``:
        a look before the window's limit that may end the rung (decided at ``EARLY_LOOK_CONFIDENCE``)."""
        base = self._warm_ns
        pending = []
        for a in list(self.active.values()):  # one still without a token has missed past its own TTFT deadline
            first = a.parser.token_ns[0] if a.parser.token_ns else now_ns
            wait = (first - a.decided_ns) / 1e9
            missed = not a.parser.token_ns and self.objectives.ttft_overdue(wait, a.prompt_tokens)
            pending.append(((a.decided_ns - base) / 1e9, wait, missed))
        return rate_look(list(self._done), pending, (start_ns - base) / 1e9, (now_ns - base) / 1e9, self.open_rate,
                         target=self.config.arrival.target, capacity_rps=self.capacity_rps,
                         cut=not self.fixed_window, period=self.look_period, early=early)

    def _outcome(self, intended_ns: int, result: RawResult, prompt_tokens: int | None) -> None:
        """One ended request as the looks count it: its wait and whether it attained every objective (the pause
        excess aside: the rung's decode step is known only at its end)."""
        tokens = result.token_ns
        first = tokens[0] if tokens else result.end_ns
        tpot = (tokens[-1] - tokens[0]) / 1e9 / (len(tokens) - 1) if len(tokens) > 1 else None
        ok = result.outcome == "ok"
        missed = self.objectives.misses(ok=ok, ttft_s=(first - intended_ns) / 1e9, tpot_s=tpot, pause_excess_s=None,
                                        e2e_s=(result.end_ns - intended_ns) / 1e9, prompt_tokens=prompt_tokens)
        base = self._warm_ns
        self._done.append(((intended_ns - base) / 1e9, (first - intended_ns) / 1e9, (result.end_ns - base) / 1e9,
                           not missed))

    async def _schedule(self, warm_ns: int) -> None:
        """Sends each request at its intended time (a cap full: it waits in the client)."""
        while not self.stopping:
            offset = self.stream.next_offset()
            if offset is None:  # a finite schedule (a trace's) is over
                return
            intended = warm_ns + int(offset * 1e9)
            delay = (intended - time.perf_counter_ns()) / 1e9
            if delay > 0:
                await asyncio.sleep(delay)
            if self.stopping:
                return
            if self.c:
                async with self._room:
                    await self._room.wait_for(lambda: len(self.active) < self.c or self.stopping)
                if self.stopping:
                    return
            index = self._index
            self._index += 1
            task = asyncio.create_task(self._one(index, intended), name=f"request-{index}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _stream(self) -> ArrivalStream | SendStream:
        """The rung's send offsets: the seeded arrival process at its rate (a trace rung: the trace's)."""
        arrival = self.config.arrival
        seed = f"{self.config.workload.seed}:{self.lane.key}:{self.rate!r}"
        return ArrivalStream(arrival.process, self.open_rate, seed, gamma_shape(arrival.burstiness, arrival.cv))

    def _request(self, index: int) -> tuple[RequestSpec, bytes]:
        """The ``index``-th request of the rung: the seeded workload's (a trace rung's own: ``loadgen.trace_step``)."""
        spec = self.workload.next_spec()
        return spec, build_body(self.lane.api, self.lane.model, spec, self.text, self.config.workload, "u0")

    def _window_cap_s(self) -> float:
        """The longest the rung's window may be looked at."""
        return max(self.config.arrival.max_window_s, self.config.min_window_s)

    async def _one(self, index: int, intended_ns: int) -> None:
        spec, body = self._request(index)
        rid = f"{self.run_id}-{self.lane.key}-r{self.rate:g}-{index}"
        parser = StreamParser(self.lane.api, self.config.max_event_bytes)
        self.active[index] = _Active(intended_ns, parser, spec.prompt_tokens)
        self.metrics.add_in_flight(self.lane.key, 1)
        sent = time.perf_counter_ns()
        try:
            result = await self.client.send(body, rid, parser)
        except asyncio.CancelledError:
            cut = self.window_end_ns is not None and self.window_start_ns is not None \
                and self.window_start_ns <= intended_ns <= self.window_end_ns
            self._finish(0, spec, rid, RawResult(sent, time.perf_counter_ns(), parser.token_ns, "dropped",
                                                 error="cancelled at drain",
                                                 extra={"censored": True} if cut else {}),
                         sent, parser, intended_ns)
            raise
        except Exception as exc:  # a client bug on a hostile answer is a malformed record, never a lost request
            result = RawResult(sent, time.perf_counter_ns(), parser.token_ns, "malformed",
                               error=f"client failed on the answer: {exc!r}"[:200])
        finally:
            self.metrics.add_in_flight(self.lane.key, -1)
            self.active.pop(index, None)
            async with self._room:
                self._room.notify_all()
        if self.window_start_ns is not None and self.window_end_ns is not None \
                and self.window_start_ns <= intended_ns <= self.window_end_ns:
            self._lags.append(max(0.0, (result.send_ns - intended_ns) / 1e9))
        self._outcome(intended_ns, result, spec.prompt_tokens)
        self._finish(0, spec, rid, result, result.send_ns, parser, intended_ns)

    def _open_window(self, warm_ns: int, lags: list[float], read_lags: list[float], cpu_s: float) -> StepWindow:
        window = self._window(warm_ns, lags, read_lags, cpu_s)
        lag = quantile(sorted(self._lags), 0.99)
        limit = self.config.arrival.max_lag_s
        notes = (*window.notes, *(["rate looked at " + "; ".join(self.looks)] if self.looks else []),
                 f"schedule lag p99 {0.0 if lag is None else lag * 1000:.2f} ms over "
                                f"{len(self._lags)} requests")
        if window.valid and lag is not None and lag > limit and not self.c:
            return StepWindow(**{**window.to_dict(), "valid": False, "notes": notes, "steady": self.steady,
                                 "reason": f"the client fell behind its schedule: lag p99 {lag * 1000:.1f} ms > "
                                           f"arrival.max_lag_s {limit * 1000:g} ms"})
        return StepWindow(**{**window.to_dict(), "notes": notes, "steady": self.steady})
