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
import functools
import time
from array import array
from typing import Protocol

from satbench.core.arrivals import ArrivalStream, gamma_shape
from satbench.core.attainment import RateVerdict, rate_look
from satbench.core.manifest import StepWindow
from satbench.core.objectives import Objectives
from satbench.core.sse import StreamParser
from satbench.core.statistics import quantile
from satbench.loadgen.client import Begun, RawResult
from satbench.loadgen.pacer import Pacer
from satbench.loadgen.senders import RemoteStream, Senders
from satbench.loadgen.step import StepRun, _Active
from satbench.loadgen.workload import RequestSpec, UserWorkload, build_body

__all__ = ["OpenStepRun", "SendStream"]


REMOTE_AHEAD = 4096  # orders given to sender processes and not yet sent, at most
CLOCK_MARGIN_NS = 1_000_000  # beyond the senders' clock offsets' bounds (tens of microseconds on one host)


def _nothing() -> None:
    return None


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
                 senders: Senders | None = None, **kwargs: object) -> None:
        arrival = kwargs["config"].arrival  # type: ignore[attr-defined]
        self.senders = senders
        super().__init__(concurrency=arrival.max_in_flight or 0, **kwargs)  # type: ignore[arg-type]
        self.rate = self.open_rate = rate
        self.capacity_rps = capacity_rps
        self.warmup_s = self.config.warmup_s if warmup_s is None else warmup_s
        objectives = self.config.objectives
        self.objectives = Objectives() if objectives is None else objectives.objectives()
        self._done: list[tuple[float, float, float, bool]] = []  # (intended, wait, end, attained), seconds
        self._warm_ns = 0
        self.steady: bool | None = None
        self.decided_early: bool | None = None  # ended by a look before the window's limit (an open rung)
        self.stream = self._stream()
        # its requests' heads name the rate: the same lengths as at any other rate, never the same prompts
        self.workload = UserWorkload(self.config.workload, self.lane.key, 0, 0, self.text,
                                     stream=f"{self.lane.key}:rate:{self.rate!r}")
        self._index = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._room = asyncio.Condition()
        self._lags: list[tuple[int, int]] = []  # (intended, sent) of every request that ended, perf_counter ns
        self._worker_lags: dict[int, list[tuple[int, int]]] = {}  # the same per sender process (``senders``)
        self._sends = array("q")  # every send's perf_counter_ns: the rate the client achieved
        self._given_up_s: float | None = None  # how far behind the client stopped sending after the window
        self.pacer_kernel = False

    def _live_tokens(self) -> list[tuple[str, str, int]]:
        return [(self.lane.key, "0", len(a.parser.token_ns)) for a in list(self.active.values())]

    async def _run(self) -> StepWindow:
        if self.senders is None:
            await self.client.preopen(min(64, max(4, self.c or round(self.open_rate))))
        else:
            await self.senders.sync_between_rungs()
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
            if self.senders is not None and self.active and self.config.drain_settle_s > 0:
                settle_end = time.monotonic() + self.config.drain_settle_s
                while self.active and time.monotonic() < settle_end:
                    await asyncio.sleep(0.01)
        finally:
            self.stopping = True
            self.metrics.set_step(self.lane.key, self.run_id, 0)
            scheduler.cancel()
            if self.senders is not None:
                await self.senders.drain(max(1.0, self.config.drain_settle_s))
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
                    self.decided_early = None if self.fixed_window else now < cap_end
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
        """Sends each request at its intended time, released by the kernel's timer (``loadgen.pacer``); a cap
        full: it waits in the client. Each request is prepared before its time, so the send is all that runs
        at it. Behind its schedule the client sends one due request per turn of the loop (its capacity,
        evenly); once the window has ended with the client more than ``arrival.max_lag_s`` behind (the rung
        is client-bound and invalid), it stops sending what remains of the window's schedule."""
        if self.senders is not None:
            await self._schedule_remote(warm_ns, self.senders)
            return
        pacer = Pacer(spin_s=self.config.arrival.spin_s)
        self.pacer_kernel = pacer.kernel_timed
        self.client.release_points(pacer.poll)
        limit_ns = int(self.config.arrival.max_lag_s * 1e9)
        try:
            while not self.stopping:
                intended = self._next_intended(warm_ns, limit_ns)
                if intended is None:  # a finite schedule (a trace's) is over, its last sends still to go; or
                    await pacer.flush()  # the client gave up the rest of the window's
                    return
                if self.c:
                    async with self._room:
                        await self._room.wait_for(lambda: len(self.active) + pacer.pending < self.c or self.stopping)
                await pacer.ready(intended)
                if self.stopping:
                    return
                index, spec, body, rid = self._draw()
                parser = StreamParser(self.lane.api, self.config.max_event_bytes)
                begun = self.client.prepare(body, rid, parser)
                pacer.put(intended, functools.partial(self._go, begun),
                          functools.partial(self._fire, index, intended, spec, body, rid, parser, begun),
                          begun.abandon if begun is not None else _nothing)
        finally:
            self.client.release_points(None)
            pacer.close()

    def _in_flight_since(self) -> list[int]:
        """With sender processes, also the requests given to them and not yet known sent (their send, so their
        admission, is no earlier than their intended time, less a margin for the measured clock offsets)."""
        since = super()._in_flight_since()
        if self.senders is not None:
            since += [t - CLOCK_MARGIN_NS for t in self.senders.unsent_since()]
        return since

    def _next_intended(self, warm_ns: int, limit_ns: int) -> int | None:
        """The next send's intended time; ``None`` where the schedule is over (a trace's), or where the window
        has ended with the client more than ``limit_ns`` behind (client-bound: the rest is not sent)."""
        offset = self.stream.next_offset()
        if offset is None:
            return None
        intended = warm_ns + int(offset * 1e9)
        now = time.perf_counter_ns()
        end = self.window_end_ns
        if end is not None and now > end and now - intended > limit_ns and not self.c:
            self._given_up_s = (now - intended) / 1e9
            return None
        return intended

    def _draw(self) -> tuple[int, RequestSpec, bytes, str]:
        """The next request: its index, spec, body and id."""
        index = self._index
        self._index += 1
        spec, body = self._request(index)
        return index, spec, body, f"{self.run_id}-{self.lane.key}-r{self.rate:g}-{index}"

    async def _schedule_remote(self, warm_ns: int, senders: Senders) -> None:
        """The schedule handed to the sender processes (``loadgen.senders``): each request drawn and built here,
        given to a worker ``senders.lead_ns`` before its time; at most ``REMOTE_AHEAD`` given and not yet sent."""
        self.pacer_kernel = True
        limit_ns = int(self.config.arrival.max_lag_s * 1e9)
        while not self.stopping:
            intended = self._next_intended(warm_ns, limit_ns)
            if intended is None:
                return
            while senders.outstanding >= REMOTE_AHEAD and not self.stopping:
                await asyncio.sleep(0.001)
            wait = intended - senders.lead_ns - time.perf_counter_ns()
            if wait > 0:
                await asyncio.sleep(wait / 1e9)
            if self.stopping:
                return
            index, spec, body, rid = self._draw()
            holder: list[int] = []
            worker = senders.dispatch(
                index, intended, rid, body,
                sent=functools.partial(self._remote_sent, index, intended, spec, holder),
                done=functools.partial(self._remote_done, index, intended, spec, rid, holder))
            if worker is None:  # every sender lost: the rung ends here, its verdict says why
                self.looks.append("every sender process was lost")
                return
            holder.append(worker)
            if wait <= 0:
                await asyncio.sleep(0)

    def _remote_sent(self, index: int, intended_ns: int, spec: RequestSpec, holder: list[int], send_ns: int,
                     stream: RemoteStream) -> None:
        self._sends.append(send_ns)
        self.active[index] = _Active(intended_ns, stream, spec.prompt_tokens)  # type: ignore[arg-type]
        self.metrics.add_in_flight(self.lane.key, 1)

    def _remote_done(self, index: int, intended_ns: int, spec: RequestSpec, rid: str, holder: list[int],
                     result: RawResult, stream: RemoteStream) -> None:
        self.metrics.add_in_flight(self.lane.key, -1)
        self.active.pop(index, None)
        if result.outcome == "dropped" and result.error == "cancelled at drain":
            result.extra.update(self._censored(intended_ns))
        else:
            pair = (intended_ns, max(intended_ns, result.send_ns))
            self._lags.append(pair)
            if holder:
                self._worker_lags.setdefault(holder[0], []).append(pair)
            self._outcome(intended_ns, result, spec.prompt_tokens)
        self._finish(0, spec, rid, result, result.send_ns, stream, intended_ns)  # type: ignore[arg-type]

    def _go(self, begun: Begun | None) -> None:
        """The send itself, at its time (the pacer's timer callback): a request ``LaneClient.prepare`` made ready
        is handed to the kernel; any other is sent by its task (``_fire``)."""
        if begun is not None and not self.stopping:
            begun.go()

    def _fire(self, index: int, intended_ns: int, spec: RequestSpec, body: bytes, rid: str, parser: StreamParser,
              begun: Begun | None) -> None:
        """The ``index``-th request's bookkeeping once sent (right after ``_go``): its answer read by a task of
        its own, which sends it first where ``_go`` could not."""
        if begun is not None and not begun.sent:
            begun.abandon()
            begun = None
        if self.stopping and begun is None:
            return
        self._sends.append(begun.send_ns if begun is not None else time.perf_counter_ns())
        self.active[index] = _Active(intended_ns, parser, spec.prompt_tokens)
        self.metrics.add_in_flight(self.lane.key, 1)
        task = asyncio.create_task(self._one(index, intended_ns, spec, body, rid, parser, begun),
                                   name=f"request-{index}")
        self._tasks.add(task)

        def settle(task: asyncio.Task[None]) -> None:
            self._tasks.discard(task)
            if begun is not None:
                begun.abandon()  # released already where the request was read to its end
            if self.active.pop(index, None) is not None:  # cancelled before it ran: its record all the same
                self.metrics.add_in_flight(self.lane.key, -1)
                now = time.perf_counter_ns()
                sent = begun.send_ns if begun is not None else now
                self._finish(0, spec, rid, RawResult(sent, now, [], "dropped", error="cancelled at drain",
                                                     extra=self._censored(intended_ns)), sent, parser, intended_ns)

        task.add_done_callback(settle)

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

    async def _one(self, index: int, intended_ns: int, spec: RequestSpec, body: bytes, rid: str,
                   parser: StreamParser, begun: Begun | None) -> None:
        sent = begun.send_ns if begun is not None else time.perf_counter_ns()
        try:
            result = await self.client.send(body, rid, parser, begun)
        except asyncio.CancelledError:
            self._finish(0, spec, rid, RawResult(sent, time.perf_counter_ns(), parser.token_ns, "dropped",
                                                 error="cancelled at drain", extra=self._censored(intended_ns)),
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
        self._lags.append((intended_ns, max(intended_ns, result.send_ns)))
        self._outcome(intended_ns, result, spec.prompt_tokens)
        self._finish(0, spec, rid, result, result.send_ns, parser, intended_ns)

    def _censored(self, intended_ns: int) -> dict[str, object]:
        """A request cancelled at the drain that was meant inside the window: censored, not failed."""
        start, end = self.window_start_ns, self.window_end_ns
        return {"censored": True} if start is not None and end is not None and start <= intended_ns <= end else {}

    def _open_window(self, warm_ns: int, lags: list[float], read_lags: list[float], cpu_s: float) -> StepWindow:
        window = self._window(warm_ns, lags, read_lags, cpu_s)
        start, end = self.window_start_ns or 0, self.window_end_ns or 0
        # the window's requests, whenever they ended (not only those still running when it closed): meant inside
        # it, or sent inside it (a client far behind sends the warm-up's schedule in the window)
        mine = sorted((sent - intended) / 1e9 for intended, sent in self._lags
                      if start <= intended <= end or start <= sent <= end)
        lag = quantile(mine, 0.99)
        limit = self.config.arrival.max_lag_s
        achieved = self._achieved_rps()
        notes = [*window.notes, *(["rate looked at " + "; ".join(self.looks)] if self.looks else []),
                 f"schedule lag p99 {0.0 if lag is None else lag * 1000:.2f} ms over {len(mine)} requests, "
                 f"released by {'the kernel timer' if self.pacer_kernel else 'the event loop timer'}"]
        if achieved is not None:
            notes.append(f"sent {achieved:.4g} requests/s in the window, {self.open_rate:.4g}/s asked")
        if self._given_up_s is not None:
            notes.append(f"stopped sending after the window {self._given_up_s:.2f} s behind the schedule")
        worst = None
        if self.senders is not None:
            for worker, line in enumerate(self.senders.describe()):
                pairs = sorted((sent - intended) / 1e9 for intended, sent in self._worker_lags.get(worker, [])
                               if start <= intended <= end or start <= sent <= end)
                p99 = quantile(pairs, 0.99)
                notes.append(f"{line}; {len(pairs)} window requests, lag p99 "
                             f"{0.0 if p99 is None else p99 * 1000:.2f} ms")
                if p99 is not None and (worst is None or p99 > worst[1]):
                    worst = (worker, p99)
            notes.extend(self.senders.lost)
        if lag is not None and lag > limit and not self.c:  # said first: why the client fell behind follows
            sent = "" if achieved is None else f"; it sent {achieved:.4g}/s of the {self.open_rate:.4g}/s asked"
            if worst is not None:
                sent += f"; the furthest behind, sender {worst[0]}, at lag p99 {worst[1] * 1000:.1f} ms"
            also = "" if window.valid or window.reason is None else f" ({window.reason})"
            return StepWindow(**{**window.to_dict(), "valid": False, "notes": tuple(notes), "steady": self.steady,
                                 "decided_early": self.decided_early,
                                 "reason": f"client-bound: the client fell behind its schedule: lag p99 "
                                           f"{lag * 1000:.1f} ms > arrival.max_lag_s {limit * 1000:g} ms{sent}{also}"})
        return StepWindow(**{**window.to_dict(), "notes": tuple(notes), "steady": self.steady,
                             "decided_early": self.decided_early})

    def achieved_sends(self) -> tuple[int, float] | None:
        """The sends made inside the window, by their send time, and the window's length (s)."""
        start, end = self.window_start_ns, self.window_end_ns
        if start is None or end is None or end <= start:
            return None
        return sum(1 for t in self._sends if start <= t <= end), (end - start) / 1e9

    def _achieved_rps(self) -> float | None:
        sends = self.achieved_sends()
        return None if sends is None else sends[0] / sends[1]
