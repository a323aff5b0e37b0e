"""The simulator's white-box routes, ``/sim/*``: what no llama-server has and every accuracy test needs.

``/sim/truth`` is the engine's own record of every request (admission, first and last token, the slot, the
prompt-cache hit) with its timing statistics, with ``steps=1`` every step's end as planned and as emitted
with the requests it decoded (the truth of ITL: ``simulator.runtime``), with ``writes=1`` every streamed event's
write to the socket (the same truth as the wire carried it), and, by default, the closed-form capacity curve of
a workload (``/sim/capacity`` alone: ``simulator.capacity``); ``/sim/gpu`` the modelled GPU memory; ``/sim/faults``
reads and replaces the fault schedule the edge applies (``simulator.faults``). ``SimulatorApp`` holds one
``GroundTruthRoutes`` (``app.ground_truth``).
"""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web

from satbench.simulator.capacity import CapacityError, capacity_curve
from satbench.simulator.faults import FaultSchedule, faults_from_json
from satbench.simulator.profile import Profile, ProfileError
from satbench.simulator.runtime import RealTimeRuntime
from satbench.simulator.state_views import active_record_json, gpu_view, truth_record_json
from satbench.simulator.stream_routes import error_response, json_body, json_response

__all__ = ["GroundTruthRoutes"]


class GroundTruthRoutes:
    """The ``/sim/*`` routes of one model's engine (``runtime``), its profile and its fault schedule."""

    def __init__(self, runtime: RealTimeRuntime, profile: Profile, faults: FaultSchedule) -> None:
        self.runtime = runtime
        self.profile = profile
        self.faults = faults

    async def truth(self, request: web.Request) -> web.Response:
        q = request.query
        tm = self.runtime.time_map
        try:
            since = float(q.get("since", "0"))
            limit = int(q.get("limit", "100000"))
            capacity = self._capacity(q) if q.get("capacity", "1") != "0" else None
            with_steps = q.get("steps", "0") != "0"
            with_writes = q.get("writes", "0") != "0"
        except (ValueError, CapacityError) as exc:
            return error_response(400, str(exc), "invalid_request_error")
        engine = self.runtime.engine
        records = [truth_record_json(r, tm) for r in engine.truth_since(since - tm.offset)]
        truncated = len(records) > limit
        history_full = len(engine.truth) == engine.truth.maxlen
        return json_response(
            {
                "simulated": True,
                "profile": self.profile.name,
                "now": round(time.time(), 6),
                "started_at": tm.unix(tm.started_mono),
                "since": since,
                "history_limit": engine.truth.maxlen,
                "history_full": history_full,
                "truncated": truncated,
                "waiting": len(engine.waiting),
                "in_flight": engine.busy_slots,
                "timing": self.runtime.timing_stats().to_json(),
                "requests": records[-limit:] if truncated else records,
                "active": [
                    active_record_json(r, tm)
                    for r in [*(s for s in engine.slots if s is not None), *engine.waiting]
                ],
                "capacity": capacity,
                **({"steps": self._steps(since)} if with_steps else {}),
                **({"writes": self._writes(since)} if with_writes else {}),
            }
        )

    def _steps(self, since: float) -> list[list[float | int]]:
        """``?steps=1``: every step since ``since`` as [planned end, emitted at (Unix s), decoding requests]:
        the time between two emissions is the per-token time of each request decoding in the later step."""
        offset = self.runtime.time_map.offset
        return [[round(end + offset, 6), round(at + offset, 6), n] for end, at, n in self.runtime.step_history
                if at + offset >= since]

    def _writes(self, since: float) -> list[list[float | int]]:
        """``?writes=1``: every streamed event that carried tokens since ``since`` as [written at (Unix s), request
        seq, tokens]: when the server handed it to the socket, the time a kernel-stamped client reads it."""
        offset = self.runtime.time_map.offset
        return [[round(at + offset, 6), seq, n] for at, seq, n in self.runtime.write_history
                if at + offset >= since]

    def _capacity(self, q: Any) -> dict[str, Any]:
        p = int(q.get("prompt_tokens", "64"))
        o = int(q.get("output_tokens", "64"))
        conc = [int(x) for x in q.get("concurrency", "1,2,4,8").split(",") if x.strip()]
        if not conc or len(conc) > 64 or any(c <= 0 or c > 4096 for c in conc):
            raise ValueError("concurrency must be a comma list of 1..64 positive integers <= 4096")
        points = capacity_curve(self.profile, p, o, conc)
        return {"prompt_tokens": p, "output_tokens": o, "points": [pt.to_json() for pt in points]}

    async def capacity(self, request: web.Request) -> web.Response:
        try:
            return json_response(self._capacity(request.query))
        except (ValueError, CapacityError) as exc:
            return error_response(400, str(exc), "invalid_request_error")

    async def gpu(self, request: web.Request) -> web.Response:
        return json_response(gpu_view(self.runtime.engine, time.time(), self.runtime.clock()))

    async def get_faults(self, request: web.Request) -> web.Response:
        now = self.runtime.seconds_since_start()
        return json_response({"now_s": round(now, 6), "faults": self.faults.to_json()})

    async def post_faults(self, request: web.Request) -> web.Response:
        body = await json_body(request)
        try:
            faults, append = faults_from_json(body, self.runtime.seconds_since_start())
        except (ValueError, ProfileError) as exc:
            return error_response(400, str(exc), "invalid_request_error")
        self.faults.set(faults, append=append)
        return await self.get_faults(request)
