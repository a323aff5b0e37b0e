"""Fault injection: time windows in which the simulator misbehaves on purpose.

A fault is a ``FaultSpec`` (kind, window in server seconds since start, rate, parameters). Faults come from
the profile's ``[[faults]]`` tables and from ``POST /sim/faults`` at run time. The schedule is pure: the
server asks ``hit(kind, t)`` at the point where a fault could apply, and a seeded generator decides, for
``rate < 1``, whether this request is hit. Kinds and where they act:

- ``http_5xx``: a generation request is answered ``status`` (default 500) before it reaches the engine;
- ``drop_stream``: the connection is closed after ``after_tokens`` tokens, without a final event;
- ``stall``: the stream pauses ``delay_s`` seconds after ``after_tokens`` tokens (for client timeouts);
- ``malformed_sse``: a broken ``data:`` line is sent after ``after_tokens`` tokens;
- ``slow_metrics``: ``/metrics`` answers after ``delay_s`` seconds;
- ``slots_disabled``: ``/slots`` answers 501 as llama-server started with ``--no-slots``;
- ``metrics_disabled``: ``/metrics`` answers 501 as llama-server started without ``--metrics``;
- ``engine_pause``: the whole engine stops for ``delay_s`` (no step runs: every slot and the queue wait), from
  the window's start and again every ``every_s`` seconds (a host that stalls: a GC pause, a swap storm, a
  co-tenant), for the load generator's coordinated-omission check;
- ``slowdown``: every engine step takes ``factor`` times as long, reached ``ramp_s`` after the window's start
  (linearly from 1; 0: at once), until the window ends: a co-tenant arriving, thermal limits, a server that
  slows with uptime, for the drift check (``core.drift``). Several active slowdowns multiply.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Iterable, Mapping
from typing import Any

from satbench.simulator.profile import FaultSpec, fault_from_mapping

__all__ = ["FaultSchedule", "faults_from_json"]


class FaultSchedule:
    def __init__(self, faults: Iterable[FaultSpec] = (), seed: int = 0) -> None:
        self._faults: list[FaultSpec] = list(faults)
        self._rng = random.Random(seed ^ 0x5EED)

    @property
    def faults(self) -> tuple[FaultSpec, ...]:
        return tuple(self._faults)

    def set(self, faults: Iterable[FaultSpec], append: bool = False) -> None:
        self._faults = [*self._faults, *faults] if append else list(faults)

    def active(self, kind: str, t_s: float) -> FaultSpec | None:
        for f in self._faults:
            if f.kind == kind and f.active(t_s):
                return f
        return None

    def hit(self, kind: str, t_s: float) -> FaultSpec | None:
        f = self.active(kind, t_s)
        if f is None or (f.rate < 1.0 and self._rng.random() >= f.rate):
            return None
        return f

    def pause_left(self, t_s: float) -> float:
        """How long the engine must still pause at server time ``t_s`` (``engine_pause`` faults)."""
        return max((f.pause_left(t_s) for f in self._faults if f.kind == "engine_pause"), default=0.0)

    def step_scale(self, t_s: float) -> float:
        """What an engine step is multiplied by at server time ``t_s`` (``slowdown`` faults; 1 without any)."""
        return math.prod(f.step_scale(t_s) for f in self._faults if f.kind == "slowdown")

    def to_json(self) -> list[dict[str, Any]]:
        out = []
        for f in self._faults:
            d = dataclasses.asdict(f)
            if math.isinf(f.duration_s):
                d["duration_s"] = None
            out.append(d)
        return out


def faults_from_json(body: Any, now_s: float) -> tuple[list[FaultSpec], bool]:
    """Parses a ``POST /sim/faults`` body; ``start_s`` there is relative to now. Returns (faults, append)."""
    if not isinstance(body, Mapping) or not isinstance(body.get("faults"), list):
        raise ValueError('body must be {"faults": [...], "append": false}')
    out = []
    for raw in body["faults"]:
        if not isinstance(raw, Mapping):
            raise ValueError("each fault must be an object")
        item = dict(raw)
        if item.get("duration_s") is None:
            item.pop("duration_s", None)
        item["start_s"] = now_s + float(item.get("start_s", 0.0))
        out.append(fault_from_mapping(item))
    return out, bool(body.get("append", False))
