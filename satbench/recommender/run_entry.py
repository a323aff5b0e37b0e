"""A run as the service holds it (``recommender.store``): its key, its analysis and how its answers rank.

A run's key is its id, a shard's ``core.shards.shard_key`` (also its folder's name). Its answers rank, lane by
lane, complete before partial, then by when they were measured (their windows' end, clamped to when the service
registered the run: a body cannot claim the future), then by when they were registered; never by when they were
posted (``served_answers``). Analyses run in an event loop of their own, in a worker thread or process
(``analyze_all``), never on the service's loop.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from satbench.answer.document import read_document
from satbench.answer.models import LaneModel, RecommendationsDocument
from satbench.core.manifest import RunManifest
from satbench.core.shards import shard_key
from satbench.recommender.errors import RecommenderError
from satbench.recommender.fleet_runs import ShardEntry, stamp_of

__all__ = ["PARTIAL_NOTES", "Analyzer", "ManifestWriter", "RunEntry", "analyze_all", "entry_key", "partial_notes",
           "served_answers", "shard_entries", "write_manifest"]

PARTIAL_NOTES = 20  # partial runs named one by one in the document's notes (GET /runs lists every one)


class Analyzer(Protocol):
    async def __call__(self, manifest: RunManifest, run_dir: Path | None) -> dict[str, Any]: ...


ManifestWriter = Callable[[RunManifest, Path], None]


def write_manifest(manifest: RunManifest, path: Path) -> None:
    manifest.write(path)


def analyze_all(analyzer: Analyzer, jobs: list[tuple[RunManifest, Path | None]], portable: bool = False) -> list[Any]:
    """Each job's analysis (a document, or the exception it raised), in an event loop of this thread's own: run
    in a worker thread or process (``RecommendationStore(executor=)``), never on the service's loop. ``portable``
    (a worker process): an exception that is not the recommender's own travels back as its text."""
    async def analyses() -> list[Any]:
        return await asyncio.gather(*(analyzer(m, d) for m, d in jobs), return_exceptions=True)

    results = asyncio.run(analyses())
    if portable:
        results = [RuntimeError(repr(r)) if isinstance(r, BaseException) and not isinstance(r, RecommenderError)
                   else r for r in results]
    return results


_ORDER = itertools.count()


def entry_key(manifest: RunManifest) -> str:
    """The run's key in the store and its folder's name: the run id, a shard's ``core.shards.shard_key``."""
    stamp = stamp_of(manifest)
    return manifest.run_id if stamp is None else shard_key(manifest.run_id, stamp)


@dataclass(slots=True)
class RunEntry:
    manifest: RunManifest
    registered_at: float
    document: dict[str, Any] | None = None
    reason: str | None = None
    order: int = 0
    failed_at: float | None = None
    _read: tuple[dict[str, Any], RecommendationsDocument] | None = None
    _until: dict[str | None, float] = field(default_factory=dict, init=False)  # measured_at per lane (None: run)
    lanes: tuple[str, ...] = field(default=(), init=False)  # the manifest's lane_names(), read once

    def __post_init__(self) -> None:
        self.order = next(_ORDER)
        self.lanes = tuple(self.manifest.lane_names())
        ends: dict[str | None, float] = {}
        for w in self.manifest.steps:  # one pass: a fleet run's ranks are read per lane at every rebuild
            end = w.drain_end if w.drain_end is not None else w.end
            ends[w.lane] = max(ends.get(w.lane, end), end)
        ends[None] = max(ends.values(), default=self.manifest.measured_until())
        self._until = {lane: min(end, self.registered_at) for lane, end in ends.items()}

    @property
    def partial(self) -> str | None:
        """Why the run is not complete (``RunManifest.partial``), or None."""
        return self.manifest.partial

    def measured_at(self, lane: str | None = None) -> float:
        """When ``lane`` (the run) was measured (``RunManifest.measured_until``), clamped to when the service
        registered it (module docstring)."""
        found = self._until.get(lane)
        return found if found is not None else self._until[None]

    def lane_rank(self, lane: str) -> tuple[bool, float, int]:
        """How its answer for ``lane`` ranks, highest served: complete first, then measured later, then posted
        later."""
        return (self.partial is None, self.measured_at(lane), self.order)

    def read(self) -> RecommendationsDocument | None:
        """``document`` as the model (``read_document``), validated once per document the entry holds: the
        merge reads its node labels, policy and notes here, and keeps its answers' JSON as built."""
        if self.document is None:
            return None
        if self._read is None or self._read[0] is not self.document:
            self._read = (self.document, read_document(self.document))
        return self._read[1]

    @property
    def sort_key(self) -> tuple[float, int]:
        """The run's place among runs, newest last: when it was measured, then registered."""
        return (self.measured_at(), self.order)


def served_answers(entries: list[RunEntry]) -> dict[str, tuple[RunEntry, LaneModel]]:
    """Per lane key, the answer served and the run it comes from: among ``entries``' documents, the one
    that ranks highest; a partial run's marked so."""
    chosen: dict[str, tuple[tuple[bool, float, int], RunEntry, LaneModel]] = {}
    for entry in entries:
        model = entry.read()
        assert model is not None
        for key, answer in model.lanes.items():
            rank = entry.lane_rank(key)
            if key not in chosen or chosen[key][0] < rank:
                chosen[key] = (rank, entry, answer)
    out = {}
    for key, (_, entry, answer) in chosen.items():
        why = entry.partial
        marked = answer if why is None else answer.model_copy(
            update={"partial": f"run {entry_key(entry.manifest)}: {why}"})
        out[key] = (entry, marked)
    return out


def shard_entries(entries: list[RunEntry]) -> list[ShardEntry]:
    out = []
    for e in entries:
        stamp = stamp_of(e.manifest)
        if stamp is not None:
            out.append(ShardEntry(e.manifest, stamp, e.sort_key, e.document is not None, e.reason, e.partial))
    return out


def partial_notes(entries: Iterable[RunEntry], served: Mapping[str, tuple[RunEntry, LaneModel]]) -> list[str]:
    """A note per partial run of ``entries``: why, and which of its answers ``served`` holds (the newest
    ``PARTIAL_NOTES`` named one by one, the count of the rest; ``GET /runs`` lists every one)."""
    partial = sorted((e for e in entries if e.partial is not None), key=lambda e: e.sort_key)
    notes = []
    for entry in partial[-PARTIAL_NOTES:]:
        mine = sorted(k for k, (e, _) in served.items() if e is entry)
        said = (f"its answers for {', '.join(mine)} are served marked partial (no complete run answers them)"
                if mine else "none of its answers is served")
        notes.append(f"run {entry_key(entry.manifest)} is partial ({entry.partial}): {said}")
    if len(partial) > PARTIAL_NOTES:
        notes.insert(0, f"{len(partial) - PARTIAL_NOTES} more partial runs registered (GET /runs lists them)")
    return notes
