"""The event loop for the long-running processes: uvloop when installed, else asyncio's own.

uvloop's socket reads and writes cost about half as much CPU per call as asyncio's selector loop, which
matters in every per-token path (the load generator, the relay, the stream server). It is optional: the
``loop_factory`` is ``None`` without it, and ``asyncio.Runner`` then makes a standard loop.
"""

from __future__ import annotations

from asyncio import AbstractEventLoop
from collections.abc import Callable

__all__ = ["fast_loop_factory"]


def fast_loop_factory() -> Callable[[], AbstractEventLoop] | None:
    """uvloop's ``new_event_loop`` when uvloop is importable, else ``None`` (asyncio's default loop)."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop
