"""One draw measured (its truths beside satbench's answers) and the datasheet's table over many draws.

``measure_draw(cond, answers)`` computes, for each answer asked (``concurrency``, ``rate``, ``trace``), the truth
(``testkit.accuracy.truth``) and satbench's answer (``testkit.accuracy.answers``) with its status and stated
intervals, and the truth each interval is meant to hold: the true gain per doubling between two measured rungs
(the concurrency answer's gain intervals), the long-run attainment at each rate rung (its attainment interval),
the rate and factor truths (the answers' brackets). It returns plain JSON, the bench's file, one entry a draw.

``table(draws)`` scores them per answer (``Score``), as the acceptance reads them:

- the relative error of every answer with a value where the truth is positive (median, p90, max of its size);
  for concurrency also the rungs off (``log2`` of answer over truth);
- settled answers on target: within +-10 % of the truth (concurrency: on the truth's rung; a truth of none
  answered none counts as on target), and settled answers off by more than 20 % (or a rung);
- answers not settled (undecided, unsaturated, a lower bound): how many doublings off they are (concurrency:
  rungs of the ladder, none the rung below c=1, so c=1 undecided where the truth is none is one rung off, as
  "the answer may be one doubling high" says of it);
- each stated interval's coverage of its truth, at the nominal 95 % the project states.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from testkit.accuracy import answers
from testkit.accuracy.space import Condition
from testkit.accuracy.traffic import trace_rows
from testkit.accuracy.truth import (
    Rules,
    concurrency_margin,
    stall_limit,
    trace_attainment,
    true_attainment,
    true_capacity,
    true_concurrency,
    true_factor,
    true_gain,
    true_rate,
    true_rungs,
)

__all__ = ["ANSWERS", "Score", "bucket", "measure_draw", "render", "render_buckets", "table"]

ANSWERS = ("concurrency", "rate", "trace")
PAUSE_S = Rules().pause_s
FAR_MARGIN = 0.20  # a truth this far from every threshold is far from any decision boundary


def _answer_json(a: answers.Answer) -> dict[str, Any]:
    return {"answer": a.value, "status": a.status, "interval": None if a.interval is None else list(a.interval),
            "reason": a.reason, "rungs_measured": a.rungs, "window_s": round(a.window_s, 1), **a.extra}


def measure_draw(cond: Condition, asked: Sequence[str] = ANSWERS, rules: Rules | None = None) -> dict[str, Any]:
    """The truths and satbench's answers of one draw (module docstring), as JSON."""
    rules = Rules() if rules is None else rules
    out: dict[str, Any] = {"draw": cond.name, "index": cond.index, "condition": cond.summary()}
    t0 = time.perf_counter()
    ladder = answers.concurrency_answer(cond, rules)  # the rate and trace searches start from its capacity
    measured_s = time.perf_counter() - t0
    if "concurrency" in asked:
        t1 = time.perf_counter()
        rungs = true_rungs(cond, rules)
        truth = true_concurrency(rungs, cond, rules)
        gains = {}
        for pair in ladder.answer.extra["gain_intervals"]:
            low, high = (int(x) for x in pair.split("-"))
            g = true_gain(rungs, low, high)
            if g is not None:
                gains[pair] = g
        out["concurrency"] = {"truth": truth, **_answer_json(ladder.answer), "true_gains": gains,
                              "margin": concurrency_margin(rungs, cond, rules),
                              "truth_rungs": [{"c": r.concurrency, "tok_s": r.throughput_tok_s,
                                               "ttft_share": r.ttft_share, "itl_p95_s": r.itl_p95_s,
                                               "pause_p99_s": r.pause_p99_s,
                                               "pause_over_share": r.pause_over_share} for r in rungs],
                              "share_bounds": answers.share_bounds(ladder.figures, cond,
                                                                   stall_limit(cond, rules)),
                              "seconds": {"truth": time.perf_counter() - t1, "answer": measured_s}}
    if "rate" in asked:
        t1 = time.perf_counter()
        capacity = true_capacity(cond, rules)
        truth_rate = true_rate(cond, capacity, rules)
        t2 = time.perf_counter()
        rate = answers.rate_search(cond, rules, ladder.figures)
        t3 = time.perf_counter()
        points = rate.extra.get("points", [])
        for p in points:
            p["true_attainment"] = true_attainment(cond, p["rate_rps"], rules)
        out["rate"] = {"truth": truth_rate, "capacity_rps": capacity, **_answer_json(rate),
                       "seconds": {"truth": t2 - t1 + time.perf_counter() - t3, "answer": t3 - t2 + measured_s}}
    if "trace" in asked:
        rows = trace_rows(cond)
        t1 = time.perf_counter()
        truth_factor = true_factor(cond, rows, rules)
        t2 = time.perf_counter()
        factor = answers.trace_search(cond, rules, ladder.figures, rows)
        t3 = time.perf_counter()
        for p in factor.extra.get("points", []):
            p["true_attainment"] = trace_attainment(cond, rows, p["speed_factor"], rules)
        out["trace"] = {"truth": truth_factor, "requests": len(rows.rows), "window_s": rows.length_s,
                        **_answer_json(factor),
                        "seconds": {"truth": t2 - t1 + time.perf_counter() - t3, "answer": t3 - t2 + measured_s}}
    return out


