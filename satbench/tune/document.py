"""``tune.json``: the whole answer of a tune built as its models (``satbench.tune.models``), and ``tuned_block``,
the block a lane's recommendations carry.

Shape (schema ``satbench.tune/v1``; the fields since added are marked +, every earlier one kept; the models
declare them in this order, which is the JSON's)::

    {"schema", "tune_id", "generated_at", "command", "policy",
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
                        "direction", "difference_tok_s", "half_width_tok_s", "why"}], "said",
                       + "unjudged" [str...] (candidates no walk could judge, each with why)},
        + "context": {"ctx_per_slot", "prompt_tokens", "output_tokens", "margin", "source", "detail"},
        + "memory": {"model": {"source", "kv_bytes_per_token", "weights_bytes", "compute_bytes", "layers",
                               "kv_arithmetic", "why"} | null, "budget": {"total_bytes", "source",
                               "reserve_bytes", "usable_bytes"} | null},
        + "findings": [str...]   (requests cut short at the context, candidates walked again on resume),
        "candidates": [<candidate>...] (grid order),
        "pareto": [{"candidate", "recommended_concurrency", "throughput_per_node_tok_s",
                    "throughput_per_user_tok_s", "pareto_optimal"}...]}},
     "notes"}

    <candidate> = {"id", "parallel", "batch", "ubatch", "ctx_per_slot", "ctx_size", + "kv_unified", "flags",
                   "state" (measured | refused | skipped | pruned), "status", "recommended_concurrency",
                   "binding_constraint", "throughput_tok_s", "throughput_ci_tok_s", "starved_at", "rungs",
                   "reason", "dominated_by", "folder", "resumed",
                   + "kv_bytes" (from the model), "memory_need_bytes", "memory" (the arithmetic),
                   + "readback" ({"total_slots", "n_ctx_slot", "log", "kv_unified", "problems", "notes",
                                  "kv_bytes_model" (absent where the model cannot tell)} | null),
                   "truncated_requests", "window_factor", + "fingerprint", "resume" (why it was walked again,
                   or null)}

``tuned_document`` writes each tuned lane's ``tuned`` block (``answer.models.TunedModel``) into its
winner's ``recommendations.json`` and gathers those answers into the tune's own: it validates each winner's
document through ``answer.document.read_document`` (the recommendations document's edge) and, as the
recommender's own store does, holds the models and writes them in their one serialisation
(``answer.document.wire``), so the answer keeps its bytes with ``tuned`` beside them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from satbench.answer.document import node_index, read_document, wire
from satbench.answer.models import LaneModel, RecommendationsDocument, TunedCandidateModel, TunedModel
from satbench.answer.policy import Policy
from satbench.core.manifest import write_json_atomic
from satbench.tune.answer import Choice, Comparison, pareto
from satbench.tune.context import ContextNeed
from satbench.tune.evidence import Decision
from satbench.tune.grid import Candidate
from satbench.tune.memory import Budget, ModelMemory, fit
from satbench.tune.models import (
    SCHEMA,
    ComparisonModel,
    ContextModel,
    DecisionModel,
    LaneMemory,
    Margin,
    MemoryBudget,
    MemoryFacts,
    MemoryNeed,
    TuneCandidate,
    TuneDocument,
    TuneGrid,
    TuneLane,
)
from satbench.tune.search import Outcome

__all__ = ["NOTES", "SCHEMA", "candidate_entry", "lane_entry", "tune_document", "tuned_block", "tuned_document"]

NOTES = ("default grid: batch = ubatch for each candidate (the decode pause is set by -b)",
         "every candidate's -np, -c, -b, -ub and KV layout are set by the tune and read back after its start "
         "(/props and the server's log); llamacpp candidates run with --fit off")

def candidate_entry(o: Outcome, runtime: str, model: ModelMemory | None = None,
                    budget: Budget | None = None) -> TuneCandidate:
    """One candidate as ``tune.json`` records it; its memory need is told for every candidate, walked or not.
    ``o.facts`` is what the walk recorded (``WalkFacts``: memory, read-back, fingerprint, resume)."""
    c = o.candidate
    facts = o.facts
    memory = facts.memory
    if memory is None and model is not None:
        need = fit(c.ctx_size, model, budget)
        memory = MemoryNeed(kv_bytes=need.kv_bytes, need_bytes=need.need_bytes, arithmetic=need.arithmetic)
    return TuneCandidate(
        id=c.id, parallel=c.parallel, batch=c.batch, ubatch=c.ubatch, ctx_per_slot=c.ctx_per_slot,
        ctx_size=c.ctx_size, kv_unified=c.kv_unified, flags=c.flags(runtime), state=o.state,
        status=o.status, recommended_concurrency=o.recommended, binding_constraint=o.binding,
        throughput_tok_s=o.throughput_tok_s, throughput_ci_tok_s=o.throughput_ci_tok_s,
        starved_at=list(o.starved_at), rungs=list(o.rungs), reason=o.reason, dominated_by=o.dominated_by,
        folder=o.folder, resumed=o.resumed, kv_bytes=None if memory is None else memory.kv_bytes,
        memory_need_bytes=None if memory is None else memory.need_bytes,
        memory=None if memory is None else memory.arithmetic, readback=facts.readback,
        truncated_requests=o.truncated if o.state == "measured" else None, window_factor=o.window_factor,
        fingerprint=facts.fingerprint, resume=facts.resume)


def _finite(value: float | None) -> float | None:
    """JSON has no infinity: an interval that could not be told is null."""
    return None if value is None or not math.isfinite(value) else value


def _comparison(c: Comparison) -> ComparisonModel:
    return ComparisonModel(challenger=c.challenger, holder=c.holder, difference_tok_s=c.difference_tok_s,
                           half_width_tok_s=_finite(c.half_width_tok_s), significant=c.significant,
                           gain_per_doubling=_finite(c.gain_per_doubling), verdict=c.verdict)


def _decision(d: Decision) -> DecisionModel:
    return DecisionModel(settled=d.settled, rounds=d.rounds, walks=d.walks, budget=d.budget,
                         rewalked=list(d.rewalked), defaults=list(d.defaults), said=d.said(),
                         unjudged=list(d.unjudged))


def _context(n: ContextNeed) -> ContextModel:
    return ContextModel(ctx_per_slot=n.ctx_per_slot, prompt_tokens=n.prompt_tokens, output_tokens=n.output_tokens,
                        margin=n.margin, source=n.source, detail=n.detail)


def _memory(model: ModelMemory | None, budget: Budget | None) -> LaneMemory:
    facts = None if model is None else MemoryFacts(
        source=model.source, kv_bytes_per_token=model.kv_bytes_per_token, weights_bytes=model.weights_bytes,
        compute_bytes=model.compute_bytes, layers=model.layers, kv_arithmetic=model.kv_arithmetic, why=model.why)
    told = None if budget is None else MemoryBudget(total_bytes=budget.total_bytes, source=budget.source,
                                                    reserve_bytes=budget.reserve_bytes,
                                                    usable_bytes=budget.usable_bytes)
    return LaneMemory(model=facts, budget=told)


def _findings(outcomes: Sequence[Outcome]) -> list[str]:
    out = []
    for o in outcomes:
        facts = o.facts
        if o.state == "measured" and o.truncated:
            said = "; ".join(facts.truncated_examples)
            out.append(f"{o.candidate.id}: {o.truncated} requests cut short at the slot's context "
                       f"({o.candidate.ctx_per_slot} tokens){': ' + said if said else ''}")
        if facts.resume:
            out.append(f"{o.candidate.id}: walked again on resume: {facts.resume}")
    return out


def lane_entry(*, runtime: str, model: str | None, fingerprint: str, grid: Sequence[Candidate],
               pairs: Sequence[tuple[int, int]], prune: bool, outcomes: Sequence[Outcome],
               choice: Choice, decision: Decision | None = None, context: ContextNeed | None = None,
               memory: ModelMemory | None = None, budget: Budget | None = None) -> TuneLane:
    measured, pruned, refused, skipped = (sum(1 for o in outcomes if o.state == state)
                                          for state in ("measured", "pruned", "refused", "skipped"))
    w, r = choice.winner, choice.runner_up
    margin = None
    if w is not None and r is not None and choice.margin_tok_s is not None:
        margin = Margin(tok_s=choice.margin_tok_s,
                        ratio=choice.margin_tok_s / r.throughput_tok_s if r.throughput_tok_s else None,
                        uncertainty_tok_s=_finite(choice.margin_uncertainty_tok_s), significant=choice.significant)
    reason = None
    if w is None:
        reason = (f"no feasible candidate: {measured} measured, {refused} refused, {skipped} skipped; none answered "
                  "with every hard constraint held")
    return TuneLane(
        runtime=runtime, model=model, fingerprint=fingerprint,
        status="ok" if w is not None else "no_feasible_candidate", reason=reason,
        grid=TuneGrid(parallel=sorted({c.parallel for c in grid}), pairs=list(pairs),
                      ctx_per_slot=grid[0].ctx_per_slot if grid else None, size=len(grid), prune=prune),
        walked=sum(1 for o in outcomes if o.state in ("measured", "refused") and not o.resumed),
        pruned=pruned, refused=refused, skipped=skipped,
        resumed=sum(1 for o in outcomes if o.resumed),
        winner=None if w is None else candidate_entry(w, runtime, memory, budget),
        flags=None if w is None else w.candidate.flags(runtime),
        recommended_concurrency=None if w is None else w.recommended,
        throughput_tok_s=None if w is None else w.throughput_tok_s,
        runner_up=None if r is None else candidate_entry(r, runtime, memory, budget),
        margin=margin,
        comparisons=[_comparison(c) for c in choice.comparisons],
        decision=None if decision is None else _decision(decision),
        context=None if context is None else _context(context),
        memory=_memory(memory, budget),
        findings=_findings(outcomes),
        candidates=[candidate_entry(o, runtime, memory, budget) for o in outcomes],
        pareto=pareto(outcomes),
    )


def tune_document(*, tune_id: str, generated_at: str, command: Sequence[str], policy: Policy,
                  lanes: Mapping[str, TuneLane]) -> TuneDocument:
    """The whole ``tune.json`` (its JSON: ``TuneDocument.to_json``)."""
    return TuneDocument(schema=SCHEMA, tune_id=tune_id, generated_at=generated_at, command=list(command),
                        policy=policy, lanes=dict(lanes), notes=list(NOTES))


def tuned_block(lane: TuneLane, tune_id: str) -> TunedModel | None:
    """The ``tuned`` block to put under a lane in the recommendations document (``TunedModel``), from its
    ``tune.json`` entry; None where the lane has no winner."""
    w, r = lane.winner, lane.runner_up
    if w is None:
        return None
    return TunedModel(
        tune_id=tune_id, fingerprint=lane.fingerprint,
        settings={"parallel": w.parallel, "batch": w.batch, "ubatch": w.ubatch, "ctx_per_slot": w.ctx_per_slot,
                  "ctx_size": w.ctx_size, "kv_unified": int(w.kv_unified)},
        flags=lane.flags, recommended_concurrency=lane.recommended_concurrency,
        throughput_tok_s=lane.throughput_tok_s,
        runner_up=None if r is None else {"candidate": r.id, "flags": r.flags,
                                          "recommended_concurrency": r.recommended_concurrency,
                                          "throughput_tok_s": r.throughput_tok_s},
        margin=None if lane.margin is None else lane.margin.model_dump(mode="json"),
        candidates=[TunedCandidateModel(id=c.id, state=c.state, status=c.status,
                                        recommended_concurrency=c.recommended_concurrency,
                                        binding_constraint=c.binding_constraint, throughput_tok_s=c.throughput_tok_s,
                                        dominated_by=c.dominated_by, reason=c.reason) for c in lane.candidates])


def tuned_document(doc: TuneDocument, tune_dir: Path) -> dict[str, Any] | None:
    """The tune's recommendations document: per tuned lane, its winner's own answer (the winner candidate's
    ``recommendations.json``) with the ``tuned`` block beside it; the same block is written into the winner's
    folder, so ``satbench serve <winner folder>`` serves the tuned answer. None when no lane has a winner.
    A winner's document that is missing or does not validate (``read_document``) leaves its lane out."""
    lanes: dict[str, LaneModel] = {}
    labels: dict[str, dict[str, str]] = {}
    base: RecommendationsDocument | None = None
    for name, lane in doc.lanes.items():
        block = tuned_block(lane, doc.tune_id)
        winner = lane.winner
        if block is None or winner is None:
            continue
        folder = Path(winner.folder) if winner.folder else tune_dir / "candidates" / name / winner.id
        path = folder / "recommendations.json"
        try:
            walked = read_document(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue
        answer = walked.lanes.get(name)
        if answer is None:
            continue
        answer = answer.model_copy(update={"tuned": block})
        write_json_atomic(path, wire(walked.model_copy(update={"lanes": {**walked.lanes, name: answer}})))
        lanes[name] = answer
        for node, info in walked.nodes.items():
            labels.setdefault(node, dict(info.labels))
        if base is None:
            base = walked
    if base is None:
        return None
    # the index of every tuned lane's node (each winner's walk indexes its own)
    return wire(base.model_copy(update={
        "run_id": doc.tune_id, "generated_at": doc.generated_at, "nodes": node_index(lanes, labels), "lanes": lanes,
        "notes": [*base.notes, "satbench tune: each lane's answer is its winning candidate's walk "
                  "(lanes.<lane>.run_id), its settings under lanes.<lane>.tuned"]}))
