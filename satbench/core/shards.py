"""A fleet walked by shards: the stamp each shard's manifest carries, so its answers file into one fleet run.

One process walking hundreds of nodes in turn takes hours, and a load generator far from its nodes adds its
round trip to every TTFT; so a fleet is walked by shards (``satbench run --shard INDEX/COUNT``, one pod of a
Kubernetes Indexed Job each), every shard a share of the fleet's nodes (``satbench.fleet.shards``: whole nodes,
so a lane is never split and a node is never loaded by two shards at once). The shards share one run id, and
each one's manifest carries a ``ShardStamp`` under the manifest's ``shard`` key: which shard it is, of how
many, the digest of the fleet it was given and which shard owns every lane of that fleet. That is all the
recommender needs to put the shards' answers together and to say which shard, and which of its lanes, has
not reported (``recommender.fleet_runs``), without knowing how the shares were computed.

Each shard's run folder, and its entry in the recommender, is named ``shard_key``:
``<run_id>.shard-<index>-of-<count>``, so shards that share a folder (a volume) or a service never overwrite
one another; the fleet run is the run id alone. Indices are 0-based, as Kubernetes' ``JOB_COMPLETION_INDEX``.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["MAX_SHARDS", "SHARD_KEY", "ShardStamp", "shard_key", "shard_of"]

MAX_SHARDS = 10_000
SHARD_KEY = re.compile(r"^(?P<run_id>.+)\.shard-(?P<index>\d+)-of-(?P<count>\d+)$")


class ShardStamp(BaseModel):
    """One shard of a fleet run (module docstring): ``owners`` maps every lane key of the fleet to its shard."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    index: int = Field(ge=0)
    count: int = Field(ge=1, le=MAX_SHARDS)
    fleet: str = Field(min_length=1, max_length=200)  # the fleet's digest: shards given other fleets disagree
    owners: dict[str, int] = Field(min_length=1)

    @model_validator(mode="after")
    def _check(self) -> ShardStamp:
        if self.index >= self.count:
            raise ValueError(f"shard index {self.index} is outside the count {self.count} (0..{self.count - 1})")
        bad = sorted(k for k, i in self.owners.items() if not 0 <= i < self.count)
        if bad:
            raise ValueError(f"lanes {', '.join(bad[:5])} are owned by a shard outside 0..{self.count - 1}")
        return self

    @property
    def name(self) -> str:
        """``1/3``: how a shard is said to a person (0-based, as its ``--shard``)."""
        return f"{self.index}/{self.count}"

    def share(self, index: int | None = None) -> list[str]:
        """The lane keys shard ``index`` (this one by default) owns, sorted."""
        wanted = self.index if index is None else index
        return sorted(k for k, i in self.owners.items() if i == wanted)


def shard_key(run_id: str, stamp: ShardStamp) -> str:
    """The name of a shard's run folder and of its entry in the recommender (module docstring)."""
    return f"{run_id}.shard-{stamp.index}-of-{stamp.count}"


def shard_of(extra: dict[str, Any] | None) -> ShardStamp | None:
    """The stamp in a manifest's extra keys (``RunManifest.model_extra``), None for a run of one process;
    ``ValueError`` (pydantic's) when it is there and malformed."""
    raw = (extra or {}).get("shard")
    return None if raw is None else ShardStamp.model_validate(raw)
