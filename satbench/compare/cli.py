"""``satbench compare A B [--a A2 ...] [--b B2 ...] [--floor FIGURE=REL[,ABS]] [--allow workload,policy,ladder]``:
what changed from A to B, and the gate's verdict.

A and B are each a run folder (its ``recommendations.json``, and its ``records.jsonl`` for exact tails), a
recommendations document (a file), or a recommender's URL (its served document). ``--a``/``--b`` add repeated
runs of a side, pooled (``satbench.compare.judge``). The first line is the verdict with what changed in the
deployment and the figure that decided it, with its interval; then per lane the answers with their intervals
and, at one rung, each figure with its change, its interval, its test and the test's power; the last line
lists each failing figure.

Floors (``--floor``): ``throughput``, ``ttft``, ``e2e``, ``pause_excess``, ``answer``, each a relative floor
(``10%`` or ``0.1``) and optionally an absolute one in the figure's unit (``ms`` for latencies, tok/s for
throughput): ``--floor ttft=10%,5ms``. ``--threshold`` sets one relative floor for every figure.

Exit status: 0 PASS, 1 FAIL (each failing figure named), 3 INCONCLUSIVE (a figure worse beyond its floor the
runs cannot show significant, or nothing compared), 2 bad input or runs that differ in more than the
deployment (workload, policy, ladder; ``--allow`` names a difference that is the point), in one line.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from satbench.compare.runs import load_document

if TYPE_CHECKING:
    from satbench.compare.judge import Comparison, Floor

__all__ = ["EXIT", "configure", "load_document", "main", "parse_floor", "parse_threshold", "render"]

EXIT = {"PASS": 0, "FAIL": 1, "INCONCLUSIVE": 3}


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("a", metavar="A", help="the run before: a run folder, a recommendations.json, or a "
                                               "recommender's URL")
    parser.add_argument("b", metavar="B", help="the run after, the same kinds")
    parser.add_argument("--a", dest="more_a", action="append", default=[], metavar="RUN",
                        help="another run of A's deployment, pooled with A (repeatable)")
    parser.add_argument("--b", dest="more_b", action="append", default=[], metavar="RUN",
                        help="another run of B's deployment, pooled with B (repeatable)")
    parser.add_argument("--threshold", default=None,
                        help="one relative floor for every figure (5%% or 0.05); default: each figure's own")
    parser.add_argument("--floor", action="append", default=[], metavar="FIGURE=REL[,ABS]",
                        help="a figure's floor: throughput, ttft, e2e, pause_excess or answer, e.g. ttft=10%%,5ms")
    parser.add_argument("--allow", default="", metavar="DIFF[,DIFF]",
                        help="differences that are the point of the comparison: workload, policy, ladder")
    parser.add_argument("--confidence", type=float, default=None,
                        help="the confidence of the whole comparison (default: A's policy's, else 0.95)")
    parser.add_argument("--lane", action="append", default=[], metavar="KEY", help="compare only these lanes")


def _fraction(text: str, what: str) -> float:
    try:
        value = float(text[:-1]) / 100 if text.strip().endswith("%") else float(text)
    except ValueError:
        raise ValueError(f"{what} {text!r}: a fraction (0.05) or a percentage (5%)") from None
    if not 0 <= value < 1:
        raise ValueError(f"{what} {text}: between 0 and 100 %")
    return value


def parse_threshold(text: str) -> float:
    return _fraction(text, "--threshold")


def parse_floor(text: str) -> tuple[str, Floor]:
    """``FIGURE=REL[,ABS]`` (module docstring) as ``(figure, Floor)``; ``ValueError`` naming the setting."""
    from satbench.compare.judge import DEFAULT_FLOORS, Floor

    name, _, value = text.partition("=")
    name = name.strip()
    if name not in DEFAULT_FLOORS or not value:
        raise ValueError(f"--floor {text!r}: FIGURE=REL[,ABS] with FIGURE one of {', '.join(DEFAULT_FLOORS)}")
    rel, _, absolute = value.partition(",")
    relative = _fraction(rel, f"--floor {name}")
    amount = DEFAULT_FLOORS[name].absolute
    if absolute:
        try:
            amount = float(absolute.strip().removesuffix("ms").removesuffix("tok/s"))
        except ValueError:
            raise ValueError(f"--floor {text!r}: the absolute floor is a number in the figure's unit") from None
        if amount < 0:
            raise ValueError(f"--floor {text!r}: the absolute floor is not negative")
    return name, Floor(relative, amount)


def parse_allow(text: str) -> tuple[str, ...]:
    from satbench.compare.comparable import DIFFERENCES

    names = tuple(n.strip() for n in text.split(",") if n.strip())
    bad = [n for n in names if n not in DIFFERENCES]
    if bad:
        raise ValueError(f"--allow {bad[0]}: one of {', '.join(DIFFERENCES)}")
    return names


def render(comparison: Comparison) -> list[str]:
    from satbench.compare.judge import describe

    alpha = comparison.alpha
    runs = comparison.runs
    pooled = "" if runs == (1, 1) else f" ({runs[0]} runs of A pooled, {runs[1]} of B)"
    lines = [comparison.headline(),
             f"comparing {len(comparison.lanes)} lanes{pooled}: a figure fails where it is worse beyond its floor "
             f"and significant at {comparison.confidence:.0%} over {comparison.tests} tests (each at p < {alpha:.2g})"]
    powers = [p for lane in comparison.lanes for c in lane.changes if (p := c.power(alpha)) is not None]
    if powers:
        lines.append(f"the tail tests could see B's p95 at A's p90 with power {min(powers):.2f} at least "
                     "(a PASS rules out little where it is low)")
    lines += [f"allowed: {name} differs ({what})" for name, what in comparison.allowed]
    for lane in comparison.lanes:
        if lane.concurrency is not None:
            a, b = lane.concurrency
            lines.append(f"lane {lane.key}: recommended concurrency {a} -> {b}")
        if lane.rate is not None:
            lines.append(f"  rate answer {lane.rate[0]} -> {lane.rate[1]} requests/s")
        if lane.deployment:
            lines.append(f"  deployment: {lane.deployment}")
        for change in lane.changes:
            if not change.judged or change.p_value is None:
                said = "reported, not judged" if not change.judged else "not judged"
            elif change.regression(alpha):
                said = "FAIL"
            elif change.unsettled(alpha):
                said = "unsettled (worse beyond its floor, not significant)"
            elif change.significant(alpha) and change.worse:
                said = f"significant, within the floor ({change.floor.relative:.0%}, {change.floor.absolute:g})"
            else:
                said = "not significant" if change.worse or change.relative is None else "not worse"
            power = change.power(alpha)
            extra = "" if power is None else f"; power {power:.2f} to see B's p95 at A's p90"
            lines.append(f"  {describe(change, lane.rung)}{extra}: {said}")
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
        lines.append("no regression beyond its floor")
    return lines


def main(args: argparse.Namespace) -> int:
    from satbench.compare.comparable import NotComparable
    from satbench.compare.judge import compare_runs
    from satbench.compare.runs import load_run

    try:
        threshold = parse_threshold(args.threshold) if args.threshold is not None else None
        floors = dict(parse_floor(text) for text in args.floor)
        allow = parse_allow(args.allow)
        if args.confidence is not None and not 0 < args.confidence < 1:
            raise ValueError(f"--confidence {args.confidence}: between 0 and 1")
        loaded_a = [load_run(w) for w in (args.a, *args.more_a)]
        loaded_b = [load_run(w) for w in (args.b, *args.more_b)]
        comparison = compare_runs([x.run for x in loaded_a], [x.run for x in loaded_b], threshold=threshold,
                                  floors=floors, confidence=args.confidence, lanes=args.lane, allow=allow)
    except (NotComparable, ValueError) as exc:
        print(f"satbench compare: {exc}", file=sys.stderr)
        return 2
    for line in render(comparison):
        print(line)
    for x in (*loaded_a, *loaded_b):
        if x.note:
            print(f"note: {x.note}")
    return EXIT[comparison.verdict]