@dataclass(frozen=True, slots=True)
class Score:
    """One answer's row of the datasheet."""

    answer: str
    draws: int
    settled: int
    unsettled: int  # with a value, not settled
    none: int  # no value
    none_wrong: int  # no value where the truth is positive
    error_median: float | None  # |relative error|, answers with a value, truth > 0
    error_p90: float | None
    error_max: float | None
    rungs_off_max: float | None  # concurrency only
    settled_on_target: int
    settled_far: int  # settled, off by more than 20 % (concurrency: a rung or more)
    unsettled_within_doubling: int
    unsettled_doublings_max: float | None
    coverage: dict[str, tuple[int, int]]  # interval -> (covered, stated)
    seconds_median: float | None  # truth + answer, per draw
    seconds_max: float | None

    def on_target_share(self) -> float | None:
        return None if not self.settled else self.settled_on_target / self.settled


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, max(0, math.ceil(q * len(values)) - 1))]


def _covers(interval: Sequence[float] | None, truth: float, slack: float = 1e-9) -> bool | None:
    if interval is None:
        return None
    low, high = min(interval), max(interval)
    return low - slack <= truth <= high + slack


def table(draws: Sequence[dict[str, Any]]) -> list[Score]:
    """The datasheet's rows (module docstring), one per answer present in ``draws``; for the concurrency also a
    row of the draws whose truth lies at least ``FAR_MARGIN`` from every threshold that decides it
    (``truth.concurrency_margin``): the conditions a window can settle, where the acceptance's goals are to
    hold without exception."""
    rows = []
    for name in ANSWERS:
        entries = [d[name] for d in draws if name in d]
        if not entries:
            continue
        rows.append(_score(name, name, entries))
        far = [e for e in entries if e.get("margin") is not None and e["margin"] >= FAR_MARGIN]
        if name == "concurrency" and far:
            rows.append(_score(name, f"{name}, truth >= {FAR_MARGIN:.0%} from every threshold", far))
    return rows


def _score(name: str, label: str, entries: Sequence[dict[str, Any]]) -> Score:
    """One row of ``table``: ``entries`` are one answer's (``name``) entries of the draws scored."""
    errors, rungs_off, doublings = [], [], []
    settled = unsettled = none = none_wrong = on_target = far = within = 0
    coverage: dict[str, list[int]] = {}
    seconds = [sum(e["seconds"].values()) for e in entries]

    def cover(key: str, hit: bool | None, coverage: dict[str, list[int]] = coverage) -> None:
        if hit is not None:
            c = coverage.setdefault(key, [0, 0])
            c[0] += hit
            c[1] += 1

    for e in entries:
        truth, value, status = e["truth"], e["answer"], e["status"]
        if value is None:
            none += 1
            none_wrong += truth > 0
        elif status == "settled":
            settled += 1
        else:
            unsettled += 1
        if value is not None and truth > 0:
            err = value / truth - 1
            errors.append(abs(err))
            if name == "concurrency":
                rungs_off.append(abs(math.log2(value / truth)))
        if status == "settled":
            if name == "concurrency":
                ok = (value or 0) == truth
                bad = not ok
            elif truth > 0 and value is not None:
                ok, bad = abs(value / truth - 1) <= 0.10, abs(value / truth - 1) > 0.20
            else:
                ok = bad = False
            on_target += ok
            far += bad
        elif value is not None:
            # none is the ladder's rung below c=1 (concurrency); another answer's none is no rung to count from
            rung = truth if truth > 0 else (0.5 if name == "concurrency" else None)
            d = math.inf if rung is None else abs(math.log2(value / rung))
            doublings.append(d)
            within += d <= 1.0 + 1e-9
        if name == "rate":
            cover("rate interval (bracket)", _covers(e["interval"], truth) if truth > 0 else None)
            for p in e.get("points", []):
                cover("rung attainment interval", _covers(p["attainment_interval"], p["true_attainment"]))
        elif name == "trace":
            cover("factor interval (bracket)", _covers(e["interval"], truth) if truth > 0 else None)
            for p in e.get("points", []):
                cover("rung attainment interval", _covers(p["attainment_interval"], p["true_attainment"]))
        else:
            for pair, interval in e.get("gain_intervals", {}).items():
                if pair in e.get("true_gains", {}):
                    cover("gain per doubling interval", _covers(interval, e["true_gains"][pair]))
            true_itl = {str(r["c"]): r["itl_p95_s"] for r in e.get("truth_rungs", [])}
            for c, interval in e.get("itl_intervals", {}).items():
                if c in true_itl:
                    cover("ITL p95 interval", _covers(interval, true_itl[c]))
            true_rungs_of = {str(r["c"]): r for r in e.get("truth_rungs", [])}
            bounds = e.get("share_bounds", {})
            for c, bound in bounds.get("held", {}).items():  # one-sided: [0, bound]
                if c in true_rungs_of and "pause_over_share" in true_rungs_of[c]:
                    cover("held past the stall limit, share bound", true_rungs_of[c]["pause_over_share"] <= bound)
            for c, bound in bounds.get("ttft", {}).items():
                if c in true_rungs_of:
                    cover("past the TTFT objective, share bound", 1 - true_rungs_of[c]["ttft_share"] <= bound)
    return Score(
        label, len(entries), settled, unsettled, none, none_wrong, _quantile(errors, 0.5), _quantile(errors, 0.9),
        max(errors, default=None), max(rungs_off, default=None) if name == "concurrency" else None,
        on_target, far, within, max(doublings, default=None),
        {k: (v[0], v[1]) for k, v in coverage.items()},
        statistics.median(seconds) if seconds else None, max(seconds, default=None))




