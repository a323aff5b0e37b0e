"""The registry of limits (``answer.checks``): every list of checks the product keeps is the registry's, each
judgment states the figure, unit and setting of the reading its judge took, the report reads those (not the
words), and a new limit is one entry and its judge."""

from __future__ import annotations

import ast
import json
from dataclasses import replace
from pathlib import Path
from typing import Any, get_args

import pytest

from satbench.answer import checks as registry
from satbench.answer.analysis import analyze_lane
from satbench.answer.checks import REGISTRY, Entry, Reading, lists_of
from satbench.answer.document import lane_fragment
from satbench.answer.judges import Check, LaneBasis
from satbench.answer.models import CheckModel, LaneModel, ViolationModel
from satbench.answer.policy import SLO, Policy
from satbench.answer.verdicts import check_step
from satbench.compare import verdict as compare_verdict
from satbench.core.figures import MemoryFigures, Quantiles, StepFigures
from satbench.recommender import metrics
from satbench.report import judgments
from satbench.report.judgments import binding_finding, rung_judgments
from satbench.tune import search
from tests.recommender.figures_factory import held, ladder, step

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "satbench" / "recommender" / "schema" / "recommendations.v2.json"
UNITS = {"s", "ratio", "share", "gain", "index", "count"}
STRICT = Policy(slo=SLO(ttft_p95_s=1.0, itl_p95_s=0.05, e2e_p95_s=5.0), max_error_ratio=0.01,
                max_interference_share=0.2, prefill_wait_max_s=10.0, jain_min=0.8, max_min_share_max=2.0,
                queue_p99_max_s=2.0)


def test_the_constraint_vocabulary_is_the_schemas_and_the_models() -> None:
    """The committed schema (generated, checked for drift) lists the binding constraints in this order."""
    schema = json.loads(SCHEMA.read_text())
    enum = schema["$defs"]["LaneModel"]["properties"]["binding_constraint"]["anyOf"][0]["enum"]
    assert tuple(enum) == registry.CONSTRAINTS == (
        "throughput_plateau", "slo_ttft", "slo_itl", "slo_e2e", "fairness", "decode_starvation",
        "prefill_starvation", "errors", "memory", "ladder_top", "slo_tpot")
    assert get_args(ViolationModel.model_fields["constraint"].annotation) == registry.CONSTRAINTS
    with pytest.raises(ValueError, match="constraint"):
        ViolationModel(constraint="interference", measured=1.0, limit=0.5, detail="")  # a check, not a constraint


def test_every_list_of_checks_is_the_registrys() -> None:
    assert registry.VIOLATION_ORDER == ("errors", "memory", "slo_ttft", "slo_itl", "slo_tpot", "slo_e2e",
                                        "decode_starvation",
                                        "prefill_starvation", "fairness")
    assert registry.CHECKS == {"decode_starvation": "decode_starvation", "prefill_starvation": "prefill_starvation",
                               "fairness": "fairness", "interference": "decode_starvation", "memory": "memory"}
    # the verdict judges them in that order, and the document states them so
    assert list(check_step(step(8, 400.0), Policy()).checks) == list(registry.CHECKS)
    # the report's per-rung columns and words
    assert judgments.CHECK_NAMES == tuple(registry.REPORTED) == (
        "decode_starvation", "prefill_starvation", "fairness", "interference")
    assert judgments.verdict_label({"decode_starvation": "flagged", "interference": "warn", "memory": "flagged"}) == (
        "decode starved, memory, (prefill interference)")
    # the tune's pruning
    assert set(search.PAUSE_CONSTRAINTS) == set(registry.PAUSE_CONSTRAINTS) == {
        "decode_starvation", "slo_itl", "slo_tpot"}
    assert search.LATENCY_CONSTRAINTS == registry.SLO_CONSTRAINTS == ("slo_ttft", "slo_itl", "slo_tpot", "slo_e2e")
    assert search._BOUND_BY_THROUGHPUT == registry.THROUGHPUT_CONSTRAINTS == ("throughput_plateau", "ladder_top")
    # the lane summaries the exporter's verdicts and the comparison read
    assert registry.LANE_SUMMARIES == (("decode_starvation", "starvation", "decode_ok"),
                                       ("prefill_starvation", "starvation", "prefill_ok"),
                                       ("fairness", "fairness", "ok"))
    assert compare_verdict.CHECKS == (("decode starvation", "starvation", "decode_ok"),
                                      ("prefill starvation", "starvation", "prefill_ok"),
                                      ("fairness", "fairness", "ok"))
    lane = _lane(ladder({1: 100.0, 2: 200.0, 4: 400.0, 8: 410.0}, c8=held(10)), Policy())
    assert metrics._verdicts(lane) == {"decode_starvation": False, "prefill_starvation": True, "fairness": True}


