"""One candidate's measurement: start the lane's server with its settings, walk the ladder, judge, stop.

``CandidateWalker.measure(candidate)`` is the ``measure`` of ``satbench.tune.search``. For a candidate it

1. resumes: a folder that already holds ``recommendations.json`` (``--resume``) is re-read, not walked;
2. skips a llamacpp candidate whose slots cannot hold the workload: ``ctx_per_slot`` above the model's
   trained context (``<arch>.context_length`` of the GGUF, where it can be read), at which llama-server caps
   each slot's context (the whole ``-c`` may exceed it; memory that does not fit is the server's refusal);
3. starts the server: a simulator lane is ``satbench sim --slots N --batch B --ubatch U -c CTX --metrics``
   (``-c`` is the whole context, each slot getting ``CTX / N``, as llama-server's), a llamacpp lane a
   ``llama-server -np N -b B -ub U -c CTX`` (``satbench.runtimes.llamacpp``). If it exits or never answers
   ``/health`` the candidate is ``refused`` with the server's own message (its log tail), and the search goes on;
4. walks loadgen's ladder in-process (``run_ladder``) into the candidate's folder, from the tune's listed
   rungs (1, 2) with the extension on and ``max_concurrency = 2 * parallel``: it doubles only while a rung
   still pays by the policy's own measure (gain, TTFT/ITL p95, errors), and a rung past twice the slots can
   only queue;
5. judges it from the records (``analyze_run`` with no Prometheus: the two paths agree by contract) and
   writes ``recommendations.json``. The folder also holds ``command.txt`` (the exact server command line),
   ``manifest.json``, ``records.jsonl``, ``steps.json`` and the server's log under ``logs/``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import shlex
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from core import __version__
from core.loops import fast_loop_factory
from core.manifest import RunManifest, write_json_atomic
from loadgen.config import LadderConfig, LoadgenConfig
from loadgen.runner import run_ladder
from recommender.policy import Policy
from recommender.run_analysis import analyze_run
from satbench.runtimes import RunningRuntime
from satbench.runtimes.llamacpp import LlamaServerError
from satbench.session.config import LaneRuntime, SessionConfig
from satbench.session.parts import LAUNCHERS
from satbench.session.processes import ProcessSet, StartError
from satbench.tune.grid import Candidate
from satbench.tune.search import Outcome, outcome_from_lane

__all__ = ["CandidateWalker", "model_context_length", "walk_loadgen"]

Say = Callable[[str], None]


def model_context_length(path: Path) -> int | None:
    """The GGUF's trained context (``<arch>.context_length``), or None where it cannot be read."""
    try:
        from gguf import GGUFReader

        reader = GGUFReader(str(path))
        arch_field = reader.fields.get("general.architecture")
        if arch_field is None:
            return None
        arch = bytes(arch_field.parts[arch_field.data[0]]).decode("utf-8")
        ctx_field = reader.fields.get(f"{arch}.context_length")
        return None if ctx_field is None else int(ctx_field.parts[ctx_field.data[0]][0])
    except Exception:  # an unreadable or foreign file: the server's own refusal decides
        return None


def walk_loadgen(session: SessionConfig, lane: LaneRuntime, url: str, candidate: Candidate,
                 ladder: list[int]) -> LoadgenConfig:
    """The session's load generator for one candidate: its lane, the listed rungs, extension to 2 x slots."""
    top = 2 * candidate.parallel
    base = session.loadgen.ladder.model_dump(exclude_unset=True)
    rungs = [c for c in ladder if c <= top] or [1]
    ladder_config = LadderConfig.model_validate({**base, "concurrency": rungs, "extend": True,
                                                 "max_concurrency": top})
    return session.loadgen.model_copy(update={
        "lanes": [lane.at(url)], "ladder": ladder_config, "metrics_port": None, "recommender_url": None,
        "metrics_linger_s": 0.0, "progress": False})


