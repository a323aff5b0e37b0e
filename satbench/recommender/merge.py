"""Answers of several analysed runs merged into one document (``recommender.store``'s current document, and a
fleet run's shards together): each lane's chosen answer, an answer saying so for each lane of a fleet's shard
that has not reported (``recommender.fleet_runs``), the node index with every node's labels, the fleets'
``shards`` and their notes. Pure: models in, a model out."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from satbench.answer.document import SCHEMA_ID, node_index
from satbench.answer.models import LaneModel, RecommendationsDocument
from satbench.recommender.fleet_runs import FleetRun, missing_answers

__all__ = ["merged_document", "node_labels"]


def node_labels(document: RecommendationsDocument) -> dict[str, dict[str, str]]:
    """Each node's labels, as ``document`` says them: a v1 document (read in v2) indexes no labels, so it says
    none rather than empty ones over another run's."""
    if document.schema_read != SCHEMA_ID:
        return {}
    return {node: dict(info.labels) for node, info in document.nodes.items()}


def merged_document(base: RecommendationsDocument, documents: Iterable[RecommendationsDocument],
                    lanes: Mapping[str, LaneModel], runs: list[FleetRun], *, notes: Iterable[str] = (),
                    **update: Any) -> RecommendationsDocument:
    """``base`` (its policy, its notes first) answering ``lanes`` (each lane key's chosen answer), with the labels
    ``documents`` give their nodes, the gaps of the fleet ``runs`` said, ``notes`` after the fleets' own, and
    ``update`` (other fields, as ``run_id``)."""
    labels: dict[str, dict[str, str]] = {}
    for document in documents:
        labels.update(node_labels(document))
    answers = dict(lanes)
    answers.update(missing_answers(runs, answers, base.policy))
    said = [*base.notes, *(n for r in runs if (n := r.note())), *notes]
    change: dict[str, Any] = {**update, "lanes": {key: answers[key] for key in sorted(answers)},
                              "nodes": node_index(answers, labels)}
    if runs:
        change["shards"] = {r.run_id: r.summary() for r in runs}
    if said != base.notes:
        change["notes"] = said
    return base.model_copy(update=change)
