"""The service's memory: registered runs, their analyses, and the document served right now.

Analysis is expensive (hundreds of PromQL queries, then seconds of pure Python for a fleet); serving is not
allowed to be (p99 < 5 ms). So the store analyses a run when it is registered and again on each refresh tick,
never on the service's event loop (``analyze_all``: in a loop of its own, in a worker thread, or in a worker
process where the entry point gives one, as ``satbench recommender`` does: a thread still shares the GIL, and
beside a 60-lane analysis each GIL hand-over of the serving loop can wait the 5 ms switch interval). It keeps
the current document as a dict, rendered once per change in every served form (``recommender.rendition``, in
a worker thread), so ``GET /recommendations`` is a memory copy, stale or fresh. Only the service's loop
changes the store; the workers get immutable inputs and hand back new objects.

The current document merges, lane by lane, the newest analysed run that measured the lane (a run of
``moe`` alone does not hide yesterday's ``dense`` answer); each lane names its own ``run_id``. "Newest" is
when the lane was measured, never when the run was posted or found (``recommender.run_entry`` says how a run
ranks): an old manifest posted again does not replace a newer answer.

Only a complete run is an answer (``RunManifest.partial``: a run killed mid-walk, ``finished_at`` null, or one
cut short by a full disk). A partial run never outranks a complete one, whenever either was measured: its
answer for a lane is served only where no complete run answers it, marked ``partial`` with why, and the
document's notes name every partial run and what of it is served (``runs()``, ``GET /runs``, list them).

A run whose analysis failed keeps its reason, and ``GET /runs/{id}`` answers it from the store until
``retry_after_s`` has passed (the refresh tick retries the current runs anyway): a failed run cannot make
every read cost an analysis. A read of a run id the store does not know looks for its folder under
``runs_dir`` (the operator's own folder, written by sessions and load generators), so a run written there
after the service started is served without a write.

The shards of a fleet run (``core.shards``) share a run id and register one by one, each under its own key
(``<run_id>.shard-I-of-N``, also its folder's name), and are analysed each on its own; their answers merge as
any runs' do. ``recommender.fleet_runs`` checks that a shard can join the run it names, and the document
says per fleet which shard of its newest run has not reported (``shards``, a note, and an answer saying so
for each of its lanes that nothing else answers). ``GET /runs/{run_id}`` of a fleet run is its shards
together (``fleet_run``).

A failed source (``SourceUnavailable``) leaves the last good document served ``stale`` with its age; with none
yet, ``NothingToServe`` (a 503 at the edge).

Validity (``recommender.validity``) is checked on its own faster tick and laid over the merged answers
(``set_validity``): an answer whose node changed is served ``stale`` with what changed, until it is back."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import glob
import math
import re
import shutil
import time
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from pathlib import Path
from typing import Any

from satbench.answer.document import mark_changed, mark_stale, wire
from satbench.answer.models import LaneModel, RecommendationsDocument, ValidityModel
from satbench.core.manifest import RUN_ID_PATTERN, RunManifest, read_manifest
from satbench.recommender.errors import (
    BadInput,
    NothingToServe,
    RunsFolderFull,
    RunsFolderUnwritable,
    SourceUnavailable,
    UnknownLane,
    UnknownRun,
)
from satbench.recommender.fleet_runs import FleetRun, check_join, fleet_runs, stamp_of
from satbench.recommender.merge import merged_document
from satbench.recommender.rendition import Rendition, Served, render
from satbench.recommender.run_entry import (
    Analyzer,
    ManifestWriter,
    RunEntry,
    analyze_all,
    entry_key,
    partial_notes,
    served_answers,
    shard_entries,
    write_manifest,
)

__all__ = ["RecommendationStore"]


_SAME = object()  # _publish: keep what the last publish left


class RecommendationStore:
    def __init__(self, analyzer: Analyzer, *, runs_dir: Path | None = None,
                 clock: Callable[[], float] = time.time, retry_after_s: float = 60.0,
                 write_manifest: ManifestWriter = write_manifest, executor: Executor | None = None) -> None:
        self._analyzer = analyzer
        self._executor = executor  # where analyses run (analyze_all): None, a worker thread
        self._write_manifest = write_manifest
        self.retry_after_s = retry_after_s
        self._runs_dir = runs_dir
        self._clock = clock
        self._runs: dict[str, RunEntry] = {}
        self._dirs: dict[str, Path] = {}  # run folders registered one by one (add_run_dir)
        self._current: RecommendationsDocument | None = None
        self._rendered: Rendition | None = None  # every served form of _current (None with it)
        self._served: Served | None = None  # the rendition at the age served last
        self._ahead: Served | None = None  # a stale rendition at the next second's age, made ahead (prepare_ages)
        self.builds: Counter[str] = Counter()  # "render": whole documents serialised; "age": stale ages filled
        self._good_at: float | None = None
        self._stale_reason: str | None = None
        self._merged: RecommendationsDocument | None = None  # the newest answers merged, before validity
        self._serving: dict[str, str] = {}  # lane key -> the key of the run its served answer comes from
        self._validity: dict[str, ValidityModel] = {}
        self.validity_checked_at: float | None = None  # the latest validity tick (set_validity)
        self._lock = asyncio.Lock()
        self._publish_lock = asyncio.Lock()  # one publish at a time: each renders from the last one's state

    # -- runs --------------------------------------------------------------------------------------
    def run_dir(self, run_id: str) -> Path | None:
        if run_id in self._dirs:
            return self._dirs[run_id]
        if self._runs_dir is None:
            return None
        path = self._runs_dir / run_id
        return path if path.is_dir() else None

    def load_runs_dir(self) -> int:
        """Registers (without analysing) every ``<runs_dir>/<run_id>/manifest.json``; returns how many."""
        if self._runs_dir is None or not self._runs_dir.is_dir():
            return 0
        found = 0
        for path in sorted(self._runs_dir.glob("*/manifest.json")):
            try:
                manifest = read_manifest(path)
                key = entry_key(manifest)
            except (OSError, ValueError, KeyError, TypeError, BadInput):
                continue
            if self._found(key, RunEntry(manifest, self._clock())):
                self._dirs[key] = path.parent
            found += 1
        return found

    def _found(self, key: str, entry: RunEntry) -> bool:
        """Keeps ``entry`` found in a folder unless a folder already read holds the same run and ranks higher:
        a killed attempt moved aside beside its rerun (``<key>.killed``) must not hide the finished rerun,
        whichever folder is read first."""
        held = self._runs.get(key)
        if held is not None and (held.partial is None, held.measured_at()) >= (entry.partial is None,
                                                                               entry.measured_at()):
            return False
        self._runs[key] = entry
        return True

    def add_run_dir(self, path: Path) -> RunManifest:
        """Registers (without analysing) the run folder ``path`` wherever it lies; ``BadInput`` when it holds
        no readable ``manifest.json``."""
        try:
            manifest = read_manifest(path / "manifest.json")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise BadInput(f"{path} is not a run folder (no readable manifest.json: {exc})") from exc
        key = entry_key(manifest)
        if self._found(key, RunEntry(manifest, self._clock())):
            self._dirs[key] = path
        return manifest

    def run(self, run_id: str) -> RunEntry:
        entry = self._runs.get(run_id)
        if entry is None and self._runs_dir is not None and re.fullmatch(RUN_ID_PATTERN, run_id):
            try:
                manifest = read_manifest(self._runs_dir / run_id / "manifest.json")
            except (OSError, ValueError, KeyError, TypeError):
                manifest = None
            if manifest is not None and manifest.run_id == run_id:
                entry = self._runs[run_id] = RunEntry(manifest, self._clock())
        if entry is None:
            raise UnknownRun(f"no run {run_id!r} is registered")
        return entry

    def shards_of(self, run_id: str) -> list[RunEntry]:
        """The registered shards of fleet run ``run_id`` (found under ``runs_dir`` too), by index."""
        found = [e for key, e in self._runs.items() if e.manifest.run_id == run_id and key != run_id]
        if not found and self._runs_dir is not None and re.fullmatch(RUN_ID_PATTERN, run_id):
            for path in sorted(self._runs_dir.glob(f"{glob.escape(run_id)}.shard-*/manifest.json")):
                with contextlib.suppress(OSError, ValueError, KeyError, TypeError, BadInput, UnknownRun):
                    found.append(self.run(path.parent.name))
        return sorted(found, key=lambda e: entry_key(e.manifest))

    async def fleet_run(self, run_id: str) -> tuple[list[RunEntry], RecommendationsDocument | None]:
        """Fleet run ``run_id``: its shards (each analysed unless it is, or failed recently) and the document of
        their answers together, with its missing shards said (``recommender.fleet_runs``); ``UnknownRun`` where
        no shard of it is registered."""
        shards = self.shards_of(run_id)
        if not shards:
            raise UnknownRun(f"no run {run_id!r} is registered")
        for entry in shards:
            await self.ensure_analyzed(entry_key(entry.manifest))
        read = [model for e in shards if (model := e.read()) is not None]
        if not read:
            return shards, None
        lanes: dict[str, LaneModel] = {}
        for model in read:
            lanes.update(model.lanes)
        return shards, merged_document(read[-1], read, lanes, fleet_runs(shard_entries(shards)), run_id=run_id)

    @property
    def run_count(self) -> int:
        return len(self._runs)

    async def register(self, manifest: RunManifest) -> RunEntry:
        """Registers (or replaces) a run and analyses it now; a source failure leaves it pending. It ranks by
        when it was measured, no later than now (module docstring)."""
        now = self._clock()
        key = entry_key(manifest)
        check_join(manifest, stamp_of(manifest), (e.manifest for k, e in self._runs.items() if k != key))
        entry = RunEntry(manifest, now)
        self._persist(manifest)  # before it is registered: a run the folder refused is not one
        self._runs[key] = entry
        await self._analyze([entry])
        return entry

    async def ensure_analyzed(self, run_id: str) -> RunEntry:
        """The run, analysed now unless it is, or its last analysis failed less than ``retry_after_s`` ago."""
        entry = self.run(run_id)
        recent = entry.failed_at is not None and self._clock() - entry.failed_at < self.retry_after_s
        if entry.document is None and not recent:
            await self._analyze([entry])
        return entry

    def _persist(self, manifest: RunManifest) -> None:
        """Writes the run's manifest into ``runs_dir``; a folder that cannot take it (full: ``RunsFolderFull``;
        read-only or refused: ``RunsFolderUnwritable``) leaves nothing behind, not even the run's folder."""
        if self._runs_dir is None:
            return
        folder = self._runs_dir / entry_key(manifest)
        path = folder / "manifest.json"
        if path.exists():
            return
        existed = folder.exists()
        try:
            self._write_manifest(manifest, path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                for leftover in folder.glob(".manifest.json.*.tmp"):
                    leftover.unlink()
                if not existed:
                    shutil.rmtree(folder)
            said = f"the runs folder {self._runs_dir} cannot take run {entry_key(manifest)!r}: " \
                   f"{exc.strerror or exc}"
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise RunsFolderFull(f"{said}; nothing was registered") from exc
            raise RunsFolderUnwritable(f"{said}; nothing was registered") from exc

    # -- analysis ----------------------------------------------------------------------------------
    def _current_entries(self) -> list[RunEntry]:
        """Per lane, the run whose answer ranks highest (``RunEntry.lane_rank``), newest last."""
        chosen: dict[str, tuple[tuple[bool, float, int], RunEntry]] = {}
        for entry in self._runs.values():
            for lane in entry.lanes:
                rank = entry.lane_rank(lane)
                if lane not in chosen or chosen[lane][0] < rank:
                    chosen[lane] = (rank, entry)
        unique = {id(e): e for _, e in chosen.values()}
        return sorted(unique.values(), key=lambda e: e.sort_key)

    def runs(self) -> list[dict[str, Any]]:
        """Every registered run, oldest measured first: its key, whether it is complete (``partial`` says why
        not), whether it is analysed, and the lanes of the served document it answers."""
        out = []
        for entry in sorted(self._runs.values(), key=lambda e: e.sort_key):
            key = entry_key(entry.manifest)
            out.append({"key": key, "run_id": entry.manifest.run_id, "registered_at": entry.registered_at,
                        "measured_at": entry.measured_at(), "complete": entry.partial is None,
                        "partial": entry.partial, "analyzed": entry.document is not None, "reason": entry.reason,
                        "serves": sorted(lane for lane, by in self._serving.items() if by == key)})
        return out

    async def refresh(self) -> None:
        """Re-analyses the runs behind the current document (the refresh tick)."""
        await self._analyze(self._current_entries())

    async def _analyze(self, entries: list[RunEntry]) -> None:
        async with self._lock:
            jobs = [(e.manifest, self.run_dir(entry_key(e.manifest))) for e in entries]
            try:
                results = await asyncio.get_running_loop().run_in_executor(
                    self._executor, analyze_all, self._analyzer, jobs, self._executor is not None)
            except Exception as exc:  # a worker process lost, or a result that cannot travel back
                results = [RuntimeError(f"the analysis worker failed: {exc!r}")] * len(jobs)
            failure: str | None = None
            for entry, result in zip(entries, results, strict=True):
                if isinstance(result, SourceUnavailable):
                    entry.reason, entry.failed_at = str(result), self._clock()
                    failure = str(result)
                elif isinstance(result, BaseException):
                    entry.reason, entry.failed_at = f"analysis failed: {result!r}", self._clock()
                    failure = entry.reason
                else:
                    entry.document, entry.reason, entry.failed_at = result, None, None
            await self._rebuild(failure)

    async def _rebuild(self, failure: str | None) -> None:
        entries = [e for e in self._current_entries() if e.document is not None]
        if failure is not None:
            if self._current is not None:
                if failure != self._stale_reason:
                    await self._publish(stale_reason=failure)
                return
            self._stale_reason = failure
        elif self._stale_reason is not None and self._current is None:
            self._stale_reason = None
        if not entries:
            return
        base = next((e for e in reversed(entries) if e.partial is None), entries[-1])  # the newest complete run
        read = base.read()
        assert read is not None
        served = served_answers(entries)
        self._serving = {key: entry_key(entry.manifest) for key, (entry, _) in served.items()}
        models = [model for e in entries if (model := e.read()) is not None]
        merged = merged_document(read, models, {key: answer for key, (_, answer) in served.items()},
                                 self._fleet_gaps(), notes=partial_notes(self._runs.values(), served))
        await self._publish(merged, stale_reason=failure, good_at=self._clock())

    def _fleet_gaps(self) -> list[FleetRun]:
        """Per fleet, its newest run's shards that did not report, or failed, among the runs registered."""
        return fleet_runs(shard_entries(list(self._runs.values())))

    async def _publish(self, merged: Any = _SAME, *, stale_reason: Any = _SAME, good_at: Any = _SAME,
                       validity: Any = _SAME) -> None:
        """The merged answers with each one's validity laid over them, rendered in every served form in a
        worker thread (``recommender.rendition``), then swapped in at once: what is served changes in one
        step, and never costs the event loop a serialisation. What is not given stays as the last publish
        left it, read under the lock (a validity tick waiting behind an analysis keeps its answers). The dicts
        handed to the thread are never changed in place (each publish builds new ones), so it reads them
        safely."""
        async with self._publish_lock:
            merged = self._merged if merged is _SAME else merged
            stale_reason = self._stale_reason if stale_reason is _SAME else stale_reason
            good_at = self._good_at if good_at is _SAME else good_at
            validity = dict(self._validity if validity is _SAME else validity)
            if merged is None:
                self._validity = validity
                return
            current = merged.model_copy(update={"lanes": {
                key: mark_changed(lane, validity[key]) if key in validity else lane
                for key, lane in merged.lanes.items()}})
            when = good_at if good_at is not None else self._clock()
            rendition = await asyncio.to_thread(render, current, stale_reason=stale_reason, good_at=when)
            self.builds["render"] += 1
            self._merged, self._validity, self._stale_reason, self._good_at = merged, validity, stale_reason, when
            self._current, self._rendered, self._served = current, rendition, None

    # -- validity ----------------------------------------------------------------------------------
    def answers_to_check(self) -> dict[str, LaneModel]:
        """The merged answers (before validity), by key: what the validity tick compares."""
        return dict(self._merged.lanes) if self._merged is not None else {}

    async def set_validity(self, validity: Mapping[str, ValidityModel], *, checked_at: float | None = None) -> bool:
        """Lays each answer's validity over the served document; True when some answer's state changed.

        Only a change re-serialises (a 100-lane document is a megabyte: serialising it every tick would stall
        the event loop that answers the pollers): an answer's ``validity.checked_at`` is the check that found
        its current state, and ``checked_at`` (the latest tick) is served beside the document, in the
        ``X-Satbench-Validity-Checked-At`` header and ``/healthz``."""
        def state(v: ValidityModel | None) -> tuple[Any, ...]:
            return (None,) if v is None else (v.state, v.reason)

        moved = set(validity) != set(self._validity) or any(
            state(self._validity.get(k)) != state(v) for k, v in validity.items())
        self.validity_checked_at = checked_at if checked_at is not None else self._clock()
        if moved:
            await self._publish(validity=validity)
        return moved

    # -- serving -----------------------------------------------------------------------------------
    @property
    def state(self) -> str:
        if self._current is None:
            return "none"
        return "stale" if self._stale_reason else "fresh"

    def _nothing(self) -> NothingToServe:
        why = self._stale_reason or "no run has been registered yet (POST /runs, or --runs-dir)"
        return NothingToServe(f"no recommendations to serve yet: {why}")

    def _age_s(self, rendition: Rendition) -> int:
        """A stale document's age in whole seconds (``recommender.rendition``)."""
        return max(0, math.floor(self._clock() - rendition.good_at))

    def served(self) -> Served:
        """The document in every served form, as of now: the rendition of the last publish, its stale age
        filled in at most once per whole second (``NothingToServe`` before there is one)."""
        rendition = self._rendered
        if rendition is None:
            raise self._nothing()
        age = self._age_s(rendition) if rendition.stale else None
        served = self._served
        if served is None or served.rendition is not rendition or served.age_s != age:
            ahead = self._ahead
            if ahead is not None and ahead.rendition is rendition and ahead.age_s == age:
                served = ahead
            else:
                served = Served(rendition, age)
                if age is not None:
                    self.builds["age"] += 1
            self._served = served
        return served

    async def prepare_ages(self) -> None:
        """Forever, while the document is stale: the next second's forms (its age filled in, gzipped) made
        ahead in a worker thread, so a poll at the turn of a second finds them ready (a 1.3 MB document's
        gzip is 8 ms here, and every poll at that turn waited for it)."""
        while True:
            rendition = self._rendered
            if rendition is None or not rendition.stale:
                await asyncio.sleep(0.25)
                continue
            age = self._age_s(rendition) + 1
            ahead = self._ahead
            if ahead is None or ahead.rendition is not rendition or ahead.age_s != age:
                ahead = Served(rendition, age)
                await asyncio.to_thread(ahead.prepare)
                self.builds["age"] += 1
                self._ahead = ahead
            await asyncio.sleep(min(1.0, max(0.05, rendition.good_at + age - self._clock())))

    def document(self) -> dict[str, Any]:
        """The document as a dict (a stale one marked whole, with its age: slow on a large document, so the
        routes serve ``served()``'s bytes instead)."""
        rendition = self._rendered
        if rendition is None:
            raise self._nothing()
        if rendition.stale_reason is None:
            return wire(rendition.document)
        return wire(mark_stale(rendition.document, age_s=float(self._age_s(rendition)),
                               reason=rendition.stale_reason))

    def model(self) -> RecommendationsDocument:
        """The served document as the model its readers take (``/metrics``), validated once per publish (a
        stale one once per second of age at most)."""
        return self.served().model()

    def document_gzip(self) -> bytes:
        """The document's bytes gzipped (level 1, once per publish, or per second of a stale one's age): a
        poller that accepts gzip gets a sixth of the bytes (a fleet's document is a megabyte)."""
        return self.served().gzip()

    def v1_ready(self) -> bool:
        """Whether the document can be said in schema v1 (``answer.document.as_v1``)."""
        return self._rendered is not None and self.served().v1_ready()

    def document_bytes(self, schema: str = "v2") -> bytes:
        """The serialised document, as rendered at its last publish (a stale one with its age). ``schema``
        ``v1``: its v1 view (``answer.document.as_v1``; ``AmbiguousForV1`` where it cannot be said)."""
        served = self.served()
        return served.v1() if schema == "v1" else served.v2()

    def capabilities_bytes(self) -> bytes:
        """The served document's capability fragment (``recommender.capabilities.capability_fragment``)."""
        return self.served().capabilities()

    def lane(self, lane: str) -> LaneModel:
        rendition = self._rendered
        if rendition is None:
            raise self._nothing()
        lanes = rendition.document.lanes
        if lane not in lanes:
            known = ", ".join(sorted(lanes)) or "none"
            raise UnknownLane(f"no lane {lane!r} in the current recommendations (lanes: {known})")
        if rendition.stale_reason is None:
            return lanes[lane]
        one = mark_stale(rendition.document.model_copy(update={"lanes": {lane: lanes[lane]}}),
                         age_s=float(self._age_s(rendition)), reason=rendition.stale_reason)
        return one.lanes[lane]
