"""Which lanes this ``satbench run`` walks: the whole config, a shard's share of it, the stale ones, or both.

The session's config names the whole fleet; ``plan_walk`` narrows it before anything starts. The shard's
share comes first (``satbench.fleet.shards``: computed over the whole fleet, so every shard agrees on it
whatever it then skips), then ``--remeasure`` keeps of that share the lanes the served document calls stale
or unknown (``satbench.fleet.remeasure``). What remains is the config the session runs, with the fleet's
stamp and the run id beside it for the manifest; an empty walk is a plan too (a shard with no node, or
nothing stale), which the command line reports and leaves without starting anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from satbench.core.shards import ShardStamp
from satbench.fleet.remeasure import lanes_to_remeasure
from satbench.fleet.shards import ShardSpec, fleet_digest, shared_run_id, stamp_for
from satbench.session.config import SessionConfig

__all__ = ["WalkPlan", "plan_walk"]


@dataclass(frozen=True, slots=True)
class WalkPlan:
    """The session to run: ``config`` with the lanes to walk only, and what its manifest says of the choice."""

    config: SessionConfig
    run_id: str | None
    stamp: ShardStamp | None
    remeasure: dict[str, Any] | None  # {"url", "lanes": {key: why}, "kept": n valid answers left as they are}
    lines: tuple[str, ...]

    @property
    def empty(self) -> bool:
        return not self.config.lanes


def plan_walk(config: SessionConfig, *, shard: ShardSpec | None = None, run_id: str | None = None,
              started_at: str | None = None, remeasure_url: str | None = None,
              document: Mapping[str, Any] | None = None) -> WalkPlan:
    """The walk (module docstring); ``ValueError`` in one line naming the flag for a shard without a shared run
    id, or a run id the manifest cannot hold."""
    lanes = list(config.lanes)
    shared = shared_run_id(given=run_id, started_at=started_at, digest=fleet_digest(lanes))
    lines: list[str] = []
    stamp = None
    if shard is not None:
        if shared is None:
            raise ValueError(f"--shard {shard}: shards must share one run id, so their answers file into one fleet "
                             "run: give --run-id ID (or SATBENCH_RUN_ID) or --run-started-at TIME")
        stamp = stamp_for(lanes, shard)
        share = set(stamp.share())
        nodes = sorted({lane.node_name for lane in lanes if lane.key in share})
        lines.append(f"shard {stamp.name} of run {shared}: {len(nodes)} of "
                     f"{len({lane.node_name for lane in lanes})} nodes, {len(share)} of {len(lanes)} lanes"
                     + (f" ({', '.join(nodes)})" if nodes else ""))
        lanes = [lane for lane in lanes if lane.key in share]
    remeasure = None
    if document is not None:
        chosen = lanes_to_remeasure(document, [lane.key for lane in lanes])
        remeasure = {"url": remeasure_url, "lanes": chosen, "kept": len(lanes) - len(chosen)}
        lines.append(f"re-measuring {len(chosen)} of {len(lanes)} lanes (the others' answers are valid)"
                     + "".join(f"\n  {key}: {why}" for key, why in chosen.items()))
        lanes = [lane for lane in lanes if lane.key in chosen]
    return WalkPlan(config.model_copy(update={"lanes": lanes}), shared, stamp, remeasure, tuple(lines))
