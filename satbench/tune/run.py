"""One tune: for each lane, search its grid (``satbench.tune.search``) with one ladder walk per candidate
(``satbench.tune.walk``), choose (``satbench.tune.answer``), write ``tune.json``, ``README.md`` and one
``pareto-<lane key>.svg`` into ``<out>/<tune_id>/`` (a node's lane: ``pareto-<node>/<lane>.svg``), and print a
table per lane with the winner's flags last. Lanes are keyed by lane key throughout (``core.lanes``).

``resume`` names an earlier tune folder: it is written to again, and every candidate whose folder already
holds a ``recommendations.json`` is re-read instead of walked. The exit status is 0 when every tuned lane has a
feasible candidate, 1 when some lane has none (it says so).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.manifest import new_run_id, write_json_atomic
from recommender.document import iso_utc
from recommender.policy import Policy
from satbench.session.config import LaneRuntime
from satbench.session.processes import install_signal_handlers
from satbench.tune.answer import choose, fingerprint
from satbench.tune.config import TuneSetup
from satbench.tune.document import SCHEMA, lane_entry, tuned_document
from satbench.tune.grid import grid
from satbench.tune.render import lane_table, pareto_svg, readme, report_html
from satbench.tune.search import search
from satbench.tune.walk import CandidateWalker

__all__ = ["TuneResult", "run_tune"]

Say = Callable[[str], None]


@dataclass(frozen=True)
class TuneResult:
    tune_dir: Path
    document: dict[str, Any]
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
    except OSError:
        size = None
    return {"runtime": "llamacpp", "model_file": lane.model_file, "size": size, "server_args": lane.server_args,
            "threads": lane.threads}


def _question(lane: LaneRuntime, setup: TuneSetup, policy: Policy) -> dict[str, Any]:
    loadgen = setup.session.loadgen
    return {"lane": _model_identity(lane, setup), "api": lane.api,
            "grid": {"parallel": sorted(setup.tune.parallel), "pairs": sorted(setup.tune.pairs()),
                     "ctx_per_slot": setup.ctx_per_slot, "ladder": setup.tune.ladder},
            "workload": loadgen.workload.model_dump(mode="json"),
            "timing": {k: getattr(loadgen, k) for k in ("warmup_s", "min_window_s", "max_window_s", "min_requests")},
            "policy": policy.model_dump(mode="json")}


def _tune_lane(lane: LaneRuntime, setup: TuneSetup, tune_dir: Path, policy: Policy,
               pairs: list[tuple[int, int]], say: Say) -> dict[str, Any]:
    candidates = grid(setup.tune.parallel, pairs, setup.ctx_per_slot)
    say(f"lane {lane.key}: {len(candidates)} candidates"
        + (" (pruning dominated ones)" if setup.tune.prune else " (full grid)"))
    walker = CandidateWalker(setup.session, lane, tune_dir / "candidates" / lane.key, policy=policy,
                             ladder=setup.tune.ladder, say=say, tune_id=tune_dir.name)
    outcomes = search(candidates, walker.measure, prune=setup.tune.prune)
    for o in outcomes:
        if o.state == "pruned":
            say(f"  {o.candidate.id}: pruned, dominated by {o.dominated_by}: {o.reason}")
    choice = choose(outcomes, policy.min_gain_per_doubling)
    model = lane.profile if lane.runtime == "simulator" else str(lane.model_file)
    return lane_entry(runtime=lane.runtime, model=model, fingerprint=fingerprint(_question(lane, setup, policy)),
                      grid=candidates, pairs=pairs, prune=setup.tune.prune, outcomes=outcomes, choice=choice)


def run_tune(setup: TuneSetup, *, command: list[str], out_dir: Path | None = None, resume: Path | None = None,
             say: Say = print) -> TuneResult:
    policy = Policy.model_validate(setup.session.policy)
    if resume is not None:
        tune_dir = resume
        tune_id = resume.name
    else:
        tune_id = f"tune-{new_run_id()}"
        tune_dir = (out_dir or setup.session.out_dir) / tune_id
    tune_dir.mkdir(parents=True, exist_ok=True)
    say(f"satbench tune {tune_id}: {', '.join(lane.key for lane in setup.lanes)} -> {tune_dir}")
    pairs = setup.tune.pairs()
    lanes: dict[str, Any] = {}
    restore = install_signal_handlers()  # SIGTERM/SIGHUP unwind, so each candidate's server is stopped
    try:
        for lane in setup.lanes:
            lanes[lane.key] = _tune_lane(lane, setup, tune_dir, policy, pairs, say)
    finally:
        restore()

    doc = {"schema": SCHEMA, "tune_id": tune_id, "generated_at": iso_utc(time.time()), "command": command,
           "policy": policy.model_dump(mode="json"), "lanes": lanes,
           "notes": ["default grid: batch = ubatch for each candidate (the decode pause is set by -b)"]}
    write_json_atomic(tune_dir / "tune.json", doc)
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
    missing = [name for name, lane_doc in lanes.items() if lane_doc["winner"] is None]
    for name, lane_doc in lanes.items():
        if lane_doc["winner"] is not None:
            say(f"{name}: {lane_doc['flags']}  (recommended concurrency {lane_doc['recommended_concurrency']})")
        else:
            say(f"{name}: {lane_doc['reason']}")
    say(f"evidence: {tune_dir} (tune.json, recommendations.json, report.html, README.md, candidates/)")
    return TuneResult(tune_dir=tune_dir, document=doc, exit_code=1 if missing else 0)
