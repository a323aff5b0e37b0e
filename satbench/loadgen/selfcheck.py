"""Client self-check: is the load generator itself keeping up?

A latency measured by a client whose event loop is late is the client's latency, not the server's. Two
probes run during every step:

- event-loop lag: a task sleeps ``interval_s`` and records how late it woke (no busy polling: one wake-up
  every 20 ms);
- dispatch delay: per request, the time from the moment its user's previous request ended to the moment
  this one was handed to the kernel; summed over the window it is the users' *idle share*, how far the
  offered concurrency fell short of c;
- read lag (kernel-timed transport only): per request, how long after the kernel had the first answer
  bytes the client read them;

plus the process CPU share over the window (a client at ~100% of a core is the bottleneck). ``verdict``
turns these into a reason to mark the step invalid, or ``None``.

What invalidates a step depends on how it was timed. Timed by the read (aiohttp), a late loop is a late
clock: loop lag or dispatch delay past ``max_lag_s`` invalidates. Timed by the kernel, a late loop no longer
moves any latency (arrivals are stamped before the process runs, the send time is read at the send), so it
only costs offered load: the step is invalid when users sat idle for more than ``max_idle_share`` of their
time, or the client's CPU is saturated; lags are kept as notes.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from satbench.core.statistics import quantile

__all__ = ["ClientHealth", "LoopLagProbe", "verdict"]


@dataclass(frozen=True, slots=True)
class ClientHealth:
    loop_lag_p99_s: float | None
    loop_lag_max_s: float | None
    dispatch_p99_s: float | None
    cpu_share: float | None
    read_lag_p99_s: float | None = None
    idle_share: float | None = None
    kernel_timed: bool = False

    def to_dict(self) -> dict[str, float | None]:
        return {"loop_lag_p99_s": self.loop_lag_p99_s, "loop_lag_max_s": self.loop_lag_max_s,
                "dispatch_p99_s": self.dispatch_p99_s, "cpu_share": self.cpu_share,
                "read_lag_p99_s": self.read_lag_p99_s, "idle_share": self.idle_share}


def verdict(health: ClientHealth, max_lag_s: float, max_cpu_share: float = 0.97,
            max_idle_share: float = 0.05) -> str | None:
    """Why the client could not keep up, or ``None`` when it could (see the module docstring)."""
    if health.cpu_share is not None and health.cpu_share > max_cpu_share:
        return f"client CPU saturated ({health.cpu_share:.0%} of a core)"
    if health.kernel_timed:
        if health.idle_share is not None and health.idle_share > max_idle_share:
            p99 = (health.dispatch_p99_s or 0.0) * 1e3
            return (f"client left its users idle {health.idle_share:.1%} of the time (> {max_idle_share:.0%}; "
                    f"dispatch delay p99 {p99:.1f} ms): the offered concurrency fell short")
        return None
    if health.loop_lag_p99_s is not None and health.loop_lag_p99_s > max_lag_s:
        lag = health.loop_lag_p99_s * 1e3
        return f"client event loop lagged (p99 {lag:.1f} ms > {max_lag_s * 1e3:.1f} ms)"
    if health.dispatch_p99_s is not None and health.dispatch_p99_s > max_lag_s:
        return f"client dispatch delay p99 {health.dispatch_p99_s * 1e3:.1f} ms > {max_lag_s * 1e3:.1f} ms"
    return None


class LoopLagProbe:
    """Measures event-loop lag while running; ``take()`` returns and clears the samples."""

    def __init__(self, interval_s: float = 0.02) -> None:
        self.interval_s = interval_s
        self.samples: list[float] = []
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        interval = self.interval_s
        while True:
            t0 = time.perf_counter()
            await asyncio.sleep(interval)
            self.samples.append(max(0.0, time.perf_counter() - t0 - interval))

    def take(self) -> list[float]:
        out, self.samples = self.samples, []
        return out

    async def stop(self) -> None:
        if self._task is not None:
            task, self._task = self._task, None
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise  # the caller is being cancelled too (Ctrl-C): never swallow that


def health_from(lags: list[float], dispatch: list[float], cpu_s: float, wall_s: float, *,
                busy_s: float = 0.0, read_lags: list[float] | None = None,
                kernel_timed: bool = False) -> ClientHealth:
    """``dispatch``: the window's dispatch delays; ``busy_s``: the same requests' summed e2e (for the idle
    share); ``read_lags``: per-request read lags (kernel-timed transport)."""
    lags_sorted, disp_sorted = sorted(lags), sorted(dispatch)
    idle = sum(dispatch)
    return ClientHealth(
        loop_lag_p99_s=quantile(lags_sorted, 0.99),
        loop_lag_max_s=lags_sorted[-1] if lags_sorted else None,
        dispatch_p99_s=quantile(disp_sorted, 0.99),
        cpu_share=cpu_s / wall_s if wall_s > 0 else None,
        read_lag_p99_s=quantile(sorted(read_lags), 0.99) if read_lags else None,
        idle_share=idle / (idle + busy_s) if idle + busy_s > 0 else None,
        kernel_timed=kernel_timed,
    )
