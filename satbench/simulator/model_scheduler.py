"""Router mode's model scheduling: which models run, loading and evicting them, and the queue of waiters.

``ModelScheduler`` is llama-server's ``server_lru_sched`` as the simulator models it, kept apart from the
router's HTTP handlers (``simulator.router``) so that the load/evict rules read in one place. It owns the
catalogue of ``RouterModel`` entries, starts a model's engine (``simulator.server.SimulatorApp``) after
``--model-load-s`` seconds and stops it, keeps at most ``--models-max`` running (0 = no limit) by evicting
the least recently used idle model, and parks requests for a model not yet loaded in a FIFO queue, all
requests for one model sharing one entry (one eviction); a waiter that gives up leaves its place. It also
carries what the loads are observed through: the ``model_status`` events for ``GET /models/sse``
subscribers and a change signal the waiters poll. With fake timing (``LLAMA_SERVER_DEBUG_FAKE_TIMING``)
each load waits ``FAKE_TIMING_S`` before it starts. The router composes one and delegates to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from satbench.simulator.dropin import ServerOptions
from satbench.simulator.profile import Profile
from satbench.simulator.server import SimulatorApp

__all__ = ["FAKE_TIMING_S", "LoadCancelled", "ModelScheduler", "RouterModel"]

FAKE_TIMING_S = 2.0


@dataclass(eq=False)
class RouterModel:
    """One model the router knows of, and its simulated instance while it runs."""

    name: str
    source: str  # preset | models_dir | cache
    preset: dict[str, str] = field(default_factory=dict)
    aliases: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    hidden: bool = False
    status: str = "unloaded"
    child: SimulatorApp | None = None
    loader: asyncio.Task[None] | None = None
    req_count: int = 0
    last_used: float = 0.0
    stopping: bool = False

    @property
    def running(self) -> bool:
        return self.status in ("loading", "loaded")


@dataclass
class _Entry:
    model: str
    waiters: int = 1
    loading: bool = False


class LoadCancelled(Exception):
    """A request waiting for its model's load was stopped (its ``should_stop`` said so)."""