def test_every_entry_is_well_formed() -> None:
    names = [e.name for e in REGISTRY]
    assert len(set(names)) == len(names)
    policy = {"policy": Policy().model_dump()}
    for e in REGISTRY:
        assert e.readings and all(r.unit in UNITS for r in e.readings.values()), e.name
        for path in e.settings:  # a path of the policy, e.g. policy.slo.itl_p95_s
            node: Any = policy
            for part in path.split("."):
                assert isinstance(node, dict) and part in node, f"{e.name}: {path}"
                node = node[part]
        assert (e.judge is None) == (e.kind == "throughput"), e.name
        if e.kind == "slo":  # the report's policy line reads an objective's value through its first reading
            assert e.reading.setting.removeprefix("policy.slo.") in SLO.model_fields, e.name
        own = registry.entry(e.binds_as)
        assert own is not None and own.order == e.order, e.name
    listed = [e.listed for e in REGISTRY if e.listed is not None]
    assert sorted(listed) == list(range(len(listed)))
    assert set(registry.CONSTRAINTS) == {e.binds_as for e in REGISTRY}


def _lane(steps: list[StepFigures], policy: Policy) -> LaneModel:
    analysis = analyze_lane("dense", steps, policy)
    return LaneModel.model_validate(lane_fragment(analysis, run_id="r1", measured_at=None))


MEMORY = {"memory_bytes": MemoryFigures(gpu_max=7.9e9, gpu_total=8e9, kv_usage_max_ratio=0.4)}
READINGS = [  # (case, rung's changes, policy, the constraint it breaks, the figure, unit and setting it states)
    ("errors", {"errors": 20}, STRICT, "errors", "error ratio", "share", "policy.max_error_ratio"),
    ("ttft", {"ttft_s": Quantiles(2.0, 3.0, 4.0)}, STRICT, "slo_ttft", "TTFT p95", "s", "policy.slo.ttft_p95_s"),
    ("own deadline", {"judged_requests": 100, "objective_misses": {"ttft": 40}},
     Policy(slo=SLO(ttft_p95_s=0.5, ttft_per_1k_prompt_s=1.0)), "slo_ttft",
     "share of requests past their own TTFT deadline", "share",
     "policy.slo.ttft_p95_s plus ttft_per_1k_prompt_s per 1,000 prompt tokens (a p95: 5 %)"),
    ("itl", {"itl_s": Quantiles(0.2, 0.3, 0.4)}, STRICT, "slo_itl", "ITL p95", "s", "policy.slo.itl_p95_s"),
    ("e2e", {"latency_s": Quantiles(8, 9, 10)}, STRICT, "slo_e2e", "e2e p95", "s", "policy.slo.e2e_p95_s"),
    ("held", held(10), Policy(), "decode_starvation", "pause excess p99 (held beyond the decode step by a prefill)",
     "s", "the stall limit: policy.slo.tbt_p99_s, or (policy.max_pause_ratio - 1) decode steps, at least "
          "policy.min_pause_excess_s"),
    ("interference", {"interference_share": 0.5}, STRICT, "decode_starvation", "decode time lost to prefills",
     "share", "policy.max_interference_share"),
    ("longest wait", {"prefill_wait_max_s": 30.0}, STRICT, "prefill_starvation", "longest wait for a first token",
     "s", "policy.prefill_wait_max_s"),
    ("FIFO bound", {"admission_overrun_max_ratio": 3.0, "admission_overruns": 9,
                    "admission_wait_max_s": 1.5, "admission_wait_bound_s": 0.5}, Policy(), "prefill_starvation",
     "worst wait over its FIFO admission bound", "ratio", "policy.max_admission_wait_ratio"),
    ("jain", {"jain": 0.5}, STRICT, "fairness", "Jain's index", "index", "policy.jain_min"),
    ("share", {"max_min_share": 9.0}, STRICT, "fairness", "max/min user share", "ratio", "policy.max_min_share_max"),
    ("queue", {"queue_s": Quantiles(1, 5, 9)}, STRICT, "fairness", "queue wait p99", "s", "policy.queue_p99_max_s"),
    ("starved", {"users_starved": 2}, Policy(), "fairness", "users served nothing while passed over", "count", "none"),
    ("waits", {"user_wait_p_value": 0.0001, "user_wait_ratio": 4.0}, Policy(), "fairness",
     "worst user's wait or slowest user's pace ratio", "ratio", "policy.max_user_wait_ratio, max_user_itl_ratio"),
    ("kv", {"memory_bytes": MemoryFigures(gpu_max=4e9, gpu_total=8e9, kv_usage_max_ratio=0.99)}, Policy(), "memory",
     "KV cache usage", "share", "policy.kv_usage_max_ratio"),
    # the GPU filled while the KV cache was 40 % full: the headroom binds (words that name the KV cache too)
    ("headroom", MEMORY, Policy(), "memory", "least free share of a GPU", "share", "policy.memory_headroom_min_ratio"),
]


