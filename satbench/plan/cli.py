"""``satbench plan (--rate RPS | --users N) [--file PATH | --url URL] [--model LANE] [--format text|json]``:
how many nodes of each kind meet a target within the objectives (``satbench.plan.planner``).

The fleet's answers come from a saved recommendations document (``--file``: the file, or the run folder holding
``recommendations.json``) or a recommender (``--url``: its served v2 document), validated once at that edge.

Exit status: 0 every model lane planned has a plan; 1 some lane (or the one ``--model`` names) has no usable
answer, or the recommender could not be read (each said in one line); 2 bad input, in one line naming the
setting, and nothing printed on standard output.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from datetime import UTC, datetime
from pathlib import Path

from satbench.answer.models import RecommendationsDocument
from satbench.plan.answers import Target
from satbench.plan.planner import KindPlan, LanePlan, Plan

__all__ = ["FORMATS", "configure", "main", "parse_target", "render"]

FORMATS = ("text", "json")
DEFAULT_URL = "http://127.0.0.1:9108"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rate", default=None, metavar="RPS",
                        help="the target: requests/s of the measured workload, open loop")
    parser.add_argument("--users", default=None, metavar="N",
                        help="the target: concurrent users or sessions, closed loop")
    parser.add_argument("--file", type=Path, default=None, metavar="PATH",
                        help="a saved recommendations.json, or the run folder holding it, instead of --url")
    parser.add_argument("--url", default=None, help=f"a recommender's base URL (default {DEFAULT_URL})")
    parser.add_argument("--model", action="append", default=[], metavar="LANE",
                        help="plan only this model lane (its name across the nodes, e.g. dense); repeatable")
    parser.add_argument("--format", default="text", metavar="FORMAT", help="text (default) or json")
    parser.add_argument("--unchecked", action="store_true",
                        help="also plan from answers nobody compared with their live node (validity unknown)")
    parser.add_argument("--timeout", default="5", metavar="S", help="seconds to wait for the recommender")


def _positive(text: str, flag: str, *, whole: bool) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0 or (whole and value != int(value)):
        kind = "a whole number of users above 0" if whole else "a number above 0"
        raise ValueError(f"{flag} {text!r}: {kind}")
    return value


def parse_target(rate: str | None, users: str | None) -> tuple[Target, float]:
    """``("rate", R)`` or ``("users", U)`` from the flags; ``ValueError`` in one line naming the flag."""
    if (rate is None) == (users is None):
        raise ValueError("the target: give one of --rate RPS or --users N" if rate is None else
                         "the target: --rate and --users are two targets; give one")
    if rate is not None:
        return "rate", _positive(rate, "--rate", whole=False)
    assert users is not None
    return "users", _positive(users, "--users", whole=True)


def _load(args: argparse.Namespace) -> RecommendationsDocument:
    """The document, validated; ``ValueError`` (bad input, exit 2) or ``OSError`` (no answer there, exit 1)."""
    from satbench.answer.document import read_document

    if args.file is not None:
        path = args.file / "recommendations.json" if args.file.is_dir() else args.file
        try:
            body = json.loads(path.read_text(encoding="utf-8"))
            return read_document(body)
        except (OSError, ValueError) as exc:
            raise ValueError(f"--file {args.file}: {' '.join(str(exc).split())[:300]}") from None
    from satbench.core.config_files import check_http_url
    from satbench.fleet.remeasure import read_document as fetch_document

    url = args.url or DEFAULT_URL
    try:
        url = check_http_url(url)
    except ValueError as exc:
        raise ValueError(f"--url {exc}") from None
    timeout = _positive(args.timeout, "--timeout", whole=False)
    try:
        return read_document(fetch_document(url, timeout_s=timeout))
    except ValueError as exc:
        raise OSError(str(exc).replace("--remeasure", "--url", 1)) from None


def _kind_lines(plan: Plan, kind: KindPlan, cheapest: bool) -> list[str]:
    unit = plan.unit
    slots = "" if kind.slots is None else f", -np {kind.slots}"
    cap = "" if kind.concurrency is None else f", at most {kind.concurrency} in flight per node"
    lines = [f"  kind {kind.kind} ({kind.said}){' [cheapest]' if cheapest else ''}: {kind.nodes} nodes{slots}, "
             f"{kind.load_per_node:.4g} {unit} each{cap}; the fleet answers for {kind.nodes_in_fleet}",
             f"    margin: each node's conservative figure {kind.per_node:.4g} {unit} is {kind.headroom:+.0%} over "
             f"its share; the point answers alone would need {kind.nodes_at_point}",
             f"    one fewer: {kind.one_fewer}"]
    for a in kind.answers:
        age = "age unknown" if a.age_s is None else f"{a.age_s:.0f} s old"
        above = "fails above" if plan.target == "rate" else "its walk stopped at"
        upper = "" if a.upper is None else f", {above} {a.upper:.4g}"
        lines.append(f"    rests on {a.key}: run {a.run_id}, measured {a.measured_at or 'at an unknown time'} ({age}), "
                     f"validity {a.validity}, {a.status}: {a.point:.4g}{upper}; planned at {a.per_node:.4g} "
                     f"({a.basis})")
    return lines


def _lane_lines(plan: Plan, lane: LanePlan) -> list[str]:
    lines = [f"lane {lane.lane}:" + ("" if lane.kinds else " no usable answer, no plan")]
    for kind in lane.kinds:
        lines += _kind_lines(plan, kind, kind.kind == lane.cheapest and len(lane.kinds) > 1)
    lines += [f"  not used: {n.key}: {n.why}" for n in lane.not_used]
    return lines


def render(plan: Plan) -> list[str]:
    """The plan in words, one model lane after another (module docstring)."""
    said = ", ".join(f"{k.removesuffix('_s')} {v:g} s" for k, v in plan.objectives.items() if v is not None)
    lines = [f"plan for {plan.amount:g} {plan.unit} from run {plan.run_id} ({plan.generated_at}): "
             f"{plan.attainment_target:.0%} of requests within {said or 'the objectives'}"]
    for lane in plan.lanes:
        lines += _lane_lines(plan, lane)
    return lines


def main(args: argparse.Namespace) -> int:
    from satbench.plan.planner import lane_names, plan

    try:
        if args.format not in FORMATS:
            raise ValueError(f"--format {args.format!r}: one of {', '.join(FORMATS)}")
        if args.file is not None and args.url is not None:
            raise ValueError("--file and --url: give one source of answers")
        target, amount = parse_target(args.rate, args.users)
        document = _load(args)
        names = lane_names(document)
        if not names:
            raise OSError("the document answers for no lane")
        missing = [m for m in args.model if m not in names]
        if missing:
            raise ValueError(f"--model {missing[0]}: no such lane in the document (lanes: "
                             f"{', '.join(names) or 'none'})")
    except ValueError as exc:
        print(f"satbench plan: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"satbench plan: no answers: {' '.join(str(exc).split())}", file=sys.stderr)
        return 1
    result = plan(document, target, amount, lanes=list(dict.fromkeys(args.model)) or None,
                  unchecked=args.unchecked, now=datetime.now(UTC))
    empty = [lane for lane in result.lanes if not lane.kinds]
    if len(empty) == len(result.lanes):
        why = "; ".join(f"{n.key}: {n.why}" for lane in empty for n in lane.not_used) or "no lanes"
        print(f"satbench plan: lane {', '.join(lane.lane for lane in empty)}: no usable answer ({why})",
              file=sys.stderr)
        return 1
    print(result.model_dump_json(indent=2) if args.format == "json" else "\n".join(render(result)))
    for lane in empty:
        print(f"satbench plan: lane {lane.lane}: no usable answer, no plan", file=sys.stderr)
    return 1 if empty else 0
