"""One candidate's measurement: check it fits, start the lane's server with its settings, read back what
started, walk the ladder, judge, stop.

``CandidateWalker.measure(candidate, window_factor)`` is the ``measure`` of ``satbench.tune.search`` (and,
with longer windows, of ``satbench.tune.evidence``). For a candidate it

1. resumes (``--resume``): a folder holding ``recommendations.json`` and a ``candidate.json`` whose
   fingerprint matches (the lane's model, the workload and its seed, the policy, the timing, the server
   arguments and the grid point: ``fingerprint_parts``) is re-read, not walked. One whose fingerprint differs
   is walked again, its old folder kept beside as ``<id>.stale``, and the tune says which part changed;
2. skips, before any start: a slot context beyond the model's trained one (``<arch>.context_length``, at
   which llama-server caps a slot), and a candidate whose weights and KV cache cannot fit the lane's memory
   budget, with the arithmetic (``satbench.tune.memory``);
3. starts the server by the session's own launcher: ``satbench sim --slots N --batch B --ubatch U -c CTX``
   for a simulator lane, ``llama-server -np N -b B -ub U -c CTX`` for a llamacpp lane, with the tune's own
   flags after the lane's ``server_args``: the KV layout said either way (``--no-kv-unified`` / ``-kvu``),
   ``--fit off`` (a candidate that does not fit is refused by the server, never served with layers moved to
   the CPU), ``-ngl 999`` unless the lane sets ``-ngl`` (every layer on the GPU where there is one) and
   ``-lv 4`` (the library's start-up lines, which the read-back reads). A server that exits or never answers
   is ``refused`` with its own message (the log tail);
4. reads back what started (``satbench.tune.readback``): another slot count, less context, another KV
   layout or layers lost to the CPU mark it ``refused`` with the reason, before any load;
5. walks loadgen's ladder in-process (``run_ladder``) from the tune's listed rungs with the extension on and
   ``max_concurrency = 2 * parallel`` (a rung past twice the slots can only queue), its windows
   ``window_factor`` times the session's (``min_window_s``, ``max_window_s``, ``min_requests``,
   ``decide_max_window_s``);
6. judges it from the records (``analyze_run`` with no Prometheus) and writes ``recommendations.json`` and
   ``candidate.json`` (fingerprint, memory, read-back, truncated requests). A request the server cut short
   at its context is counted (``satbench.tune.context.truncated_requests``) and said.

The folder also holds ``command.txt`` (the exact server command line), ``manifest.json``, ``records.jsonl``,
``steps.json`` and the server's log under ``logs/``; a walk with longer windows goes to ``<id>/x<factor>/``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import shlex
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from satbench.answer.document import read_document
from satbench.answer.policy import Policy
from satbench.core import __version__
from satbench.core.gguf_metadata import GgufError, read_gguf_metadata
from satbench.core.llama_argv import settings_from_argv
from satbench.core.loops import fast_loop_factory
from satbench.core.manifest import RunManifest, write_json_atomic
from satbench.loadgen.config import LadderConfig, LoadgenConfig
from satbench.loadgen.runner import run_ladder
from satbench.recommender.run_analysis import analyze_run
from satbench.runtimes import RunningRuntime
from satbench.runtimes.llamacpp import LlamaServerError
from satbench.runtimes.processes import ProcessSet, StartError
from satbench.session.config import LaneRuntime, SessionConfig
from satbench.session.parts import LAUNCHERS
from satbench.tune.answer import fingerprint
from satbench.tune.context import truncated_requests
from satbench.tune.grid import Candidate
from satbench.tune.memory import Budget, ModelMemory, fit
from satbench.tune.models import CandidateRecord, MemoryNeed, Readback, WalkFacts
from satbench.tune.readback import verify
from satbench.tune.search import Outcome, outcome_from_lane

__all__ = ["CandidateWalker", "model_context_length", "tune_server_args", "walk_loadgen"]

Say = Callable[[str], None]
WINDOW_FIELDS = ("min_window_s", "max_window_s", "decide_max_window_s", "hold_max_window_s")


def model_context_length(path: Path) -> int | None:
    """The GGUF's trained context (``<arch>.context_length``), or None where it cannot be read."""
    try:
        value = read_gguf_metadata(path).arch_value("context_length")
    except (GgufError, OSError):  # an unreadable or foreign file: the server's own refusal decides
        return None
    return value if isinstance(value, int) and value > 0 else None