class CandidateWalker:
    """Measures candidates of one lane into ``<lane_dir>/<candidate id>/`` (module docstring)."""

    def __init__(self, session: SessionConfig, lane: LaneRuntime, lane_dir: Path, *, policy: Policy,
                 ladder: list[int], say: Say = print, tune_id: str = "tune") -> None:
        self.session = session
        self.tune_id = tune_id
        self.lane = lane
        self.lane_dir = lane_dir
        self.policy = policy
        self.ladder = ladder
        self.say = say
        self._n_ctx_train: int | None = None
        if lane.runtime == "llamacpp" and session.model_dir is not None and lane.model_file:
            self._n_ctx_train = model_context_length(session.model_dir / lane.model_file)

    def measure(self, candidate: Candidate) -> Outcome:
        folder = self.lane_dir / candidate.id
        rel = str(folder)
        done = folder / "recommendations.json"
        if done.is_file():
            outcome = self._read(candidate, done, rel)
            if outcome is not None:
                self.say(f"  {candidate.id}: resumed from {done}")
                return outcome
        # llama-server caps each slot's context at the trained one (n_ctx_slot = min(n_ctx_seq, n_ctx_train)):
        # a slot that needs more cannot hold the workload's longest request; the whole -c may exceed it
        if self._n_ctx_train is not None and candidate.ctx_per_slot > self._n_ctx_train:
            why = (f"context per slot {candidate.ctx_per_slot} (the workload's longest request) exceeds the "
                   f"model's trained context {self._n_ctx_train}, at which llama-server caps a slot")
            self.say(f"  {candidate.id}: skipped: {why}")
            return Outcome(candidate, "skipped", reason=why)
        folder.mkdir(parents=True, exist_ok=True)
        processes = ProcessSet(folder / "logs")
        with contextlib.ExitStack() as stack:
            stack.callback(processes.stop_all)
            try:
                runtime = self._start(candidate, processes, stack, folder)
            except (StartError, LlamaServerError, ValueError, OSError) as exc:
                why = _one_line(str(exc))
                self.say(f"  {candidate.id}: refused: {why}")
                (folder / "refused.txt").write_text(str(exc) + "\n", encoding="utf-8")
                return Outcome(candidate, "refused", reason=why, folder=rel)
            (folder / "command.txt").write_text(shlex.join(runtime.command) + "\n", encoding="utf-8")
            self.say(f"  {candidate.id}: walking ({candidate.flags(self.lane.runtime)})")
            doc = self._walk(candidate, runtime, folder)
        write_json_atomic(done, doc)
        outcome = outcome_from_lane(candidate, (doc.get("lanes") or {}).get(self.lane.key) or {}, rel)
        self.say(f"  {candidate.id}: c={outcome.recommended} ({outcome.binding}, {outcome.status})"
                 + ("" if outcome.throughput_tok_s is None else f", {outcome.throughput_tok_s:.1f} tok/s"))
        return outcome

    def _read(self, candidate: Candidate, path: Path, rel: str) -> Outcome | None:
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        lane = (doc.get("lanes") or {}).get(self.lane.key) if isinstance(doc, dict) else None
        if not isinstance(lane, dict):
            return None
        return dataclasses.replace(outcome_from_lane(candidate, lane, rel), resumed=True)

    def _start(self, candidate: Candidate, processes: ProcessSet, stack: contextlib.ExitStack,
               folder: Path) -> RunningRuntime:
        """The lane's runtime with the candidate's settings, by the session's own launcher."""
        lane = self.lane.model_copy(update={"parallel": candidate.parallel, "batch": candidate.batch,
                                            "ubatch": candidate.ubatch, "ctx_size": candidate.ctx_size})
        return LAUNCHERS[lane.runtime](lane, self.session, processes, stack)

    def _walk(self, candidate: Candidate, runtime: RunningRuntime, folder: Path) -> dict[str, Any]:
        # the walk's answers are keyed by the lane's key (a node's lane: node/lane), as a session's
        # a run id allows no "/", and names may hold ".": node.lane alone could be two lanes' (a.b/c, a/b.c),
        # so a node's lane adds its key's digest
        key = self.lane.key
        tag = key if "/" not in key else f"{key.replace('/', '.')}.{hashlib.sha256(key.encode()).hexdigest()[:8]}"
        run_id = f"{self.tune_id}-{tag}-{candidate.id}"[-128:].lstrip("-._")
        loadgen = walk_loadgen(self.session, self.lane, runtime.url, candidate, self.ladder)
        header = RunManifest(
            run_id=run_id, created_at=time.time(), command=tuple(runtime.command),
            config={"tune": {"lane": self.lane.key, "candidate": candidate.settings()},
                    "lane": self.lane.model_dump(mode="json"), "policy": self.session.policy,
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
