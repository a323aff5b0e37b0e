"""What a comparison says, declared once: the figures compared and their floors, each figure's change with
its test and interval, each lane's answers, and the verdict (PASS, FAIL or INCONCLUSIVE) with its headline.
``satbench.compare.judge`` computes them and says how each is judged; this module holds their shape and the
rule that turns them into a verdict."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from satbench.answer.checks import LANE_SUMMARIES
from satbench.compare.tails import tail_power

__all__ = ["CHECKS", "DEFAULT_FLOORS", "FIGURES", "Answer", "Change", "Comparison", "Figure", "Floor",
           "LaneComparison", "describe"]


@dataclass(frozen=True, slots=True)
class Floor:
    """The least change that matters: relative (a share of A's value) and absolute (in the figure's unit)."""

    relative: float
    absolute: float = 0.0


@dataclass(frozen=True, slots=True)
class Figure:
    """One compared figure, declared once: what it reads, its unit, its direction, its floor's name."""

    key: str
    label: str
    attr: str
    tail: str | None
    unit: str
    scale: float
    higher_is_better: bool


FIGURES = (Figure("throughput", "output tok/s", "throughput_tok_s", None, "tok/s", 1.0, True),
           Figure("ttft", "TTFT p95", "ttft_s", "ttft_tail", "ms", 1e3, False),
           Figure("e2e", "e2e p95", "latency_s", "latency_tail", "ms", 1e3, False),
           Figure("itl", "ITL p95", "itl_s", None, "ms", 1e3, False),
           Figure("pause_excess", "pause excess p95", "pause_excess_s", "pause_excess_tail", "ms", 1e3, False))
DEFAULT_FLOORS: Mapping[str, Floor] = {"throughput": Floor(0.05, 1.0), "ttft": Floor(0.10, 5.0),
                                       "e2e": Floor(0.10, 50.0), "itl": Floor(0.10, 2.0),
                                       "pause_excess": Floor(0.10, 2.0), "answer": Floor(0.10)}
# each check a lane states as passed or not (the registry's, answer.checks): its words, and where the lane says it
CHECKS = tuple((name.replace("_", " "), group, key) for name, group, key in LANE_SUMMARIES)


@dataclass(frozen=True, slots=True)
class Change:
    """One figure of one lane, A against B. ``p_value`` None: nothing to judge it by (no interval or tail);
    ``interval``: the relative change's, where known; ``sizes``: the requests a tail test counted on each side
    (its power, ``power``)."""

    figure: str
    unit: str
    a: float | None
    b: float | None
    higher_is_better: bool
    p_value: float | None = None
    how: str = ""
    floor: Floor = Floor(0.0)
    interval: tuple[float, float] | None = None
    judged: bool = True
    sizes: tuple[int, int] | None = None

    @property
    def relative(self) -> float | None:
        if self.a is None or self.b is None or self.a == 0:
            return None
        return self.b / self.a - 1.0

    @property
    def worse(self) -> bool:
        rel = self.relative
        return rel is not None and (rel < 0 if self.higher_is_better else rel > 0)

    @property
    def beyond_floor(self) -> bool:
        """Worse by more than both floors (module docstring)."""
        rel = self.relative
        return (self.worse and rel is not None and self.a is not None and self.b is not None
                and abs(rel) > self.floor.relative and abs(self.b - self.a) > self.floor.absolute)

    def significant(self, alpha: float) -> bool:
        return self.p_value is not None and self.p_value < alpha

    def power(self, alpha: float) -> float | None:
        """The tail test's power at level ``alpha`` to see B's p95 at A's p90 (``compare.tails.tail_power``)."""
        return None if self.sizes is None else tail_power(*self.sizes, alpha)

    def regression(self, alpha: float) -> bool:
        return self.judged and self.beyond_floor and self.significant(alpha)

    def unsettled(self, alpha: float) -> bool:
        """Worse beyond the floor, not shown significant: the runs cannot tell."""
        return self.judged and self.beyond_floor and not self.significant(alpha)


@dataclass(frozen=True, slots=True)
class Answer:
    """A side's answer and the interval it was read in (the runs' span where pooled)."""

    value: float | None
    low: float | None
    high: float | None
    status: str | None

    def __str__(self) -> str:
        if self.value is None:
            return f"none ({self.status})"
        span = "" if self.low == self.high else f" [{self.low:g}, {self.high:g}]"
        return f"{self.value:g}{span} ({self.status})"


@dataclass(frozen=True, slots=True)
class LaneComparison:
    key: str
    answer_a: int | None
    answer_b: int | None
    status_a: str | None
    status_b: str | None
    rung: int | None
    changes: tuple[Change, ...] = ()
    flagged: tuple[str, ...] = ()  # checks that held in A and flag in B
    cleared: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    deployment: str = ""  # the fingerprint fields that differ, in words
    concurrency: tuple[Answer, Answer] | None = None
    rate: tuple[Answer, Answer] | None = None
    answer_floor: Floor = Floor(0.10)

    def _dropped(self, pair: tuple[Answer, Answer] | None) -> bool:
        if pair is None:
            return False
        a, b = pair
        if a.value is None:
            return False
        if b.value is None:
            return True
        if a.low is None or b.high is None or b.high >= a.low:
            return False
        return (1 - b.value / a.value) > self.answer_floor.relative if a.value else False

    @property
    def answer_dropped(self) -> bool:
        undecided = "undecided" in (self.status_a, self.status_b) and (
            self.concurrency is None or self.concurrency[1].value is not None)
        return not undecided and self._dropped(self.concurrency)

    @property
    def rate_dropped(self) -> bool:
        return self.rate is not None and self.rate[0].value is not None and self.rate[1].value is not None \
            and self._dropped(self.rate)


