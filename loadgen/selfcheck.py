"""Client self-check: is the load generator itself keeping up?

A latency measured by a client whose event loop is late is the client's latency, not the server's. Two
probes run during every step:

- event-loop lag: a task sleeps ``interval_s`` and records how late it woke (no busy polling: one wake-up
  every 20 ms);
- dispatch delay: per request, the time from the moment a user decided to send (its previous request
  ended) to the moment the request was handed to the connection.

plus the process CPU share over the window (a client at ~100% of a core is the bottleneck). ``verdict``
turns these into a reason to mark the step invalid, or ``None``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass

from satbench.step_figures import quantile

__all__ = ["ClientHealth", "LoopLagProbe", "verdict"]


@dataclass(frozen=True, slots=True)
class ClientHealth:
    loop_lag_p99_s: float | None
    loop_lag_max_s: float | None
    dispatch_p99_s: float | None
    cpu_share: float | None

    def to_dict(self) -> dict[str, float | None]:
        return {"loop_lag_p99_s": self.loop_lag_p99_s, "loop_lag_max_s": self.loop_lag_max_s,
                "dispatch_p99_s": self.dispatch_p99_s, "cpu_share": self.cpu_share}


def verdict(health: ClientHealth, max_lag_s: float, max_cpu_share: float = 0.97) -> str | None:
    """Why the client could not keep up, or ``None`` when it could."""
    if health.loop_lag_p99_s is not None and health.loop_lag_p99_s > max_lag_s:
        lag = health.loop_lag_p99_s * 1e3
        return f"client event loop lagged (p99 {lag:.1f} ms > {max_lag_s * 1e3:.1f} ms)"
    if health.dispatch_p99_s is not None and health.dispatch_p99_s > max_lag_s:
        return f"client dispatch delay p99 {health.dispatch_p99_s * 1e3:.1f} ms > {max_lag_s * 1e3:.1f} ms"
    if health.cpu_share is not None and health.cpu_share > max_cpu_share:
        return f"client CPU saturated ({health.cpu_share:.0%} of a core)"
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
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None


def health_from(lags: list[float], dispatch: list[float], cpu_s: float, wall_s: float) -> ClientHealth:
    lags_sorted, disp_sorted = sorted(lags), sorted(dispatch)
    return ClientHealth(
        loop_lag_p99_s=quantile(lags_sorted, 0.99),
        loop_lag_max_s=lags_sorted[-1] if lags_sorted else None,
        dispatch_p99_s=quantile(disp_sorted, 0.99),
        cpu_share=cpu_s / wall_s if wall_s > 0 else None,
    )