def tune_server_args(lane: LaneRuntime, candidate: Candidate) -> list[str]:
    """The lane's ``server_args`` and the tune's own flags after them (module docstring, step 3)."""
    args = [*lane.server_args, *candidate.layout_args(), "--fit", "off", "-lv", "4"]
    if settings_from_argv(["llama-server", *lane.server_args])[0].get("n_gpu_layers") is None:
        args += ["-ngl", "999"]
    return args


def walk_loadgen(session: SessionConfig, lane: LaneRuntime, url: str, candidate: Candidate,
                 ladder: list[int], window_factor: float = 1.0) -> LoadgenConfig:
    """The session's load generator for one candidate: its lane, the listed rungs, extension to 2 x slots,
    windows ``window_factor`` times the session's."""
    top = 2 * candidate.parallel
    base = session.loadgen.ladder.model_dump(exclude_unset=True)
    rungs = [c for c in ladder if c <= top] or [1]
    ladder_config = LadderConfig.model_validate({**base, "concurrency": rungs, "extend": True,
                                                 "max_concurrency": top})
    update: dict[str, Any] = {"lanes": [lane.at(url)], "ladder": ladder_config, "metrics_port": None,
                              "recommender_url": None, "metrics_linger_s": 0.0, "progress": False}
    if window_factor != 1.0:
        loadgen = session.loadgen
        update.update({name: getattr(loadgen, name) * window_factor for name in WINDOW_FIELDS
                       if getattr(loadgen, name) is not None})
        update["min_requests"] = round(loadgen.min_requests * window_factor)
    return session.loadgen.model_copy(update=update)


def _digest(value: Any) -> str:
    return fingerprint(value if isinstance(value, dict) else {"value": value})


