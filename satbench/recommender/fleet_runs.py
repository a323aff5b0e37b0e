"""A fleet run walked by shards: one run id, a manifest per shard, one set of answers, and what is missing.

Each shard of a fleet run (``core.shards``) registers its own manifest, under its own key
(``<run_id>.shard-I-of-N``), and is analysed on its own: the analysis is per lane (each lane's figures come
from its own windows and series), so the shards' answers put side by side are the answers one process
walking the whole fleet would get from the same windows. What this module adds is the fleet run itself:

- ``check_join``: a shard is refused (``BadInput``, one line naming it) where it cannot belong to the run it
  names: another fleet than the shards already there (their digests differ: a ConfigMap changed while the
  Job started), another shard count, a run of one process under the same id, or, under another run id, the
  same fleet and count walked at the same time as shards already registered (the shards disagree on the run
  id, so each would file half a fleet);
- ``fleet_runs``: per fleet, its newest run (by when its shards measured, ``core.manifest.measured_until``),
  which shards reported and which did not, with the lanes each missing one owns (a shard killed mid-run never
  posts: its lanes are named, the others served). A shard whose manifest says it did not finish (a killed
  shard's folder, found by a recommender restarted on the fleet's shared folder; a shard cut short by a full
  disk) has not reported either: it stays missing, with why (``partial``), after any restart;
- ``missing_answers``: for a missing shard's lane that no run answers, an answer that says so
  (``recommended_concurrency`` null, ``status`` ``insufficient_data``, the reason naming the shard), so a
  consumer reads "not measured: shard 1/3 of run X has not reported" instead of finding no key at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from satbench.answer.analysis import analyze_lane
from satbench.answer.document import lane_fragment, unchecked
from satbench.answer.models import LaneModel, ShardsModel
from satbench.answer.policy import Policy
from satbench.core.manifest import RunManifest
from satbench.core.shards import ShardStamp, shard_of
from satbench.recommender.errors import BadInput

__all__ = ["FleetRun", "ShardEntry", "check_join", "fleet_runs", "missing_answers", "stamp_of"]


@dataclass(frozen=True, slots=True)
class ShardEntry:
    """One registered shard: its manifest, its stamp, its rank in the store (newest last), and its analysis'
    outcome (``answered`` false with ``reason`` where it failed or is pending); ``partial`` says why it did not
    finish (``RunManifest.partial``)."""

    manifest: RunManifest
    stamp: ShardStamp
    rank: tuple[float, int]
    answered: bool = True
    reason: str | None = None
    partial: str | None = None


@dataclass(frozen=True, slots=True)
class FleetRun:
    run_id: str
    stamp: ShardStamp  # any reported shard's: the fleet and its owners are the same in all (check_join)
    reported: tuple[int, ...]
    failed: dict[int, str]  # shards that reported and whose analysis failed or is pending -> why
    missing: tuple[int, ...]
    partial: dict[int, str] = field(default_factory=dict)  # missing shards whose folder says they did not finish

    def summary(self) -> ShardsModel:
        """The document's ``shards.<run_id>``."""
        return ShardsModel(count=self.stamp.count, fleet=self.stamp.fleet, reported=list(self.reported),
                           missing={str(i): self.stamp.share(i) for i in self.missing},
                           failed={str(i): why for i, why in self.failed.items()},
                           partial={str(i): why for i, why in self.partial.items()})

    def _missing_why(self, i: int) -> str:
        said = f"shard {i}/{self.stamp.count} of run {self.run_id} has not reported"
        return said if i not in self.partial else f"{said}: {self.partial[i]}"

    def unanswered(self) -> dict[str, str]:
        """Lane key -> why no answer of this run covers it."""
        out: dict[str, str] = {}
        for i in self.missing:
            for key in self.stamp.share(i):
                out[key] = self._missing_why(i)
        for i, why in self.failed.items():
            for key in self.stamp.share(i):
                out[key] = f"shard {i}/{self.stamp.count} of run {self.run_id} reported, but {why}"
        return out

    def note(self) -> str | None:
        said = [f"shard {i}/{self.stamp.count} has not reported ({', '.join(self.stamp.share(i)) or 'no lane'})"
                + (f": {self.partial[i]}" if i in self.partial else "") for i in self.missing]
        said += [f"shard {i}/{self.stamp.count}: {why}" for i, why in self.failed.items()]
        return f"fleet run {self.run_id}: " + "; ".join(said) if said else None


