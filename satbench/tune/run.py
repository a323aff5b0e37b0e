"""One tune: for each lane, size its context and its memory, search its grid (``satbench.tune.search``) with
one ladder walk per candidate (``satbench.tune.walk``), choose (``satbench.tune.answer``), measure longer where
the deciding comparison is not significant (``satbench.tune.evidence``), write ``tune.json``, ``README.md``
and one ``pareto-<lane key>.svg`` into ``<out>/<tune_id>/`` (a node's lane: ``pareto-<node>/<lane>.svg``), and
print a table per lane with the winner's flags last. Lanes are keyed by lane key throughout (``core.lanes``).

Per lane, before any candidate: the model's memory facts (the GGUF, or a simulator profile's ``[memory]``)
and the budget (``tune.memory_bytes``, else the GPUs the exporter's reader sees, else a profile's simulated
ones: ``satbench.tune.memory``); the context per slot from the server's own count of the longest request
(one start of the lane's server for that alone, ``satbench.tune.context``) unless ``tune.ctx_per_slot`` sets
it; the grid at that context, with a unified-KV candidate where a split one cannot fit but a pool holding
the longest request can (``tune.kv_layout = "auto"``, llamacpp lanes).

``resume`` names an earlier tune folder: it is written to again, and every candidate whose folder holds a
``recommendations.json`` with a matching fingerprint is re-read instead of walked (``satbench.tune.walk``).
The exit status is 0 when every tuned lane has a feasible candidate, 1 when some lane has none (it says so).
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from satbench.answer.document import iso_utc
from satbench.answer.policy import Policy
from satbench.core.manifest import new_run_id, write_json_atomic
from satbench.exporter.gpu import GpuReader, GpuSourceAbsent, GpuUnavailable, NvmlGpuReader
from satbench.runtimes.processes import ProcessSet, StartError, install_signal_handlers
from satbench.session.config import LaneRuntime
from satbench.simulator.profile import ProfileError, load_profile
from satbench.tune.answer import choose, fingerprint
from satbench.tune.config import TuneSetup
from satbench.tune.context import ContextNeed, count_prompt_tokens, longest_request, need_from_count
from satbench.tune.document import lane_entry, tune_document, tuned_document
from satbench.tune.evidence import settle
from satbench.tune.grid import Candidate, grid
from satbench.tune.memory import (
    Budget,
    ModelMemory,
    budget_from_devices,
    model_memory_from_gguf,
    model_memory_from_profile,
)
from satbench.tune.models import TuneDocument, TuneLane
from satbench.tune.render import lane_table, pareto_svg, readme, report_html
from satbench.tune.search import Outcome, PruneRules, search, walk_again_on_drift
from satbench.tune.walk import CandidateWalker

__all__ = ["TuneResult", "run_tune"]

Say = Callable[[str], None]


@dataclass(frozen=True)
class TuneResult:
    tune_dir: Path
    document: TuneDocument
    exit_code: int


def _model_identity(lane: LaneRuntime, setup: TuneSetup) -> dict[str, Any]:
    """What the lane serves, for the fingerprint: the profile (its file's sha256 where it is one) or the GGUF."""
    if lane.runtime == "simulator":
        path = Path(lane.profile)
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
        return {"runtime": "simulator", "profile": lane.profile if digest is None else path.name, "sha256": digest}
    model = (setup.session.model_dir or Path(".")) / (lane.model_file or "")
    try:
        stat = model.stat()
        size: int | None = stat.st_size
        mtime: int | None = stat.st_mtime_ns
    except OSError:
        size = mtime = None
    return {"runtime": "llamacpp", "model_file": lane.model_file, "size": size, "mtime_ns": mtime,
            "server_args": lane.server_args, "threads": lane.threads}


def _parts(lane: LaneRuntime, setup: TuneSetup, policy: Policy) -> dict[str, Any]:
    """What decides one candidate's answer besides its grid point: its fingerprint's parts."""
    loadgen = setup.session.loadgen
    return {"model": _model_identity(lane, setup), "api": lane.api,
            "workload": loadgen.workload.model_dump(mode="json"),
            "timing": {k: getattr(loadgen, k) for k in ("warmup_s", "min_window_s", "max_window_s", "min_requests",
                                                         "decide_max_window_s", "hold_max_window_s")},
            "ladder": setup.tune.ladder, "policy": policy.model_dump(mode="json")}


def _question(lane: LaneRuntime, setup: TuneSetup, policy: Policy, ctx_per_slot: int) -> dict[str, Any]:
    return {**_parts(lane, setup, policy),
            "grid": {"parallel": sorted(setup.tune.parallel), "pairs": sorted(setup.tune.pairs()),
                     "ctx_per_slot": ctx_per_slot, "kv_layout": setup.tune.kv_layout}}


def _model_memory(lane: LaneRuntime, setup: TuneSetup) -> ModelMemory | None:
    if lane.runtime == "simulator":
        try:
            return model_memory_from_profile(load_profile(lane.profile).memory)
        except ProfileError:
            return None
    if setup.session.model_dir is None or not lane.model_file:
        return None
    return model_memory_from_gguf(setup.session.model_dir / lane.model_file, lane.server_args)


def _budget(lane: LaneRuntime, setup: TuneSetup, gpu_reader: GpuReader | None) -> Budget | None:
    reserve = setup.tune.memory_reserve_bytes
    if setup.tune.memory_bytes is not None:
        return Budget(setup.tune.memory_bytes, "tune.memory_bytes", reserve)
    if lane.runtime == "simulator":
        try:
            memory = load_profile(lane.profile).memory
        except ProfileError:
            return None
        count = int(memory.gpu_count)
        return Budget(count * int(memory.gpu_total_bytes), f"the profile's {count} simulated GPU(s)", reserve * count)
    if gpu_reader is None:
        return None
    try:
        devices = [d for d in gpu_reader.read(None) if not d.simulated]
    except (GpuUnavailable, GpuSourceAbsent):
        return None
    return budget_from_devices(devices, reserve)


def _context(lane: LaneRuntime, setup: TuneSetup, walker: CandidateWalker, say: Say) -> ContextNeed:
    workload = setup.session.loadgen.workload
    margin = setup.tune.ctx_margin
    if setup.tune.ctx_per_slot is not None:
        return ContextNeed(setup.tune.ctx_per_slot, None, 0, 0, "config", "tune.ctx_per_slot, as the config sets it")
    body = longest_request(workload, lane.api)
    probe = Candidate(1, 512, 512, setup.ctx_per_slot)
    processes = ProcessSet(walker.lane_dir / "context-probe" / "logs")
    with contextlib.ExitStack() as stack:
        stack.callback(processes.stop_all)
        try:
            runtime = walker.start(probe, processes, stack)
        except (StartError, ValueError, OSError, RuntimeError) as exc:
            need = need_from_count(workload, margin, lambda: None,
                                   unreachable=f"the server started to count the longest request did not start "
                                               f"({str(exc).splitlines()[0][:200]})")
        else:
            key = lane.api_key()
            headers = {"Authorization": f"Bearer {key}"} if key else {}
            with httpx.Client(timeout=30.0, headers=headers) as client:
                need = need_from_count(workload, margin,
                                       lambda: count_prompt_tokens(client, runtime.url, lane.api, body))
    say(f"lane {lane.key}: context per slot {need.ctx_per_slot}: {need.detail}")
    return need


def _with_unified(candidates: list[Candidate], walker: CandidateWalker, layout: str) -> list[Candidate]:
    """The grid with a unified-KV candidate after each split one that cannot fit, where a pool that fits
    still holds the longest request (``satbench.tune.grid``)."""
    memory, budget = walker.memory, walker.budget
    if (layout != "auto" or walker.lane.runtime != "llamacpp" or memory is None or budget is None
            or memory.kv_bytes_per_token is None):
        return candidates
    room = budget.usable_bytes - (memory.weights_bytes or 0) - memory.compute_bytes
    pool = 256 * math.floor(room / memory.kv_bytes_per_token / 256) if room > 0 else 0
    out: list[Candidate] = []
    for c in candidates:
        out.append(c)
        if c.parallel > 1 and c.ctx_per_slot <= pool < c.ctx_size:
            out.append(Candidate(c.parallel, c.batch, c.ubatch, c.ctx_per_slot, kv_unified=True, pool=pool))
    return out


def _tune_lane(lane: LaneRuntime, setup: TuneSetup, tune_dir: Path, policy: Policy,
               pairs: list[tuple[int, int]], say: Say, gpu_reader: GpuReader | None) -> TuneLane:
    memory = _model_memory(lane, setup)
    budget = _budget(lane, setup, gpu_reader)
    walker = CandidateWalker(setup.session, lane, tune_dir / "candidates" / lane.key, policy=policy,
                             ladder=setup.tune.ladder, say=say, tune_id=tune_dir.name, memory=memory,
                             budget=budget, fingerprint_parts=_parts(lane, setup, policy))
    need = _context(lane, setup, walker, say)
    candidates = _with_unified(grid(setup.tune.parallel, pairs, need.ctx_per_slot), walker, setup.tune.kv_layout)
    say(f"lane {lane.key}: {len(candidates)} candidates"
        + (" (pruning dominated ones)" if setup.tune.prune else " (full grid)"))
    rules = PruneRules(policy.min_gain_per_doubling, policy.confidence, family=len(candidates),
                       min_pause_requests=policy.min_pause_requests)
    measure = walk_again_on_drift(walker.measure, walker.set_aside, say)
    outcomes = search(candidates, measure, prune=setup.tune.prune, rules=rules)
    for o in outcomes:
        if o.state == "pruned":
            say(f"  {o.candidate.id}: pruned, dominated by {o.dominated_by}: {o.reason}")

    def decide(current: Sequence[Outcome]) -> Any:
        return choose(current, policy.min_gain_per_doubling, policy.confidence)

    outcomes, choice, decision = settle(outcomes, decide, measure, walks=setup.tune.evidence_walks,
                                        factor=setup.tune.evidence_window_factor,
                                        min_gain=policy.min_gain_per_doubling, confidence=policy.confidence)
    say(f"lane {lane.key}: decision: {decision.said()}")
    return lane_entry(runtime=lane.runtime, model=str(lane.serves),
                      fingerprint=fingerprint(_question(lane, setup, policy, need.ctx_per_slot)),
                      grid=candidates, pairs=pairs, prune=setup.tune.prune, outcomes=outcomes, choice=choice,
                      decision=decision, context=need, memory=memory, budget=budget)


def run_tune(setup: TuneSetup, *, command: list[str], out_dir: Path | None = None, resume: Path | None = None,
             say: Say = print, gpu_reader: GpuReader | None = None) -> TuneResult:
    """``gpu_reader``: where device memory is read (default NVML, the exporter's reader)."""
    policy = setup.session.policy
    if resume is not None:
        tune_dir = resume
        tune_id = resume.name
    else:
        tune_id = f"tune-{new_run_id()}"
        tune_dir = (out_dir or setup.session.out_dir) / tune_id
    tune_dir.mkdir(parents=True, exist_ok=True)
    say(f"satbench tune {tune_id}: {', '.join(lane.key for lane in setup.lanes)} -> {tune_dir}")
    pairs = setup.tune.pairs()
    reader = gpu_reader if gpu_reader is not None else NvmlGpuReader()
    lanes: dict[str, TuneLane] = {}
    restore = install_signal_handlers()  # SIGTERM/SIGHUP unwind, so each candidate's server is stopped
    try:
        for lane in setup.lanes:
            lanes[lane.key] = _tune_lane(lane, setup, tune_dir, policy, pairs, say, reader)
    finally:
        restore()

    doc = tune_document(tune_id=tune_id, generated_at=iso_utc(time.time()), command=command, policy=policy,
                        lanes=lanes)
    write_json_atomic(tune_dir / "tune.json", doc.to_json())
    recommendations = tuned_document(doc, tune_dir)
    if recommendations is not None:
        write_json_atomic(tune_dir / "recommendations.json", recommendations)
    for name, lane_doc in lanes.items():  # lanes by key: a node's lane is pareto-<node>/<lane>.svg
        svg = tune_dir / f"pareto-{name}.svg"
        svg.parent.mkdir(parents=True, exist_ok=True)
        svg.write_text(pareto_svg(name, lane_doc), encoding="utf-8")
    (tune_dir / "README.md").write_text(readme(doc), encoding="utf-8")
    (tune_dir / "report.html").write_text(report_html(doc), encoding="utf-8")
    for name, lane_doc in lanes.items():
        say("\n" + "\n".join(lane_table(name, lane_doc)))
    say("")
    missing = [name for name, lane_doc in lanes.items() if lane_doc.winner is None]
    for name, lane_doc in lanes.items():
        if lane_doc.winner is not None:
            say(f"{name}: {lane_doc.flags}  (recommended concurrency {lane_doc.recommended_concurrency})")
        else:
            say(f"{name}: {lane_doc.reason}")
    say(f"evidence: {tune_dir} (tune.json, recommendations.json, report.html, README.md, candidates/)")
    return TuneResult(tune_dir=tune_dir, document=doc, exit_code=1 if missing else 0)
