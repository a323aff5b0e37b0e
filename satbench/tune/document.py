"""``tune.json``: the whole answer of a tune, and ``tuned_lane``, the block a lane's recommendations carry.

Shape (schema ``satbench.tune/v1``; the fields since added are marked +, every earlier one kept)::

    {"schema", "tune_id", "generated_at", "command", "policy", "notes",
     "lanes": {<lane key>: {   (the lane's name, or <node>/<lane> for a lane that names a node)
        "runtime", "model", "fingerprint", "status" ("ok" | "no_feasible_candidate"), "reason",
        "grid": {"parallel", "pairs" [[batch, ubatch]...], "ctx_per_slot", "size", "prune"},
        "walked", "pruned", "refused", "skipped", "resumed",
        "winner": <candidate> | null, "flags": str | null, "recommended_concurrency", "throughput_tok_s",
        "runner_up": <candidate> | null,
        "margin": {"tok_s", "ratio", "uncertainty_tok_s", "significant"} | null,
        + "comparisons": [{"challenger", "holder", "difference_tok_s", "half_width_tok_s", "significant",
                           "gain_per_doubling", "verdict" (replaced | not_faster | not_significant | gain_short)}],
        + "decision": {"settled", "rounds", "walks", "budget", "rewalked", "defaults" [{"kept", "over",
                        "direction", "difference_tok_s", "half_width_tok_s", "why"}], "said"},
        + "context": {"ctx_per_slot", "prompt_tokens", "output_tokens", "margin", "source", "detail"},
        + "memory": {"model": {"source", "kv_bytes_per_token", "weights_bytes", "compute_bytes", "layers",
                               "kv_arithmetic", "why"} | null, "budget": {"total_bytes", "source",
                               "reserve_bytes", "usable_bytes"} | null},
        + "findings": [str...]   (requests cut short at the context, candidates walked again on resume),
        "candidates": [<candidate>...] (grid order),
        "pareto": [{"candidate", "recommended_concurrency", "throughput_per_node_tok_s",
                    "throughput_per_user_tok_s", "pareto_optimal"}...]}}}

    <candidate> = {"id", "parallel", "batch", "ubatch", "ctx_per_slot", "ctx_size", "flags", "state"
                   (measured | refused | skipped | pruned), "status", "recommended_concurrency",
                   "binding_constraint", "throughput_tok_s", "throughput_ci_tok_s", "starved_at", "rungs",
                   "reason", "dominated_by", "folder", "resumed",
                   + "kv_unified", "kv_bytes" (from the model), "memory_need_bytes", "memory" (the arithmetic),
                   + "readback" ({"total_slots", "n_ctx_slot", "kv_unified", "log", "kv_bytes_model",
                                  "problems", "notes"} | null), "truncated_requests", "window_factor",
                   + "fingerprint", "resume" (why it was walked again, or null)}
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from satbench.core.manifest import write_json_atomic
from satbench.recommender.document import node_index
from satbench.tune.answer import Choice, pareto
from satbench.tune.context import ContextNeed
from satbench.tune.evidence import Decision
from satbench.tune.grid import Candidate
from satbench.tune.memory import Budget, ModelMemory, fit
from satbench.tune.search import Outcome

__all__ = ["SCHEMA", "candidate_entry", "lane_entry", "tuned_document", "tuned_lane"]

SCHEMA = "satbench.tune/v1"


def candidate_entry(o: Outcome, runtime: str, model: ModelMemory | None = None,
                    budget: Budget | None = None) -> dict[str, Any]:
    """One candidate as ``tune.json`` records it; its memory need is told for every candidate, walked or not."""
    c = o.candidate
    memory = o.facts.get("memory")
    if memory is None and model is not None:
        need = fit(c.ctx_size, model, budget)
        memory = {"kv_bytes": need.kv_bytes, "need_bytes": need.need_bytes, "arithmetic": need.arithmetic}
    memory = memory or {}
    return {
        "id": c.id, **c.settings(), "flags": c.flags(runtime), "state": o.state, "status": o.status,
        "recommended_concurrency": o.recommended, "binding_constraint": o.binding,
        "throughput_tok_s": o.throughput_tok_s,
        "throughput_ci_tok_s": None if o.throughput_ci_tok_s is None else list(o.throughput_ci_tok_s),
        "starved_at": list(o.starved_at), "rungs": list(o.rungs), "reason": o.reason,
        "dominated_by": o.dominated_by, "folder": o.folder, "resumed": o.resumed,
        "kv_unified": c.kv_unified, "kv_bytes": memory.get("kv_bytes"), "memory_need_bytes": memory.get("need_bytes"),
        "memory": memory.get("arithmetic"), "readback": o.facts.get("readback"),
        "truncated_requests": o.truncated if o.state == "measured" else None, "window_factor": o.window_factor,
        "fingerprint": o.facts.get("fingerprint"), "resume": o.facts.get("resume"),
    }


def _finite(value: float | None) -> float | None:
    """JSON has no infinity: an interval that could not be told is null."""
    return None if value is None or not math.isfinite(value) else value


def _findings(outcomes: Sequence[Outcome]) -> list[str]:
    out = []
    for o in outcomes:
        if o.state == "measured" and o.truncated:
            said = "; ".join(o.facts.get("truncated_examples") or [])
            out.append(f"{o.candidate.id}: {o.truncated} requests cut short at the slot's context "
                       f"({o.candidate.ctx_per_slot} tokens){': ' + said if said else ''}")
        if o.facts.get("resume"):
            out.append(f"{o.candidate.id}: walked again on resume: {o.facts['resume']}")
    return out


def lane_entry(*, runtime: str, model: str, fingerprint: str, grid: Sequence[Candidate],
               pairs: Sequence[tuple[int, int]], prune: bool, outcomes: Sequence[Outcome],
               choice: Choice, decision: Decision | None = None, context: ContextNeed | None = None,
               memory: ModelMemory | None = None, budget: Budget | None = None) -> dict[str, Any]:
    count = {state: sum(1 for o in outcomes if o.state == state) for state in ("measured", "pruned", "refused",
                                                                            "skipped")}
    w, r = choice.winner, choice.runner_up
    margin = None
    if w is not None and r is not None and choice.margin_tok_s is not None:
        margin = {"tok_s": choice.margin_tok_s,
                  "ratio": choice.margin_tok_s / r.throughput_tok_s if r.throughput_tok_s else None,
                  "uncertainty_tok_s": _finite(choice.margin_uncertainty_tok_s), "significant": choice.significant}
    measured = count["measured"]
    reason = None
    if w is None:
        reason = (f"no feasible candidate: {measured} measured, {count['refused']} refused, "
                  f"{count['skipped']} skipped; none answered with every hard constraint held")
    return {
        "runtime": runtime, "model": model, "fingerprint": fingerprint,
        "status": "ok" if w is not None else "no_feasible_candidate", "reason": reason,
        "grid": {"parallel": sorted({c.parallel for c in grid}), "pairs": [list(p) for p in pairs],
                 "ctx_per_slot": grid[0].ctx_per_slot if grid else None, "size": len(grid), "prune": prune},
        "walked": sum(1 for o in outcomes if o.state in ("measured", "refused") and not o.resumed),
        "pruned": count["pruned"], "refused": count["refused"], "skipped": count["skipped"],
        "resumed": sum(1 for o in outcomes if o.resumed),
        "winner": None if w is None else candidate_entry(w, runtime, memory, budget),
        "flags": None if w is None else w.candidate.flags(runtime),
        "recommended_concurrency": None if w is None else w.recommended,
        "throughput_tok_s": None if w is None else w.throughput_tok_s,
        "runner_up": None if r is None else candidate_entry(r, runtime, memory, budget),
        "margin": margin,
        "comparisons": [c.to_json() for c in choice.comparisons],
        "decision": None if decision is None else decision.to_json(),
        "context": None if context is None else context.to_json(),
        "memory": {"model": None if memory is None else memory.to_json(),
                   "budget": None if budget is None else budget.to_json()},
        "findings": _findings(outcomes),
        "candidates": [candidate_entry(o, runtime, memory, budget) for o in outcomes],
        "pareto": pareto(outcomes),
    }


def tuned_lane(tune_json_lane: dict[str, Any]) -> dict[str, Any]:
    """The ``tuned`` block to put under a lane in the recommendations document, from its ``tune.json`` entry."""
    lane = tune_json_lane
    winner = lane.get("winner") or None
    settings = None if winner is None else {k: int(winner.get(k) or 0) for k in (
        "parallel", "batch", "ubatch", "ctx_per_slot", "ctx_size", "kv_unified")}
    runner = lane.get("runner_up") or None
    return {
        "tuned": {
            "settings": settings,
            "flags": lane.get("flags"),
            "recommended_concurrency": lane.get("recommended_concurrency"),
            "throughput_tok_s": lane.get("throughput_tok_s"),
            "runner_up": None if runner is None else {
                "candidate": runner["id"], "flags": runner["flags"],
                "recommended_concurrency": runner["recommended_concurrency"],
                "throughput_tok_s": runner["throughput_tok_s"]},
            "margin": lane.get("margin"),
            "fingerprint": lane.get("fingerprint"),
            "candidates": [
                {k: c.get(k) for k in ("id", "state", "status", "recommended_concurrency", "binding_constraint",
                                       "throughput_tok_s", "dominated_by", "reason")}
                for c in lane.get("candidates") or []],
        }
    }


def tuned_document(doc: dict[str, Any], tune_dir: Path) -> dict[str, Any] | None:
    """The tune's recommendations document: per tuned lane, its winner's own answer (the winner candidate's
    ``recommendations.json``) with the ``tuned`` block beside it; the same block is written into the winner's
    folder, so ``satbench serve <winner folder>`` serves the tuned answer. None when no lane has a winner."""
    lanes: dict[str, Any] = {}
    labels: dict[str, dict[str, str]] = {}
    base: dict[str, Any] | None = None
    for name, lane in doc["lanes"].items():
        winner = lane.get("winner")
        if not winner:
            continue
        folder = Path(winner["folder"]) if winner.get("folder") else tune_dir / "candidates" / name / str(winner["id"])
        path = folder / "recommendations.json"
        try:
            walked = json.loads(path.read_text(encoding="utf-8"))
            answer = walked["lanes"][name]
        except (OSError, ValueError, KeyError):
            continue
        answer["tuned"] = {"tune_id": doc["tune_id"], **tuned_lane(lane)["tuned"]}
        write_json_atomic(path, walked)
        lanes[name] = answer
        for node, info in (walked.get("nodes") or {}).items():
            labels.setdefault(node, dict((info or {}).get("labels") or {}))
        base = base or walked
    if base is None:
        return None
    if "nodes" in base:  # the index of every tuned lane's node (each winner's walk indexes its own)
        base = {**base, "nodes": node_index(lanes, labels)}
    return {**base, "run_id": doc["tune_id"], "generated_at": doc["generated_at"], "lanes": lanes,
            "notes": [*base.get("notes", []), "satbench tune: each lane's answer is its winning candidate's walk "
                      "(lanes.<lane>.run_id), its settings under lanes.<lane>.tuned"]}