@pytest.mark.parametrize(("case", "changes", "policy", "constraint", "figure", "unit", "setting"), READINGS,
                         ids=[r[0] for r in READINGS])
def test_a_broken_limit_states_the_reading_its_judge_took(case: str, changes: dict[str, Any], policy: Policy,
                                                         constraint: str, figure: str, unit: str, setting: str) -> None:
    lowest = MemoryFigures(gpu_max=2e9, gpu_total=8e9)
    verdict = check_step(step(8, 400.0, **changes), policy, 0.01, lowest)
    broken = {v.constraint: v for v in verdict.violations}
    assert constraint in broken, [v.constraint for v in verdict.violations]
    v = broken[constraint]
    assert (v.figure, v.unit, v.setting) == (figure, unit, setting), v.detail
    # and the document says it, and the report reads it
    lane = _lane([step(4, 400.0), step(8, 400.0, **changes)] if case != "headroom" else
                 [replace(step(4, 400.0), memory_bytes=lowest), step(8, 400.0, **changes)], policy)
    said = next(m for m in next(s for s in lane.steps if s.concurrency == 8).violations if m.constraint == constraint)
    assert (said.figure, said.unit, said.setting) == (figure, unit, setting)
    found = next(f for f in rung_judgments(lane, (), policy)[8].violations if f.name == constraint)
    assert (found.figure, found.unit, found.bound) == (figure, unit, setting)


def test_the_report_reads_the_stated_reading_not_the_words() -> None:
    lane = _lane([step(4, 400.0), step(8, 800.0, **held(10))], Policy())
    rung = next(s for s in lane.steps if s.concurrency == 8)
    assert "stall limit" in rung.violations[0].detail
    # the words unchanged, the stated reading another: the report follows the reading
    rung.violations[0] = rung.violations[0].model_copy(update={"figure": "a figure", "unit": "ratio",
                                                               "setting": "policy.a_setting"})
    found = rung_judgments(lane, (), Policy())[8].violations[0]
    assert (found.figure, found.unit, found.bound) == ("a figure", "ratio", "policy.a_setting")
    assert lane.binding_constraint == "decode_starvation"
    binding = binding_finding(lane, rung_judgments(lane, (), Policy()), Policy())
    assert binding is not None and binding.figure == "a figure"


def _unstated(lane: LaneModel) -> None:
    """The lane as a document written before judgments stated their figure, unit and setting reads."""
    blank = {"figure": None, "unit": None, "setting": None}
    for rung in lane.steps:
        rung.violations[:] = [v.model_copy(update=blank) for v in rung.violations]
        rung.checks.update({k: c.model_copy(update=blank) for k, c in rung.checks.items()})


