"""``satbench compare A B [--threshold 5%] [--confidence 0.95] [--lane KEY ...]``: what changed from A to B.

A and B are each a run folder (its ``recommendations.json``), a recommendations document (a file), or a
recommender's URL (its served document). Per lane both answer: the answer and its status, then at one rung
(A's answer where B measured it) the output throughput and the latency quantiles, each with its relative
change and whether it is significant (``satbench.compare.judge``), and the checks that now flag or clear.
The last line is the verdict: ``no significant change``, or each regression with its figure.

Exit status: 0 no significant regression beyond the threshold, 1 some (each named), 2 bad input (a path
that holds no document, a threshold out of range), in one line.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from satbench.recommender.models import RecommendationsDocument

__all__ = ["configure", "load_document", "main", "parse_threshold", "render"]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("a", metavar="A", help="the run before: a run folder, a recommendations.json, or a "
                                               "recommender's URL")
    parser.add_argument("b", metavar="B", help="the run after, the same kinds")
    parser.add_argument("--threshold", default="5%", help="a regression must be worse by more than this, relative "
                                                          "(5%% or 0.05; default 5%%)")
    parser.add_argument("--confidence", type=float, default=None,
                        help="the confidence of the whole comparison (default: A's policy's, else 0.95)")
    parser.add_argument("--lane", action="append", default=[], metavar="KEY", help="compare only these lanes")


def parse_threshold(text: str) -> float:
    try:
        value = float(text[:-1]) / 100 if text.strip().endswith("%") else float(text)
    except ValueError:
        raise ValueError(f"--threshold {text!r}: a fraction (0.05) or a percentage (5%)") from None
    if not 0 <= value < 1:
        raise ValueError(f"--threshold {text}: between 0 and 100 %")
    return value


def load_document(where: str) -> RecommendationsDocument:
    """The document at ``where`` (module docstring), validated (a v1 one said in v2); ``ValueError`` in one
    line naming it."""
    from satbench.recommender.document import read_document

    if where.startswith(("http://", "https://")):
        from satbench.fleet.remeasure import read_document as fetch_document

        try:
            return read_document(fetch_document(where))
        except ValueError as exc:
            raise ValueError(str(exc).replace("--remeasure", "compare", 1)) from None
    path = Path(where)
    if path.is_dir():
        path = path / "recommendations.json"
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{where}: no recommendations document there (a run folder's recommendations.json, a "
                         "document file, or a recommender's URL)") from None
    except (OSError, ValueError) as exc:
        raise ValueError(f"{where}: cannot read {path}: {exc}") from None
    try:
        return read_document(body)
    except ValueError as exc:
        raise ValueError(f"{where}: {path}: {exc}") from None


def render(comparison: Any) -> list[str]:
    from satbench.compare.judge import describe

    alpha = comparison.alpha
    lines = [f"comparing {len(comparison.lanes)} lanes: a regression is worse by more than "
             f"{comparison.threshold:.0%} and significant at {comparison.confidence:.0%} over "
             f"{comparison.tests} tests (each at p < {alpha:.2g})"]
    for lane in comparison.lanes:
        answer = f"{lane.answer_a} -> {lane.answer_b}" if lane.answer_a != lane.answer_b else f"{lane.answer_a}"
        lines.append(f"lane {lane.key}: recommended concurrency {answer} ({lane.status_a} -> {lane.status_b})")
        for change in lane.changes:
            if change.p_value is None:
                said = "not judged"
            elif change.significant(alpha):
                said = "significant" + (" regression" if change.regression(comparison.threshold, alpha) else "")
            else:
                said = "not significant"
            lines.append(f"  {describe(change, lane.rung)}: {said}")
        lines += [f"  {check}: now flagged" for check in lane.flagged]
        lines += [f"  {check}: no longer flagged" for check in lane.cleared]
        lines += [f"  {note}" for note in lane.notes]
    lines += [f"lane {key}: only in A" for key in comparison.only_a]
    lines += [f"lane {key}: only in B" for key in comparison.only_b]
    regressions = comparison.regressions()
    if regressions:
        lines.append(f"regression ({len(regressions)}):")
        lines += [f"  {line}" for line in regressions]
    else:
        lines.append("no significant change")
    return lines


def main(args: argparse.Namespace) -> int:
    from satbench.compare.judge import compare_documents

    try:
        threshold = parse_threshold(args.threshold)
        if args.confidence is not None and not 0 < args.confidence < 1:
            raise ValueError(f"--confidence {args.confidence}: between 0 and 1")
        doc_a, doc_b = load_document(args.a), load_document(args.b)
    except ValueError as exc:
        print(f"satbench compare: {exc}", file=sys.stderr)
        return 2
    comparison = compare_documents(doc_a, doc_b, threshold=threshold, confidence=args.confidence,
                                   lanes=args.lane)
    for line in render(comparison):
        print(line)
    return 1 if comparison.regressions() else 0