def stamp_of(manifest: RunManifest) -> ShardStamp | None:
    """The manifest's shard stamp; ``BadInput`` naming it when malformed."""
    try:
        return shard_of(manifest.model_extra)
    except ValueError as exc:
        first = str(exc).splitlines()
        raise BadInput(f"run {manifest.run_id}: its shard stamp is malformed: {first[-1].strip() if first else exc}"
                       ) from None


def _span(manifest: RunManifest) -> tuple[float, float] | None:
    windows = manifest.steps
    if not windows:
        return None
    return (min(w.warmup_start if w.warmup_start is not None else w.start for w in windows),
            max(w.drain_end if w.drain_end is not None else w.end for w in windows))


def check_join(manifest: RunManifest, stamp: ShardStamp | None, registered: Iterable[RunManifest]) -> None:
    """Refuses a run that cannot join what is registered (module docstring); ``registered`` holds every other
    registered manifest (the shard's own earlier post, if any, left out)."""
    others = list(registered)
    same_id = [m for m in others if m.run_id == manifest.run_id]
    if stamp is None:
        if any(stamp_of(m) is not None for m in same_id):
            raise BadInput(f"run {manifest.run_id} is a fleet run of shards: a run of one process cannot take its id")
        return
    for other in same_id:
        theirs = stamp_of(other)
        if theirs is None:
            raise BadInput(f"shard {stamp.name} names run {manifest.run_id}, which is a run of one process")
        if theirs.fleet != stamp.fleet:
            raise BadInput(f"shard {stamp.name} of run {manifest.run_id} was handed another fleet ({stamp.fleet[:19]}) "
                           f"than shard {theirs.name} ({theirs.fleet[:19]}): the shards of a run walk one fleet")
        if theirs.count != stamp.count:
            raise BadInput(f"shard {stamp.name} of run {manifest.run_id} counts {stamp.count} shards, shard "
                           f"{theirs.name} {theirs.count}: the shards of a run agree on their count")
    mine = _span(manifest)
    clash: dict[str, list[str]] = {}
    for other in others:
        theirs = stamp_of(other)
        if other.run_id == manifest.run_id or theirs is None or theirs.fleet != stamp.fleet:
            continue
        span = _span(other)
        if theirs.count == stamp.count and mine and span and mine[0] <= span[1] and span[0] <= mine[1]:
            clash.setdefault(other.run_id, []).append(theirs.name)
    if clash:
        run_id, names = sorted(clash.items())[0]
        raise BadInput(f"shard {stamp.name} names run {manifest.run_id}, but shard {', '.join(sorted(names))} of the "
                       f"same fleet, walking at the same time, names run {run_id}: the shards of a run share one "
                       f"run id (--run-id, SATBENCH_RUN_ID or --run-started-at)")


def fleet_runs(entries: Sequence[ShardEntry]) -> list[FleetRun]:
    """Per fleet (digest), its newest run (by its newest shard's rank) with what reported and what did not."""
    by_run: dict[str, list[ShardEntry]] = {}
    for entry in entries:
        by_run.setdefault(entry.manifest.run_id, []).append(entry)
    newest: dict[str, tuple[tuple[float, int], str]] = {}
    for run_id, shards in by_run.items():
        rank = max(e.rank for e in shards)
        fleet = shards[0].stamp.fleet
        if fleet not in newest or newest[fleet][0] < rank:
            newest[fleet] = (rank, run_id)
    out = []
    for _, run_id in sorted(newest.values()):
        shards = by_run[run_id]
        stamp = shards[0].stamp
        finished = [e for e in shards if e.partial is None]
        partial = {e.stamp.index: e.partial for e in shards if e.partial is not None}
        reported = sorted({e.stamp.index for e in finished})
        failed = {e.stamp.index: e.reason or "its analysis is pending" for e in finished if not e.answered}
        missing = tuple(i for i in range(stamp.count) if i not in reported)
        out.append(FleetRun(run_id, stamp, tuple(reported), failed, missing,
                            {i: why for i, why in sorted(partial.items()) if i in missing}))
    return out


def missing_answers(runs: Iterable[FleetRun], answered: Mapping[str, Any], policy: Policy
                    ) -> dict[str, LaneModel]:
    """An answer saying so for each lane of a missing (or failed) shard that ``answered`` has no answer for."""
    out: dict[str, LaneModel] = {}
    for run in runs:
        for key, why in run.unanswered().items():
            if key in answered or key in out:
                continue
            lane = lane_fragment(analyze_lane(key, [], policy), run_id=run.run_id, measured_at=None,
                                 where={"validity": unchecked(f"never measured: {why}")})
            out[key] = lane.model_copy(update={"status": "insufficient_data", "reason": f"not measured: {why}"})
    return out