class ModelScheduler:
    """Loads, unloads and evicts the router's models, and queues the requests waiting for one."""

    def __init__(self, options: ServerOptions, fake_timing: bool,
                 child_profile: Callable[[RouterModel], Profile]) -> None:
        self.options = options
        self.fake_timing = fake_timing
        self._child_profile = child_profile
        self.catalogue: dict[str, RouterModel] = {}
        self.subscribers: list[asyncio.Queue[dict[str, Any]]] = []
        self.app: web.Application | None = None
        self._queue: list[_Entry] = []
        self._changed: asyncio.Event | None = None
        self._background: set[asyncio.Task[None]] = set()

    # -- lifecycle ----------------------------------------------------------------------------------------

    def start(self, app: web.Application) -> None:
        self.app = app
        self._changed = asyncio.Event()

    async def shutdown(self) -> None:
        for m in list(self.catalogue.values()):
            await self.unload(m)

    def cleanup(self) -> None:
        for t in list(self._background):
            t.cancel()

    def spawn(self, coro: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = asyncio.Event()

    async def _wait_change(self, timeout: float = 0.2) -> None:
        ev = self._changed
        if ev is None:
            await asyncio.sleep(timeout)
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(ev.wait(), timeout)

    def event(self, event: str, model: str, data: Any = None) -> None:
        msg: dict[str, Any] = {"model": model, "event": event}
        if data is not None:
            msg["data"] = data
        for q in self.subscribers:
            q.put_nowait(msg)

    # -- loading, unloading and the queue (llama-server's server_lru_sched) ----------------------------------

    def _n_running(self) -> int:
        return sum(1 for m in self.catalogue.values() if m.running)

    def _has_capacity(self) -> bool:
        return self.options.models_max <= 0 or self._n_running() < self.options.models_max

    def _queued(self, name: str) -> _Entry | None:
        return next((e for e in self._queue if e.model == name), None)

    def _pick_victim(self) -> RouterModel | None:
        idle = [m for m in self.catalogue.values()
                if m.req_count == 0 and m.status == "loaded" and not m.stopping and self._queued(m.name) is None]
        return min(idle, key=lambda m: m.last_used) if idle else None

    def _join(self, name: str) -> None:
        e = self._queued(name)
        if e is not None:
            e.waiters += 1
        else:
            self._queue.append(_Entry(name))

    def _leave(self, name: str) -> None:
        e = self._queued(name)
        if e is not None:
            e.waiters -= 1
            if e.waiters <= 0:
                self._queue.remove(e)

    def _try_claim(self, name: str) -> bool:
        if not self._queue or self._queue[0].model != name or self._queue[0].loading or not self._has_capacity():
            return False
        self._queue[0].loading = True
        return True

    def _claim_done(self, name: str, ok: bool) -> None:
        e = self._queued(name)
        if e is not None and not ok:
            e.loading = False

    def tick(self) -> None:
        """Evicts idle models while queued requests outnumber the slots free or being freed."""
        if self.options.models_max <= 0 or not self._queue:
            return
        running = [m for m in self.catalogue.values() if m.running]
        n_stopping = sum(1 for m in running if m.stopping)
        n_needed = sum(1 for e in self._queue if not e.loading)
        n_claimed = sum(1 for e in self._queue if e.loading and (m := self.catalogue.get(e.model)) is not None
                        and not m.running)  # fmt: skip
        n_free = self.options.models_max - len(running) + n_stopping - n_claimed
        while n_free < n_needed:
            victim = self._pick_victim()
            if victim is None:
                return
            victim.stopping = True
            self.spawn(self.unload(victim))
            n_free += 1

    async def load(self, m: RouterModel) -> None:
        """Starts loading a model (returns once it is ``loading``); raises RuntimeError past the limit."""
        if self.fake_timing:
            await asyncio.sleep(FAKE_TIMING_S)
        if self.options.models_max > 0 and not self._has_capacity():
            victim = self._pick_victim()
            if victim is not None:
                await self.unload(victim)
        if m.status != "unloaded":
            return
        if not self._has_capacity():
            raise RuntimeError("model limit reached, try again later")
        m.status, m.last_used = "loading", time.monotonic()
        m.loader = asyncio.get_running_loop().create_task(self._finish_load(m))
        self.event("model_status", m.name, {"status": "loading"})
        self.notify()

    async def _finish_load(self, m: RouterModel) -> None:
        await asyncio.sleep(self.options.model_load_s)
        if m.status != "loading":
            return
        opts = dataclasses.replace(self.options, router=False, model_path=m.name, aliases=(), tags=m.tags,
                                   api_keys=())  # fmt: skip
        child = SimulatorApp(self._child_profile(m), options=opts)
        child.model_id = m.name
        assert self.app is not None
        await child.on_startup(self.app)
        m.child, m.status, m.loader = child, "loaded", None
        self.event("model_status", m.name, {"status": "loaded"})
        self.notify()

    async def unload(self, m: RouterModel) -> None:
        if m.status == "unloaded" and m.child is None:
            m.stopping = False
            return
        m.stopping = True
        if m.loader is not None:
            m.loader.cancel()
            m.loader = None
        child, m.child = m.child, None
        if child is not None and self.app is not None:
            await child.on_shutdown(self.app)
            await child.on_cleanup(self.app)
        m.status, m.stopping = "unloaded", False
        self.event("model_status", m.name, {"status": "unloaded"})
        self.notify()
        self.tick()

    async def ensure_ready(self, m: RouterModel, should_stop: Callable[[], bool] | None) -> bool:
        """Waits until the model is loaded, loading it when it is this request's turn; True if it waited.
        Raises ``LoadCancelled`` when ``should_stop`` says so while it waits."""
        if not m.stopping and m.status == "loaded":
            return False
        queued = False
        if m.status == "unloaded":
            self._join(m.name)
            self.tick()
            queued = True
        try:
            saw_loading = did_load = False
            while True:
                if self.catalogue.get(m.name) is not m:
                    break
                if m.stopping:
                    if not queued:
                        self._join(m.name)
                        self.tick()
                        queued = True
                    if should_stop is not None and should_stop():
                        raise LoadCancelled(m.name)
                    await self._wait_change()
                    continue
                if m.status == "loaded":
                    break
                if m.status in ("downloading", "downloaded"):
                    break
                if m.status == "loading":
                    saw_loading = True
                elif m.status == "unloaded" and (did_load or saw_loading or not queued):
                    break
                if should_stop is not None and should_stop():
                    raise LoadCancelled(m.name)
                if m.status == "unloaded" and self._try_claim(m.name):
                    ok = True
                    try:
                        await self.load(m)
                        did_load = True
                    except RuntimeError:
                        ok = False
                    self._claim_done(m.name, ok)
                    self.tick()
                    continue
                await self._wait_change()
        except BaseException:
            if queued:
                self._leave(m.name)
            self.tick()
            raise
        if queued:
            self._leave(m.name)
        return True