def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1%}"


def render(rows: Sequence[Score]) -> str:
    """The table as the bench prints it and docs/accuracy.md states it (Markdown)."""
    lines = ["| answer | draws | settled / not settled / none (truth > 0) | error median / p90 / max | settled on "
             "target (goal >= 95 %) | settled and off > 20 % (goal 0) | not settled within one doubling | seconds per "
             "draw, median / max (truth and answer; the closed ladder with each) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        share = r.on_target_share()
        rungs = "" if r.rungs_off_max is None else f"; rungs off max {r.rungs_off_max:.0f}"
        lines.append(
            f"| {r.answer} | {r.draws} | {r.settled} / {r.unsettled} / {r.none} ({r.none_wrong}) | "
            f"{_pct(r.error_median)} / "
            f"{_pct(r.error_p90)} / {_pct(r.error_max)}{rungs} | {r.settled_on_target} of {r.settled} "
            f"({_pct(share)}) | {r.settled_far} | {r.unsettled_within_doubling} of {r.unsettled} | "
            f"{r.seconds_median or 0:.1f} / {r.seconds_max or 0:.1f} |")
    lines += ["", "| answer | interval | covers its truth (goal >= 90 % at nominal 95 %) |", "|---|---|---|"]
    for r in rows:
        for key, (hit, n) in sorted(r.coverage.items()):
            lines.append(f"| {r.answer} | {key} | {hit} of {n} ({_pct(hit / n if n else None)}) |")
    return "\n".join(lines)


def bucket(answer: str, condition: dict[str, Any]) -> str:
    """The condition an answer's accuracy is split by: the arrivals' burstiness for the rate, the trace's shape
    for the factor, the slots and the step for the concurrency; for the rate and the factor also whether a
    prefill can hold a decode past the pause-excess objective (whole prefill, or a chunk that takes longer)."""
    holds = condition["chunk"] == 0 or condition["chunk"] / condition["prefill_tok_s"] > PAUSE_S
    held = "; prefill holds past the pause objective" if holds else ""
    if answer == "rate":
        cv = condition["cv"]
        return ("Poisson" if cv == 1 else ("gamma cv < 2" if cv < 2 else "gamma cv >= 2")) + held
    if answer == "trace":
        return str(condition["trace"]) + held
    slots = condition["slots"]
    return f"{'1-7' if slots < 8 else '8-63' if slots < 64 else '64'} slots, {condition['speed']} step"


def render_buckets(draws: Sequence[dict[str, Any]]) -> str:
    """Each answer's table split by ``bucket`` (Markdown): where the errors are."""
    lines = ["| answer | condition | draws | settled on target | settled and off > 20 % | not settled | none "
             "(truth > 0) |",
             "|---|---|---|---|---|---|---|"]
    for name in ANSWERS:
        groups: dict[str, list[dict[str, Any]]] = {}
        for d in draws:
            if name in d:
                groups.setdefault(bucket(name, d["condition"]), []).append(d)
        for key in sorted(groups):
            row = table([{name: d[name]} for d in groups[key]])[0]
            lines.append(f"| {name} | {key} | {row.draws} | {row.settled_on_target} of {row.settled} | "
                         f"{row.settled_far} | {row.unsettled} | {row.none} ({row.none_wrong}) |")
    return "\n".join(lines)
