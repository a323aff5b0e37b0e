"""One read of the node for every scrape that comes close together: single-flight plus a short max-age.

Each scrape of the exporter used to read the runtime afresh (``/health``, ``/metrics``, ``/slots``, the GPUs,
the process), so N clients scraping one exporter put N times the load on the node it measures: sixteen
clients scraping back to back sent 137 requests/s to each of ``/health``, ``/metrics`` and ``/slots``
(``bench/exporter_shared_reads.py``, two cores), a node whose serving loop answers those too; with sharing
at 0.5 s, at most 2/s. Prometheus' guidance (writing_exporters: "fetch at
scrape time"; cache only what is slow, and say so) allows a cache where reads are costly; here the cost is
the node's, not the exporter's.

:class:`SharedReads` keeps, per key (the model a scrape asks for; ``None``: the node), the read in flight or
the last one done:

- a scrape that finds a read in flight waits for it and reports what it read (single-flight: concurrent
  scrapes make one read);
- a scrape that finds a read done that *began* at most ``max_age_s`` ago reports it again;
- any other scrape reads, and its read is the one later scrapes share.

So the node sees at most one read per key per ``max_age_s`` (plus the one in flight), whatever the number
of scrapers, and a value is at most ``max_age_s`` plus one read old. ``max_age_s`` 0 turns it off: every
scrape reads, as before. A read that fails (raises) is not shared; a waiter whose read does not end within
``wait_s`` (a read is bounded by the scrape budget, so this is a safety net) reads on its own. Keys whose
read is done and older than ``max_age_s`` are dropped at each call, so a scraper inventing ``?model=``
names cannot grow the table.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Generic, TypeVar

from satbench.exporter.adapter import Clock

__all__ = ["Shared", "SharedReads"]

T = TypeVar("T")


@dataclass(frozen=True)
class Shared(Generic[T]):
    """What a read gave, when it began (``clock`` time) and whether another scrape made it."""

    value: T
    began: float
    shared: bool


class SharedReads(Generic[T]):
    """Single-flight reads per key, each reused while it began at most ``max_age_s`` ago (module docstring)."""

    def __init__(self, max_age_s: float, clock: Clock, wait_s: float) -> None:
        if not max_age_s >= 0:
            raise ValueError(f"max_age_s must be >= 0, got {max_age_s}")
        self.max_age_s = max_age_s
        self.wait_s = wait_s
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[Hashable, tuple[float, Future[T]]] = {}

    def get(self, key: Hashable, read: Callable[[], T]) -> Shared[T]:
        """The value of ``read()`` for ``key``: this caller's own, or one shared (module docstring)."""
        if self.max_age_s <= 0:
            began = self._clock()
            return Shared(read(), began, False)
        with self._lock:
            now = self._clock()
            self._prune(now)
            entry = self._entries.get(key)
            if entry is None:
                entry = (now, Future())
                self._entries[key] = entry
                lead = True
            else:
                lead = False
        began, future = entry
        if lead:
            return Shared(self._lead(key, entry, read), began, False)
        try:
            return Shared(future.result(timeout=self.wait_s), began, True)
        except Exception:  # the read overran wait_s, or failed: read on our own, shared with no one
            began = self._clock()
            return Shared(read(), began, False)

    def _lead(self, key: Hashable, entry: tuple[float, Future[T]], read: Callable[[], T]) -> T:
        future = entry[1]
        try:
            value = read()
        except BaseException as exc:
            with self._lock:
                if self._entries.get(key) is entry:
                    del self._entries[key]
            future.set_exception(exc)
            raise
        future.set_result(value)
        return value

    def _prune(self, now: float) -> None:
        """Forgets the reads done and too old to share (the lock is held)."""
        for key in [k for k, (began, f) in self._entries.items() if f.done() and now - began > self.max_age_s]:
            del self._entries[key]
