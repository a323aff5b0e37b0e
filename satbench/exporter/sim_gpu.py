"""The simulator's simulated GPU memory (``GET /sim/gpu``), read through the runtime's own URL.

A runtime that answers 404 (a real llama-server) is not a simulator: the reader then reports
:class:`~exporter.gpu.GpuSourceAbsent` and is not asked again for ``recheck_s`` seconds. Until ``/sim/gpu``
has answered once, a failed request also counts as absent, so a real runtime that is down does not grow a
``gpu_up{source="simulator"}`` series; after that, a failure is ``gpu_up{source="simulator"} 0``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from satbench.exporter.adapter import Clock, EndpointFetcher
from satbench.exporter.gpu import GpuDevice, GpuSourceAbsent, GpuUnavailable, parse_sim_gpu

__all__ = ["SimulatedGpuReader"]


class SimulatedGpuReader:
    source = "simulator"

    def __init__(
        self, fetcher: EndpointFetcher, timeout_s: float = 0.5, recheck_s: float = 60.0,
        clock: Clock = time.monotonic,
    ) -> None:
        self._fetcher = fetcher
        self.timeout_s = timeout_s
        self._recheck_s = recheck_s
        self._clock = clock
        self._absent_since: float | None = None
        self._seen = False

    def read(self, pid: int | None) -> Sequence[GpuDevice]:
        if self._absent_since is not None and self._clock() - self._absent_since < self._recheck_s:
            raise GpuSourceAbsent("runtime has no /sim/gpu")
        reply = self._fetcher.get("sim_gpu", "/sim/gpu", self.timeout_s)
        if reply.status in (404, 405, 501):
            self._absent_since = self._clock()
            raise GpuSourceAbsent("runtime has no /sim/gpu")
        if not reply.ok:
            if not self._seen:
                raise GpuSourceAbsent("no /sim/gpu answer yet")
            raise GpuUnavailable(reply.error or f"/sim/gpu answered HTTP {reply.status}")
        self._absent_since = None
        self._seen = True
        try:
            return parse_sim_gpu(reply.body)
        except ValueError as exc:
            raise GpuUnavailable(f"unreadable /sim/gpu: {exc}") from exc
