"""Paced polling for the latency benches (``bench/recommender_latency.py``, ``bench/fleet.py``): each poller
requests at ``rate`` per second from a random phase, so a hundred pollers do not arrive in lock-step."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator

__all__ = ["paced"]


async def paced(rate: float, start: asyncio.Event, until: list[float]) -> AsyncIterator[None]:
    """Yields once per request to make: from ``start`` until ``until[0]`` (perf_counter), ``rate`` per second
    at a random phase; ``rate`` 0 or less: back to back."""
    period = 1.0 / rate if rate > 0 else 0.0
    await start.wait()
    next_at = time.perf_counter() + random.random() * period
    while time.perf_counter() < until[0]:
        if period:
            await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
            next_at += period
        yield