@dataclass(frozen=True, slots=True)
class Comparison:
    lanes: tuple[LaneComparison, ...]
    only_a: tuple[str, ...]
    only_b: tuple[str, ...]
    threshold: float | None
    confidence: float
    tests: int = field(default=0)
    allowed: tuple[tuple[str, str], ...] = ()  # differences the user allowed, and what differs
    runs: tuple[int, int] = (1, 1)

    @property
    def alpha(self) -> float:
        """Each test's level: the family's ``1 - confidence`` over the tests made (Bonferroni)."""
        return (1.0 - self.confidence) / max(1, self.tests)

    def regressions(self) -> list[str]:
        """Every failing figure, one line each, naming the lane and the figure."""
        out = []
        for lane in self.lanes:
            if lane.answer_dropped and lane.concurrency is not None:
                a, b = lane.concurrency
                out.append(f"{lane.key}: recommended concurrency {a} -> {b}")
            if lane.rate_dropped and lane.rate is not None:
                out.append(f"{lane.key}: rate answer {lane.rate[0]} -> {lane.rate[1]} requests/s")
            for check in lane.flagged:
                out.append(f"{lane.key}: {check} now flagged")
            for change in lane.changes:
                if change.regression(self.alpha):
                    out.append(f"{lane.key}: {describe(change, lane.rung)}")
        out.extend(f"{key}: in A, no answer in B" for key in self.only_a)
        return out

    def unsettled(self) -> list[str]:
        """Figures worse beyond their floor that the runs could not show significant."""
        return [f"{lane.key}: {describe(change, lane.rung)}" for lane in self.lanes for change in lane.changes
                if change.unsettled(self.alpha)]

    @property
    def verdict(self) -> str:
        if self.regressions():
            return "FAIL"
        if self.unsettled() or not any(lane.changes for lane in self.lanes):
            return "INCONCLUSIVE"
        return "PASS"

    def headline(self) -> str:
        """The verdict with what changed in the deployment and the figure that decided it (the largest move of
        those that decided it), with its interval:
        ``FAIL runtime.build b5000 -> b5100: dense c=8 TTFT p95 +32.0% (+20.1% .. +45.3%)``."""
        verdict = self.verdict
        deployed = "; ".join(dict.fromkeys(lane.deployment for lane in self.lanes if lane.deployment))
        deployed = deployed or "no deployment field differs"
        alpha = self.alpha
        decides = (lambda c: c.regression(alpha)) if verdict == "FAIL" else (lambda c: c.unsettled(alpha))
        moved = sorted(((abs(c.relative or 0.0), lane.key, c, lane.rung) for lane in self.lanes
                        for c in lane.changes if decides(c)), key=lambda m: -m[0])
        decided = [f"{key} {_short(c, rung)}" for _, key, c, rung in moved]
        count = len(self.regressions()) if verdict == "FAIL" else len(decided)
        if verdict == "FAIL" and not decided:
            decided = self.regressions()
        if decided:
            said_ = decided[0] + (f" (and {count - 1} more)" if count > 1 else "")
        else:
            worst = _worst(self.lanes)
            said_ = "nothing worse beyond its floor" + (f"; the most: {worst}" if worst else "")
        return f"{verdict} {deployed}: {said_}"


def _worst(lanes: Sequence[LaneComparison]) -> str:
    moved = [(abs(c.relative or 0.0), lane.key, c, lane.rung) for lane in lanes for c in lane.changes
             if c.judged and c.worse]
    if not moved:
        return ""
    _, key, change, rung = max(moved, key=lambda m: m[0])
    return f"{key} {_short(change, rung)}"


def _short(change: Change, rung: int | None) -> str:
    at = f"c={rung} " if rung is not None else ""
    rel = change.relative
    moved = "" if rel is None else f" {rel:+.1%}"
    span = "" if change.interval is None else f" ({change.interval[0]:+.1%} .. {change.interval[1]:+.1%})"
    return f"{at}{change.figure}{moved}{span}"


def describe(change: Change, rung: int | None) -> str:
    at = f" at c={rung}" if rung is not None else ""
    rel = change.relative
    moved = "" if rel is None else f" ({rel:+.1%}"
    if moved:
        moved += "" if change.interval is None else (
            f", interval {change.interval[0]:+.1%} .. {change.interval[1]:+.1%}")
        moved += ")"
    return f"{change.figure}{at} {_fmt(change.a)} -> {_fmt(change.b)} {change.unit}{moved}" + (
        f", {change.how}" if change.how else "")


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.3g}"
