"""The one registry of limits that can bind a lane's answer: every check, objective and throughput bound,
declared once with what it needs, and every list of them derived from it.

A limit is an ``Entry``: its ``name``; the ``binding_constraint`` its break becomes (``binds_as``: the
interference check, where the policy bounds it, starves decodes); its binding ``order`` (where one rung
breaks several limits, the lowest order names the binding constraint); the ``readings`` it may take (the
figure it reads, its unit and the policy setting that gives its bound, the first being the one it takes
unless its judge names another); the policy ``settings`` it reads; its ``kind``; and its ``judge``
(``answer.judges``), which the throughput bounds have none of (the curve decides them,
``answer.analysis``). The registry's order is the order the limits are judged and stated: a rung's checks
in the document, the report's columns and the exporter's verdicts read it; the first judge to flag a
constraint at a rung gives its violation (the decode check before interference).

Derived here, and held equal to the registry by ``tests/answer/test_checks_registry.py``:
``CONSTRAINTS`` (the vocabulary of ``binding_constraint``, in the document schema's order: ``listed``),
``VIOLATION_ORDER``, ``CHECKS`` (each step check and what it binds as), ``LANE_SUMMARIES`` (each check the
lane states as passed or not, and where), ``REPORTED`` (the checks the report states per rung, and its
words for a flag), ``SLO_CONSTRAINTS``, ``PAUSE_CONSTRAINTS`` (limits a larger batch can only break more:
the tune prunes on them) and ``THROUGHPUT_CONSTRAINTS``. Adding a limit is one entry here and its judge.
Pure data: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from satbench.answer.itl_judge import itl_limit
from satbench.answer.judges import (
    Check,
    LaneBasis,
    Violation,
    decode_check,
    fairness_check,
    interference_check,
    memory_check,
    prefill_check,
)
from satbench.answer.objective_judges import e2e_limit, error_limit, tpot_limit, ttft_limit
from satbench.answer.policy import Policy
from satbench.core.figures import StepFigures

__all__ = [
    "CHECKS",
    "CONSTRAINTS",
    "LANE_SUMMARIES",
    "PAUSE_CONSTRAINTS",
    "REGISTRY",
    "REPORTED",
    "SLO_CONSTRAINTS",
    "THROUGHPUT_CONSTRAINTS",
    "VIOLATION_ORDER",
    "Entry",
    "Judge",
    "Kind",
    "Lists",
    "Reading",
    "entry",
    "lists_of",
    "reading_of",
]

# ``limit``: a bound on a rung's figure (errors); ``slo``: a latency objective; ``check``: a judgment with a
# status at every rung (``Check``); ``throughput``: a bound the curve decides (no judge)
Kind = Literal["limit", "slo", "check", "throughput"]
Judge = Callable[[StepFigures, Policy, LaneBasis], Check | Violation | None]


@dataclass(frozen=True, slots=True)
class Reading:
    """What a judgment measures: the ``figure`` (in words), its ``unit`` (``s`` seconds, ``ratio`` x,
    ``share`` a fraction, ``gain`` a fraction per doubling, ``index`` Jain's, ``count``) and the policy
    ``setting`` its bound comes from, as the report says them."""

    figure: str
    unit: str
    setting: str


@dataclass(frozen=True, slots=True)
class Entry:
    """One limit that can bind (module docstring). ``summary``: the lane field that says whether every rung
    passed it (``("starvation", "decode_ok")``), where the document states one; ``label``: the report's
    words for a rung that broke it, where the report states it per rung; ``pauses``: a bound on the decode's
    pace, which a larger batch can only break more (the tune's pruning); ``listed``: its place in the
    constraint vocabulary (the document schema's order), for an entry that names a constraint of its own."""

    name: str
    binds_as: str
    order: int
    kind: Kind
    readings: Mapping[str, Reading]
    settings: tuple[str, ...]
    judge: Judge | None = None
    listed: int | None = None
    summary: tuple[str, str] | None = None
    label: str | None = None
    pauses: bool = False

    @property
    def reading(self) -> Reading:
        """The reading it takes unless its judge names another."""
        return next(iter(self.readings.values()))


_GAIN = Reading("gain per doubling", "gain", "policy.min_gain_per_doubling")
_SHARE_OF_DECODE = "decode time lost to prefills"

REGISTRY: tuple[Entry, ...] = (
    Entry("errors", "errors", 0, "limit", {"": Reading("error ratio", "share", "policy.max_error_ratio")},
          ("policy.max_error_ratio",), error_limit, listed=7),
    Entry("slo_ttft", "slo_ttft", 2, "slo", {
        "": Reading("TTFT p95", "s", "policy.slo.ttft_p95_s"),
        "own_deadline": Reading("share of requests past their own TTFT deadline", "share",
                                "policy.slo.ttft_p95_s plus ttft_per_1k_prompt_s per 1,000 prompt tokens (a p95: 5 %)"),
    }, ("policy.slo.ttft_p95_s", "policy.slo.ttft_per_1k_prompt_s", "policy.confidence"), ttft_limit, listed=1),
    Entry("slo_itl", "slo_itl", 3, "slo", {"": Reading("ITL p95", "s", "policy.slo.itl_p95_s")},
          ("policy.slo.itl_p95_s",), itl_limit, listed=2, pauses=True),
    Entry("slo_tpot", "slo_tpot", 3, "slo", {"": Reading("TPOT p95", "s", "policy.slo.tpot_p95_s")},
          ("policy.slo.tpot_p95_s", "policy.confidence"), tpot_limit, listed=10, pauses=True),
    Entry("slo_e2e", "slo_e2e", 4, "slo", {"": Reading("e2e p95", "s", "policy.slo.e2e_p95_s")},
          ("policy.slo.e2e_p95_s", "policy.confidence"), e2e_limit, listed=3),
    Entry("decode_starvation", "decode_starvation", 5, "check", {
        "": Reading("pause excess p99 (held beyond the decode step by a prefill)", "s",
                    "the stall limit: policy.slo.tbt_p99_s, or (policy.max_pause_ratio - 1) decode steps, at least "
                    "policy.min_pause_excess_s"),
    }, ("policy.slo.tbt_p99_s", "policy.max_pause_ratio", "policy.min_pause_excess_s",
        "policy.unbounded_stall_elasticity", "policy.min_pause_requests", "policy.min_prefill_events",
        "policy.confidence"), decode_check, listed=5, summary=("starvation", "decode_ok"), label="decode starved",
          pauses=True),
    Entry("prefill_starvation", "prefill_starvation", 6, "check", {
        "": Reading("worst wait over its FIFO admission bound", "ratio", "policy.max_admission_wait_ratio"),
        "absolute": Reading("longest wait for a first token", "s", "policy.prefill_wait_max_s"),
    }, ("policy.max_admission_wait_ratio", "policy.min_admission_overrun_s", "policy.prefill_wait_max_s",
        "policy.min_queued_requests"),
          prefill_check, listed=6, summary=("starvation", "prefill_ok"), label="prefill starved"),
    Entry("fairness", "fairness", 7, "check", {
        "": Reading("worst user's wait or slowest user's pace ratio", "ratio",
                    "policy.max_user_wait_ratio, max_user_itl_ratio"),
        "jain": Reading("Jain's index", "index", "policy.jain_min"),
        "share": Reading("max/min user share", "ratio", "policy.max_min_share_max"),
        "queue": Reading("queue wait p99", "s", "policy.queue_p99_max_s"),
        "starved": Reading("users served nothing while passed over", "count", "none"),
    }, ("policy.max_user_wait_ratio", "policy.max_user_itl_ratio", "policy.fairness_alpha",
        "policy.min_user_wait_gap_s", "policy.min_user_itl_gap_s", "policy.jain_min", "policy.max_min_share_max",
        "policy.queue_p99_max_s"), fairness_check, listed=4, summary=("fairness", "ok"), label="unfair"),
    Entry("interference", "decode_starvation", 5, "check", {
        "": Reading(_SHARE_OF_DECODE, "share", "policy.interference_warn_share"),
        "bound": Reading(_SHARE_OF_DECODE, "share", "policy.max_interference_share"),
    }, ("policy.interference_warn_share", "policy.max_interference_share"), interference_check,
          label="prefill interference"),
    Entry("memory", "memory", 1, "check", {
        "": Reading("KV cache usage", "share", "policy.kv_usage_max_ratio"),
        "headroom": Reading("least free share of a GPU", "share", "policy.memory_headroom_min_ratio"),
    }, ("policy.kv_usage_max_ratio", "policy.memory_headroom_min_ratio"), memory_check, listed=8),
    Entry("throughput_plateau", "throughput_plateau", 8, "throughput", {"": _GAIN},
          ("policy.min_gain_per_doubling",), listed=0),
    Entry("ladder_top", "ladder_top", 9, "throughput", {"": _GAIN}, ("policy.min_gain_per_doubling",), listed=9),
)

_BY_NAME: dict[str, Entry] = {e.name: e for e in REGISTRY}


def entry(name: str) -> Entry | None:
    """The registry's entry of a limit or of the constraint it binds as (its own entry first); None for a
    name it does not know."""
    return _BY_NAME.get(name)


def reading_of(name: str, key: str = "") -> Reading | None:
    """What the limit ``name`` measured where its judge named reading ``key`` (its first where it names none
    or one it does not have); None for a name the registry does not know."""
    found = entry(name)
    if found is None:
        return None
    return found.readings.get(key, found.reading)


@dataclass(frozen=True, slots=True)
class Lists:
    """Every list of limits, derived from a registry (``lists_of``; module docstring)."""

    constraints: tuple[str, ...]
    violation_order: tuple[str, ...]
    checks: dict[str, str]
    lane_summaries: tuple[tuple[str, str, str], ...]
    reported: dict[str, str]
    slo: tuple[str, ...]
    pauses: tuple[str, ...]
    throughput: tuple[str, ...]


def lists_of(registry: tuple[Entry, ...]) -> Lists:
    """The lists a registry gives: the constraint vocabulary (by ``listed``), the binding order (by
    ``order``, each constraint once), and the rest in the registry's order."""
    listed = sorted((e for e in registry if e.listed is not None), key=lambda e: e.listed or 0)
    binding = sorted((e for e in registry if e.kind != "throughput"), key=lambda e: e.order)
    return Lists(
        constraints=tuple(e.binds_as for e in listed),
        violation_order=tuple(dict.fromkeys(e.binds_as for e in binding)),
        checks={e.name: e.binds_as for e in registry if e.kind == "check"},
        lane_summaries=tuple((e.name, *e.summary) for e in registry if e.summary is not None),
        reported={e.name: e.label for e in registry if e.label is not None},
        slo=tuple(e.binds_as for e in registry if e.kind == "slo"),
        pauses=tuple(e.binds_as for e in registry if e.pauses),
        throughput=tuple(e.binds_as for e in registry if e.kind == "throughput"),
    )


_LISTS = lists_of(REGISTRY)
CONSTRAINTS: tuple[str, ...] = _LISTS.constraints
VIOLATION_ORDER: tuple[str, ...] = _LISTS.violation_order
CHECKS: dict[str, str] = _LISTS.checks
LANE_SUMMARIES: tuple[tuple[str, str, str], ...] = _LISTS.lane_summaries
REPORTED: dict[str, str] = _LISTS.reported
SLO_CONSTRAINTS: tuple[str, ...] = _LISTS.slo
PAUSE_CONSTRAINTS: tuple[str, ...] = _LISTS.pauses
THROUGHPUT_CONSTRAINTS: tuple[str, ...] = _LISTS.throughput
