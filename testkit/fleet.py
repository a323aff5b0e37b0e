"""Run a simulated fleet (``simulator.fleet``) in tests: ``FleetThread``, one event loop in a background thread.

A synchronous test wants the fleet's URLs and a blocking restart, not an event loop: ``FleetThread`` runs
``serve_fleet`` on its own loop in a daemon thread (``testkit.process.LoopThread``), hands back
``{node: {lane: url}}`` once every lane listens, and runs ``Fleet.restart`` on that loop for the caller
(returning when the new app listens). Every wait is bounded: a fleet that does not start, a restart that hangs
and a shutdown that hangs all raise (or, for the shutdown, give up and leave a daemon thread) instead of
hanging the test run. Errors from the fleet's start (a port that cannot be bound, a bad profile) are raised in
the caller's thread.
"""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Any

from satbench.simulator.fleet import Fleet, FleetSpec
from testkit.process import LoopThread

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
        self.restart_timeout_s = restart_timeout_s
        self._fleet: Fleet | None = None
        self._thread = LoopThread("sim-fleet", startup_timeout_s=startup_timeout_s,
                                  stop_timeout_s=shutdown_timeout_s)

    async def _serve(self, stop: asyncio.Event) -> None:
        from satbench.simulator.fleet import serve_fleet

        try:
            await serve_fleet(self.spec, host=self.host, stop=stop, on_ready=self._thread.set_ready,
                              on_fleet=self._on_fleet)
        finally:
            self._fleet = None

    def _on_fleet(self, fleet: Fleet) -> None:
        self._fleet = fleet

    def __enter__(self) -> FleetThread:
        self._thread.start(self._serve)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._thread.stop()

    @property
    def fleet(self) -> Fleet:
        """The running ``Fleet`` (touch it from the caller's thread only for reads, e.g. ``.app(...)``)."""
        if self._fleet is None:
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
        try:
            url: str = self._thread.call(self.fleet.restart(node, lane, **overrides), self.restart_timeout_s)
        except TimeoutError:
            raise TimeoutError(f"restart of {node}/{lane} did not finish in {self.restart_timeout_s}s") from None
        return url
