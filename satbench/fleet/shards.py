"""The shard arithmetic: which nodes of a fleet each shard walks, and the run id every shard shares.

**Shares.** A shard walks whole nodes: a node's lanes share its hardware and are measured one after another,
so splitting a node would let two shards load it at once and void both answers, and a lane is never split
(each figure stays a single walk's). The assignment is longest-processing-time-first over the nodes' lane
counts (Graham 1969): nodes sorted by lane count, most first, then by name, each given to the shard with the
fewest lanes so far (the lowest index on a tie). It is deterministic (a function of the node names and their
lane counts only: every pod of an Indexed Job computes the same shares without talking to the others, and the
order of the config does not matter) and balanced: the shards' lane counts differ by at most the largest
node's, and on a fleet of equal nodes their node counts by at most one. A shard may be empty when there are
more shards than nodes; it then has nothing to walk and says so.

**Where the shard comes from.** ``--shard INDEX/COUNT`` (0-based, as Kubernetes counts), else a Kubernetes
Indexed Job's ``JOB_COMPLETION_INDEX`` with the count in ``SATBENCH_SHARD_COUNT`` (the Job's
``completions``: Kubernetes hands a pod its index, not the count; ``deploy/kubernetes`` sets both from one
place). An index outside the count is refused in one line.

**The run id.** Shards file into one fleet run only if they share its id: given (``--run-id``, or
``SATBENCH_RUN_ID``, which the Job's pods take from their ``batch.kubernetes.io/job-name`` label), or derived
from a start time they are all handed (``--run-started-at``): ``<UTC stamp>-<first 4 hex of the fleet
digest>``, the shape of ``core.manifest.new_run_id`` with the random part made the fleet's, so every shard
handed the same time and fleet derives the same id. A shard without either is refused: two shards that each
made up an id would file two half fleets.

**The fleet digest** (``fleet_digest``) is the sha256 of every lane's key, runtime, URL and exporter URL,
sorted: shards handed different fleets (a ConfigMap changed while the Job started) are told apart by it at
the recommender, which refuses the second one's answers (``recommender.fleet_runs``).
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from satbench.core.manifest import RUN_ID_PATTERN
from satbench.core.shards import MAX_SHARDS, ShardStamp

__all__ = [
    "COUNT_ENV",
    "INDEX_ENV",
    "RUN_ID_ENV",
    "ShardSpec",
    "assign_nodes",
    "fleet_digest",
    "parse_shard",
    "shard_from_env",
    "shared_run_id",
    "stamp_for",
]

INDEX_ENV = "JOB_COMPLETION_INDEX"  # set by Kubernetes in every pod of an Indexed Job
COUNT_ENV = "SATBENCH_SHARD_COUNT"  # the Job's completions, set beside it in the pod template
RUN_ID_ENV = "SATBENCH_RUN_ID"


class _FleetLane(Protocol):
    @property
    def key(self) -> str: ...
    @property
    def node_name(self) -> str: ...
    @property
    def runtime(self) -> str: ...
    @property
    def url(self) -> object: ...
    @property
    def exporter_url(self) -> object: ...


@dataclass(frozen=True, slots=True)
class ShardSpec:
    """Shard ``index`` of ``count`` (0-based)."""

    index: int
    count: int

    def __post_init__(self) -> None:
        if not 1 <= self.count <= MAX_SHARDS:
            raise ValueError(f"shard count {self.count}: at least 1 and at most {MAX_SHARDS}")
        if not 0 <= self.index < self.count:
            raise ValueError(f"shard index {self.index} is outside the count {self.count}: indices are 0-based, "
                             f"0..{self.count - 1}")

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str, *, what: str = "--shard") -> ShardSpec:
    """``INDEX/COUNT`` -> ``ShardSpec``; ``ValueError`` naming ``what`` otherwise."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if match is None:
        raise ValueError(f"{what} {text!r}: give INDEX/COUNT, e.g. 0/3 (0-based)")
    try:
        return ShardSpec(int(match[1]), int(match[2]))
    except ValueError as exc:
        raise ValueError(f"{what} {text}: {exc}") from None


def shard_from_env(environ: Mapping[str, str]) -> ShardSpec | None:
    """The shard of an Indexed Job's pod (``JOB_COMPLETION_INDEX`` and ``SATBENCH_SHARD_COUNT``), None where
    neither is set; ``ValueError`` naming the variable when one is missing or bad."""
    index, count = environ.get(INDEX_ENV), environ.get(COUNT_ENV)
    if index is None and count is None:
        return None
    if index is None or count is None:
        missing = INDEX_ENV if index is None else COUNT_ENV
        raise ValueError(f"{missing} is not set, but {COUNT_ENV if index is None else INDEX_ENV} is: a shard "
                         f"needs its index and the count (the Job's completions)")
    return parse_shard(f"{index}/{count}", what=f"{INDEX_ENV}/{COUNT_ENV}")


def assign_nodes(lanes_per_node: Mapping[str, int], count: int) -> dict[str, int]:
    """Node -> shard index (module docstring: largest node first, to the least loaded shard)."""
    load = [0] * count
    out: dict[str, int] = {}
    for node in sorted(lanes_per_node, key=lambda n: (-lanes_per_node[n], n)):
        shard = min(range(count), key=lambda i: (load[i], i))
        out[node] = shard
        load[shard] += lanes_per_node[node]
    return out


def fleet_digest(lanes: Iterable[_FleetLane]) -> str:
    """The fleet as the shards were handed it (module docstring)."""
    rows = sorted([lane.key, lane.runtime, str(lane.url or ""), str(lane.exporter_url or "")] for lane in lanes)
    return "sha256:" + hashlib.sha256(json.dumps(rows, separators=(",", ":")).encode()).hexdigest()


def stamp_for(lanes: Sequence[_FleetLane], spec: ShardSpec) -> ShardStamp:
    """The stamp of shard ``spec`` over the fleet ``lanes``: the owner of every lane, by its node's shard."""
    per_node: dict[str, int] = {}
    for lane in lanes:
        per_node[lane.node_name] = per_node.get(lane.node_name, 0) + 1
    nodes = assign_nodes(per_node, spec.count)
    return ShardStamp(index=spec.index, count=spec.count, fleet=fleet_digest(lanes),
                      owners={lane.key: nodes[lane.node_name] for lane in lanes})


def _started_at(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise ValueError(f"--run-started-at {text!r}: give Unix seconds or an ISO 8601 time "
                         "(2026-12-01T16:13:16Z)") from None


def shared_run_id(*, given: str | None, started_at: str | None, digest: str) -> str | None:
    """The run id every shard shares (module docstring); None when neither is given. ``ValueError`` names the
    flag for an id the manifest cannot hold, or both given."""
    if given and started_at:
        raise ValueError("--run-id and --run-started-at: give one (the id, or the time it is derived from)")
    if given:
        if not re.fullmatch(RUN_ID_PATTERN, given):
            raise ValueError(f"--run-id {given!r}: letters, digits, '.', '_' and '-', at most 128, starting with a "
                             "letter or digit")
        return given
    if started_at:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(_started_at(started_at)))
        return f"{stamp}-{digest.removeprefix('sha256:')[:4]}"
    return None
