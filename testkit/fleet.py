"""Run a simulated fleet (``simulator.fleet``) in tests: ``FleetThread``, one event loop in a background thread.

A synchronous test wants the fleet's URLs and a blocking restart, not an event loop: ``FleetThread`` runs
``serve_fleet`` on its own loop in a daemon thread, hands back ``{node: {lane: url}}`` once every lane
listens, and runs ``Fleet.restart`` on that loop for the caller (returning when the new app listens). Every
wait is bounded: a fleet that does not start, a restart that hangs and a shutdown that hangs all raise (or,
for the shutdown, give up and leave a daemon thread) instead of hanging the test run. Errors from the fleet's
start (a port that cannot be bound, a bad profile) are raised in the caller's thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from types import TracebackType
from typing import Any

from simulator.fleet import Fleet, FleetSpec

__all__ = ["FleetThread"]

Urls = dict[str, dict[str, str]]


class FleetThread:
    """``with FleetThread(FleetSpec.uniform(3, {"dense": "dense"})) as fleet: httpx.get(fleet.url(...))``."""

    def __init__(
        self,
        spec: FleetSpec,
        *,
        host: str = "127.0.0.1",
        startup_timeout_s: float = 60.0,
        restart_timeout_s: float = 15.0,
        shutdown_timeout_s: float = 15.0,
    ) -> None:
        self.spec = spec
        self.host = host
        self.startup_timeout_s = startup_timeout_s
        self.restart_timeout_s = restart_timeout_s
        self.shutdown_timeout_s = shutdown_timeout_s
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._fleet: Fleet | None = None
        self._ready: concurrent.futures.Future[Urls] = concurrent.futures.Future()
        self._thread = threading.Thread(target=self._run, name="sim-fleet", daemon=True)

    # -- the background loop ------------------------------------------------------------------------------

    def _run(self) -> None:
        from simulator.fleet import serve_fleet

        asyncio.set_event_loop(self._loop)
        try:
            self._stop = asyncio.Event()
            main = serve_fleet(self.spec, host=self.host, stop=self._stop, on_ready=self._on_ready,
                               on_fleet=self._on_fleet)
            self._loop.run_until_complete(main)
        except BaseException as exc:
            if not self._ready.done():
                self._ready.set_exception(exc)
        finally:
            self._fleet = None
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.close()
            if not self._ready.done():
                self._ready.set_exception(RuntimeError("the fleet stopped before it was ready"))

    def _on_fleet(self, fleet: Fleet) -> None:
        self._fleet = fleet

    def _on_ready(self, urls: Urls) -> None:
        self._ready.set_result(urls)

    # -- the caller's side --------------------------------------------------------------------------------

    def __enter__(self) -> FleetThread:
        self._thread.start()
        try:
            self._ready.result(timeout=self.startup_timeout_s)
        except concurrent.futures.TimeoutError:
            self._shutdown()
            raise TimeoutError(f"the fleet did not start in {self.startup_timeout_s}s") from None
        except BaseException:
            self._shutdown()
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._shutdown()

    def _shutdown(self) -> None:
        stop = self._stop
        if stop is not None and self._thread.is_alive():
            with contextlib.suppress(RuntimeError):  # the loop has closed already
                self._loop.call_soon_threadsafe(stop.set)
        if self._thread.is_alive():
            self._thread.join(timeout=self.shutdown_timeout_s)

    @property
    def fleet(self) -> Fleet:
        """The running ``Fleet`` (touch it from the caller's thread only for reads, e.g. ``.app(...)``)."""
        if self._fleet is None or not self._ready.done():
            raise RuntimeError("the fleet is not running")
        return self._fleet

    def urls(self) -> Urls:
        """``{node: {lane: url}}``."""
        return self.fleet.urls()

    def url(self, node: str, lane: str) -> str:
        return self.fleet.url(node, lane)

    def app(self, node: str, lane: str) -> Any:
        """The ``SimulatorApp`` serving one lane now (white-box checks; read only)."""
        return self.fleet.app(node, lane)

    def restart(self, node: str, lane: str, **overrides: Any) -> str:
        """``Fleet.restart`` on the fleet's loop; returns the lane's URL once the new app listens."""
        future = asyncio.run_coroutine_threadsafe(self.fleet.restart(node, lane, **overrides), self._loop)
        try:
            return future.result(timeout=self.restart_timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"restart of {node}/{lane} did not finish in {self.restart_timeout_s}s") from None