def test_a_document_written_before_the_readings_were_stated_takes_them_from_the_walk() -> None:
    """Jain's index broke fairness at c=8: the document's words do not say which reading, the run's steps do."""
    steps = [step(4, 400.0), step(8, 800.0, jain=0.5)]
    lane = _lane(steps, STRICT)
    _unstated(lane)
    assert next(s for s in lane.steps if s.concurrency == 8).violations[0].figure is None
    walked = rung_judgments(lane, tuple(steps), STRICT)[8]
    assert [(f.name, f.figure, f.unit, f.bound) for f in walked.violations] == [
        ("fairness", "Jain's index", "index", "policy.jain_min")]
    assert walked.checks["memory"].figure == "least free share of a GPU"  # 50 % free: the headroom reading
    # without the steps, the limit's first reading in the registry; a name it does not know, none
    alone = rung_judgments(lane, (), STRICT)[8]
    assert (alone.violations[0].figure, alone.violations[0].unit) == (
        "worst user's wait or slowest user's pace ratio", "ratio")
    next(s for s in lane.steps if s.concurrency == 8).checks["made_up"] = CheckModel(
        status="ok", measured=None, limit=None, detail="words")
    made_up = rung_judgments(lane, (), STRICT)[8].checks["made_up"]
    assert (made_up.unit, made_up.figure, made_up.bound) == ("", "made_up", "")


def _slow_floor(s: StepFigures, policy: Policy, lane: LaneBasis) -> Check:
    """A made-up check: throughput under 500 tok/s at c=8 and above."""
    if s.concurrency < 8:
        return Check("not_applicable", detail="below c=8")
    if s.throughput_tok_s < 500:
        return Check("flagged", s.throughput_tok_s, 500.0, "too slow", reading="floor")
    return Check("ok", s.throughput_tok_s, 500.0, "fast enough")


def test_a_new_limit_is_one_entry_and_its_judge() -> None:
    floor = Entry("slow_floor", "slow_floor", 1, "check",
                  {"": Reading("output tok/s", "ratio", "policy.none"),
                   "floor": Reading("output throughput", "count", "policy.min_gain_per_doubling")},
                  ("policy.min_gain_per_doubling",), _slow_floor, listed=10, label="too slow")
    grown = (*REGISTRY, floor)
    lists = lists_of(grown)
    assert lists.constraints[-1] == "slow_floor" and "slow_floor" in lists.checks
    # its order is memory's: after it, which comes first in the registry
    assert lists.violation_order[:3] == ("errors", "memory", "slow_floor")
    assert lists.reported["slow_floor"] == "too slow"
    verdict = check_step(step(8, 400.0, errors=20, **MEMORY), STRICT, 0.01, MemoryFigures(gpu_max=2e9, gpu_total=8e9),
                         registry=grown)
    assert verdict.checks["slow_floor"] == Check("flagged", 400.0, 500.0, "too slow", "floor", "output throughput",
                                                 "count", "policy.min_gain_per_doubling")
    assert [v.constraint for v in verdict.violations][:3] == ["errors", "memory", "slow_floor"]  # stable by order
    assert check_step(step(4, 400.0), Policy(), registry=grown).checks["slow_floor"].status == "not_applicable"


# Where the product spells a limit's name as a string: the registry, the judge that builds its violation, and
# the few places that read one limit's own figures or words. A new list of checks anywhere else fails here.
SPELLED = {
    "slo_ttft": {"answer/checks.py", "answer/objective_judges.py"},
    "slo_itl": {"answer/checks.py", "answer/itl_judge.py"},
    "slo_e2e": {"answer/checks.py", "answer/objective_judges.py"},
    # the lane's starvation summary (analysis) and the tune's count of held requests (search)
    "decode_starvation": {"answer/checks.py", "answer/analysis.py", "answer/starvation_walk.py", "tune/search.py"},
    "prefill_starvation": {"answer/checks.py", "answer/analysis.py"},
    "interference": {"answer/checks.py", "answer/analysis.py"},
    # the curve's answers: the analysis decides them, the report words the plateau's evidence, the tune prunes
    # on a plateau's interval
    "throughput_plateau": {"answer/checks.py", "answer/analysis.py", "report/answer.py", "report/judgments.py",
                           "tune/search.py"},
    "ladder_top": {"answer/checks.py", "answer/analysis.py", "report/answer.py", "report/judgments.py"},
}


def test_a_limits_name_is_spelled_only_where_it_must_be() -> None:
    """``errors``, ``memory`` and ``fairness`` are also the names of figures and summaries, so only the
    limits' own names are looked for."""
    found: dict[str, set[str]] = {name: set() for name in SPELLED}
    package = ROOT / "satbench"
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in found:
                found[str(node.value)].add(path.relative_to(package).as_posix())
    assert found == SPELLED
    assert set(SPELLED) <= {e.name for e in REGISTRY}