class CandidateWalker:
    """Measures candidates of one lane into ``<lane_dir>/<candidate id>/`` (module docstring)."""

    def __init__(self, session: SessionConfig, lane: LaneRuntime, lane_dir: Path, *, policy: Policy,
                 ladder: list[int], say: Say = print, tune_id: str = "tune",
                 memory: ModelMemory | None = None, budget: Budget | None = None,
                 fingerprint_parts: dict[str, Any] | None = None) -> None:
        self.session = session
        self.tune_id = tune_id
        self.lane = lane
        self.lane_dir = lane_dir
        self.policy = policy
        self.ladder = ladder
        self.say = say
        self.memory = memory
        self.budget = budget
        self.parts = {k: _digest(v) for k, v in (fingerprint_parts or {}).items()}
        self._n_ctx_train: int | None = None
        if lane.runtime == "llamacpp" and session.model_dir is not None and lane.model_file:
            self._n_ctx_train = model_context_length(session.model_dir / lane.model_file)

    def _fingerprint(self, candidate: Candidate, window_factor: float) -> tuple[str, dict[str, str]]:
        parts = {**self.parts, "point": _digest(candidate.settings()), "window_factor": _digest(window_factor)}
        return fingerprint(parts), parts

    def folder_of(self, candidate: Candidate, window_factor: float = 1.0) -> Path:
        base = self.lane_dir / candidate.id
        return base if window_factor == 1.0 else base / f"x{window_factor:g}"

    def measure(self, candidate: Candidate, window_factor: float = 1.0) -> Outcome:
        folder = self.folder_of(candidate, window_factor)
        digest, parts = self._fingerprint(candidate, window_factor)
        resumed = self._resume(candidate, folder, digest, parts)
        if isinstance(resumed, Outcome):
            self.say(f"  {candidate.id}: resumed from {folder} (fingerprint matches)")
            return resumed
        facts = WalkFacts(fingerprint=digest, window_factor=window_factor)
        if resumed is not None:
            facts = facts.model_copy(update={"resume": resumed})
            self.say(f"  {candidate.id}: walked again: {resumed}")
        if self._n_ctx_train is not None and candidate.ctx_per_slot > self._n_ctx_train:
            why = (f"context per slot {candidate.ctx_per_slot} (the workload's longest request) exceeds the "
                   f"model's trained context {self._n_ctx_train}, at which llama-server caps a slot")
            self.say(f"  {candidate.id}: skipped: {why}")
            return Outcome(candidate, "skipped", reason=why, facts=facts)
        need = fit(candidate.ctx_size, self.memory, self.budget)
        facts = facts.model_copy(update={"memory": MemoryNeed(kv_bytes=need.kv_bytes, need_bytes=need.need_bytes,
                                                              fits=need.fits, arithmetic=need.arithmetic)})
        if need.fits is False:
            self.say(f"  {candidate.id}: skipped: {need.arithmetic}")
            return Outcome(candidate, "skipped", reason=f"cannot fit: {need.arithmetic}", facts=facts)
        folder.mkdir(parents=True, exist_ok=True)
        processes = ProcessSet(folder / "logs")
        with contextlib.ExitStack() as stack:
            stack.callback(processes.stop_all)
            try:
                runtime = self.start(candidate, processes, stack)
            except (StartError, LlamaServerError, ValueError, OSError) as exc:
                why = _one_line(str(exc))
                self.say(f"  {candidate.id}: refused: {why}")
                (folder / "refused.txt").write_text(str(exc) + "\n", encoding="utf-8")
                return Outcome(candidate, "refused", reason=why, folder=str(folder), facts=facts)
            (folder / "command.txt").write_text(shlex.join(runtime.command) + "\n", encoding="utf-8")
            problems, readback = self._read_back(candidate, runtime)
            facts = facts.model_copy(update={"readback": readback})
            if problems:
                why = "; ".join(problems)
                self.say(f"  {candidate.id}: refused: {why}")
                (folder / "refused.txt").write_text(why + "\n", encoding="utf-8")
                return Outcome(candidate, "refused", reason=why, folder=str(folder), facts=facts)
            self.say(f"  {candidate.id}: walking ({candidate.flags(self.lane.runtime)})"
                     + ("" if window_factor == 1.0 else f", windows x{window_factor:g}"))
            doc = self._walk(candidate, runtime, folder, window_factor)
        write_json_atomic(folder / "recommendations.json", doc)
        outcome = self._outcome(candidate, doc, folder, facts)
        record = CandidateRecord.of(candidate.id, candidate.settings(), parts, outcome.facts)
        write_json_atomic(folder / "candidate.json", record.model_dump(mode="json"))
        self.say(f"  {candidate.id}: c={outcome.recommended} ({outcome.binding}, {outcome.status})"
                 + ("" if outcome.throughput_tok_s is None else f", {outcome.throughput_tok_s:.1f} tok/s")
                 + ("" if not outcome.truncated else f"; {outcome.truncated} requests cut short at the context"))
        return outcome

    def set_aside(self, candidate: Candidate, outcome: Outcome) -> None:
        """A drifted walk's folder moved aside (``<folder>.drifted``, replacing an older one), so the walk again
        starts afresh and a later resume never reads the drifted answer (``search.walk_again_on_drift``)."""
        if outcome.folder is None or not Path(outcome.folder).is_dir():
            return
        aside = Path(outcome.folder + ".drifted")
        if aside.exists():
            shutil.rmtree(aside)
        Path(outcome.folder).rename(aside)

    def _outcome(self, candidate: Candidate, doc: dict[str, Any], folder: Path, facts: WalkFacts) -> Outcome:
        """The candidate's outcome from its walk's document (validated here: ``read_document``)."""
        lane = read_document(doc).lanes.get(self.lane.key)
        cut, said = truncated_requests(folder / "records.jsonl", self.session.loadgen.workload.ignore_eos)
        facts = facts.model_copy(update={"truncated_requests": cut, "truncated_examples": said})
        outcome = outcome_from_lane(candidate, lane, str(folder))
        return dataclasses.replace(outcome, truncated=cut, window_factor=facts.window_factor,
                                   facts=facts)

    def _resume(self, candidate: Candidate, folder: Path, digest: str, parts: dict[str, str]) -> Outcome | str | None:
        """The recorded outcome where the fingerprint matches; else why it is walked again (None: nothing
        recorded)."""
        done = folder / "recommendations.json"
        if not done.is_file():
            return None
        recorded: CandidateRecord | None
        facts: WalkFacts | None
        try:
            doc = json.loads(done.read_text(encoding="utf-8"))
            recorded = CandidateRecord.model_validate_json((folder / "candidate.json").read_bytes())
            facts = recorded.facts()
        except (OSError, ValueError):  # a ValidationError is a ValueError: unreadable is unrecorded
            recorded = facts = None
        if recorded is None or facts is None or facts.fingerprint is None:
            why = "its folder has no recorded fingerprint (candidate.json)"
        elif facts.fingerprint != digest:
            old = recorded.parts
            changed = sorted(k for k in set(parts) | set(old) if parts.get(k) != old.get(k))
            why = f"its recorded fingerprint differs ({', '.join(changed) or 'unknown parts'} changed)"
        else:
            try:
                outcome = self._outcome(candidate, doc, folder, facts)
            except ValueError as exc:  # a recorded document that does not validate is walked again
                why = f"its recorded recommendations.json is unreadable ({exc})"
            else:
                return dataclasses.replace(outcome, resumed=True)
        stale = folder.with_name(folder.name + ".stale")
        shutil.rmtree(stale, ignore_errors=True)
        folder.rename(stale)
        return why

    def start(self, candidate: Candidate, processes: ProcessSet, stack: contextlib.ExitStack) -> RunningRuntime:
        """The lane's runtime with the candidate's settings, by the session's own launcher."""
        update: dict[str, Any] = {"parallel": candidate.parallel, "batch": candidate.batch,
                                  "ubatch": candidate.ubatch, "ctx_size": candidate.ctx_size}
        if self.lane.runtime == "llamacpp":
            update["server_args"] = tune_server_args(self.lane, candidate)
        lane = self.lane.model_copy(update=update)
        return LAUNCHERS[lane.runtime](lane, self.session, processes, stack)

    def _read_back(self, candidate: Candidate, runtime: RunningRuntime) -> tuple[list[str], Readback]:
        ngl = settings_from_argv(["llama-server", *self.lane.server_args])[0].get("n_gpu_layers")
        problems, record = verify(candidate, runtime.props, getattr(runtime, "startup", None),
                                  ngl if isinstance(ngl, int) else None)
        memory = self.memory
        if memory is not None and memory.kv_bytes_per_token is not None:
            record = record.model_copy(update={"kv_bytes_model": round(memory.kv_bytes_per_token * candidate.ctx_size)})
        return problems, record

    def _walk(self, candidate: Candidate, runtime: RunningRuntime, folder: Path,
              window_factor: float) -> dict[str, Any]:
        # the walk's answers are keyed by the lane's key (a node's lane: node/lane), as a session's
        # a run id allows no "/", and names may hold ".": node.lane alone could be two lanes' (a.b/c, a/b.c),
        # so a node's lane adds its key's digest
        key = self.lane.key
        tag = key if "/" not in key else f"{key.replace('/', '.')}.{hashlib.sha256(key.encode()).hexdigest()[:8]}"
        suffix = "" if window_factor == 1.0 else f"-x{window_factor:g}"
        run_id = f"{self.tune_id}-{tag}-{candidate.id}{suffix}"[-128:].lstrip("-._")
        loadgen = walk_loadgen(self.session, self.lane, runtime.url, candidate, self.ladder, window_factor)
        header = RunManifest(
            run_id=run_id, created_at=time.time(), command=tuple(runtime.command),
            config={"tune": {"lane": self.lane.key, "candidate": candidate.settings(),
                             "window_factor": window_factor},
                    "lane": self.lane.model_dump(mode="json"), "policy": self.session.policy_given,
                    "loadgen": loadgen.model_dump(mode="json")},
            versions={"satbench": __version__},
            lanes={self.lane.key: {**runtime.evidence(), "node": self.lane.node_name, "lane": self.lane.name,
                                   "node_labels": self.session.node_labels(self.lane.node_name)}})
        with asyncio.Runner(loop_factory=fast_loop_factory()) as runner:
            try:
                manifest = runner.run(run_ladder(loadgen, folder, run_id=run_id, manifest=header, progress=False))
            except asyncio.CancelledError as exc:
                raise KeyboardInterrupt from exc
        return analyze_run(manifest, prometheus_url=None, run_dir=folder, policy=self.policy)


def _one_line(text: str, limit: int = 600) -> str:
    """A multi-line server error as one line: its first line and the log's last lines."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    if len(lines) <= 1:
        return (lines[0] if lines else text)[:limit]
    tail = " | ".join(lines[-4:])  # the server's own words: kept whole, the first line shortened for them
    return (lines[0][:max(80, limit - len(tail) - 3)] + " | " + tail)[:limit]
