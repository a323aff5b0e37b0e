"""Drives the pure engine in real time on an asyncio loop, without drifting from the engine's own model.

Algorithm: each step is planned at a model start time and lasts exactly its modelled duration; the loop
sleeps until that absolute monotonic end time, applies the step, hands the tokens to the waiting streams
and plans the next step to start at the previous step's *model* end (not at the moment the loop woke up),
so scheduling latency never accumulates. When idle, the next step starts at the wake-up time. Requests are
stamped with their arrival on the same clock, and the engine admits only requests that arrived by a step's
start, so no request is admitted before it arrived.

Lag (actual wake-up minus modelled end) is measured for every step; if the loop ever falls behind by more
than ``max_lag_s`` (an overloaded host), the model is re-based to the present and the slip is counted,
rather than bursting to catch up. ``timing_stats()`` reports both: this is the drift figure.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from satbench.simulator.engine import Emission, Engine, Request, RequestSpec
from satbench.simulator.profile import Profile
from satbench.simulator.state_views import TimeMap

__all__ = ["RealTimeRuntime", "Stream", "TimingStats"]


@dataclass(eq=False)
class Stream:
    """The server side of one request: emissions arrive here and wake the HTTP handler."""

    request: Request
    pending: list[Emission] = field(default_factory=list)
    finished: bool = False
    event: asyncio.Event = field(default_factory=asyncio.Event)

    closed: bool = False

    async def next(self) -> list[Emission]:
        """Waits for the next emissions; raises ConnectionResetError once the runtime shuts down."""
        while not self.pending:
            if self.closed:
                raise ConnectionResetError("simulator shutting down")
            self.event.clear()
            await self.event.wait()
        out, self.pending = self.pending, []
        return out

    def push(self, e: Emission) -> None:
        self.pending.append(e)
        if e.finished:
            self.finished = True
        self.event.set()


@dataclass(frozen=True)
class TimingStats:
    steps: int
    lag_mean_s: float
    lag_p99_s: float
    lag_max_s: float
    slips: int
    slipped_s: float

    def to_json(self) -> dict[str, float | int]:
        return {
            "steps": self.steps,
            "lag_mean_s": round(self.lag_mean_s, 6),
            "lag_p99_s": round(self.lag_p99_s, 6),
            "lag_max_s": round(self.lag_max_s, 6),
            "slips": self.slips,
            "slipped_s": round(self.slipped_s, 6),
        }


class RealTimeRuntime:
    def __init__(
        self,
        profile: Profile,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        max_lag_s: float = 0.5,
    ) -> None:
        self.profile = profile
        self.engine = Engine(profile)
        self.clock = clock
        now = clock()
        self.time_map = TimeMap(offset=wall() - now, started_mono=now)
        self.max_lag_s = max_lag_s
        self.last_in_slot: list[Request | None] = [None] * profile.server.slots
        self._streams: dict[int, Stream] = {}
        self._wake = asyncio.Event()
        self._lags: deque[float] = deque(maxlen=8192)
        self._lag_sum = 0.0
        self._lag_max = 0.0
        self._steps = 0
        self._slips = 0
        self._slipped = 0.0
        self._stopped = False
        # (model end, emitted at, decoding requests) of each step, on the runtime's clock: a decoding request's
        # next token comes at each step's end, so the time between emissions is the per-token time of each of
        # its decoding requests as the model planned it and as served (the truth of ITL)
        self.step_history: deque[tuple[float, float, int]] = deque(maxlen=profile.server.truth_history)
        # (written at, request seq, tokens) of each streamed event that carried tokens, on the runtime's clock:
        # when the server handed the event to the socket, later than its step's emission by the server's own
        # scheduling; the time between a request's writes is its per-token time as the wire carried it
        self.write_history: deque[tuple[float, int, int]] = deque(maxlen=profile.server.truth_history)
        self.pause_left: Callable[[float], float] = lambda t_s: 0.0  # the server's engine_pause faults
        self.step_scale: Callable[[float], float] = lambda t_s: 1.0  # the server's slowdown faults
        self.engine.step_scale = lambda now: self.step_scale(now - self.time_map.started_mono)
        self.engine.power.start(now)

    # -- called by the HTTP layer -------------------------------------------------------------------------

    def submit(self, spec: RequestSpec) -> Stream:
        req = self.engine.submit(spec, self.clock())
        stream = Stream(req)
        self._streams[req.seq] = stream
        self._wake.set()
        return stream

    def cancel(self, stream: Stream) -> None:
        self._streams.pop(stream.request.seq, None)
        if not stream.finished:
            self.engine.cancel(stream.request, self.clock())
            self._wake.set()

    def seconds_since_start(self) -> float:
        return self.clock() - self.time_map.started_mono

    def stop(self) -> None:
        """Stops the loop and ends every open stream (their handlers see ConnectionResetError)."""
        self._stopped = True
        self._wake.set()
        for stream in self._streams.values():
            stream.closed = True
            stream.event.set()

    # -- the loop -----------------------------------------------------------------------------------------

    async def run(self) -> None:
        next_start: float | None = None
        while not self._stopped:
            now = self.clock()
            paused = self.pause_left(now - self.time_map.started_mono)
            if paused > 0:  # an engine_pause fault: no step runs until it ends
                await asyncio.sleep(paused)
                next_start = None
                continue
            start = now if next_start is None else next_start
            if now - start > self.max_lag_s:
                self._slips += 1
                self._slipped += now - start
                start = now
            plan = self.engine.begin_step(start)
            if plan is None and start < now:
                plan = self.engine.begin_step(now)
            if plan is None:
                next_start = None
                self._wake.clear()
                await self._wake.wait()
                continue
            delay = plan.end - self.clock()
            if delay > 0:
                await asyncio.sleep(delay)
            result = self.engine.finish_step()
            lag = self.clock() - plan.end
            self._record_lag(lag)
            self.step_history.append((plan.end, plan.end + lag, plan.n_decode))
            for e in result.emissions:
                r = e.request
                if e.finished and r.slot is not None:
                    self.last_in_slot[r.slot] = r
                stream = self._streams.get(r.seq)
                if stream is not None:
                    stream.push(e)
                    if e.finished:
                        del self._streams[r.seq]
            next_start = plan.end
            if delay <= 0:
                await asyncio.sleep(0)

    def _record_lag(self, lag: float) -> None:
        self._steps += 1
        self._lags.append(lag)
        self._lag_sum += lag
        self._lag_max = max(self._lag_max, lag)

    def timing_stats(self) -> TimingStats:
        lags = sorted(self._lags)
        p99 = lags[min(len(lags) - 1, int(0.99 * len(lags)))] if lags else 0.0
        return TimingStats(
            steps=self._steps,
            lag_mean_s=self._lag_sum / self._steps if self._steps else 0.0,
            lag_p99_s=p99,
            lag_max_s=self._lag_max,
            slips=self._slips,
            slipped_s=self._slipped,
        )
