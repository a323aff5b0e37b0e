"""The trace answer where its readers read it: the document (``lanes.<key>.trace``), the capability fragment
and the ``/metrics`` families, from trace rungs of a scenario built here.

The scenario: a trace window recorded at 2 requests/s, replayed at 1x, 2x, 4x and 8x after a closed ladder.
Up to 4x the lane serves the traffic whole or nearly (100 %, 99 %, 95 % of 400 requests within every
objective, no backlog); at 8x half its requests miss their TTFT, the backlog still steady. With attainment
falling in a straight line between 4x and 8x, the policy's 90 % target is crossed at 4 + 4 x (0.95 - 0.90) /
(0.95 - 0.50) = 4.444x, i.e. 8.889 requests/s, bracketed by 4x and 8x and bound by the TTFT objective. The
same scenario with the backlog growing at 8x is one whose 8x rung draws no attainment (not sustained): the
answer is then 4x, the last rung the lane sustained. A lane that replayed no trace says nothing of one, so
every document written before stays the same.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from satbench.core.figures import StepFigures
from satbench.core.manifest import RunManifest, StepWindow
from satbench.recommender.capabilities import capability_fragment
from satbench.recommender.document import read_document
from satbench.recommender.metrics import exposition
from satbench.recommender.policy import Policy
from satbench.recommender.run_analysis import document_from_figures
from tests.recommender.figures_factory import ladder

CURVE = {1: 100.0, 2: 190.0, 4: 340.0, 8: 350.0}
RECORDED_RPS = 2.0
SHARE = {1.0: 1.0, 2.0: 0.99, 4.0: 0.95, 8.0: 0.50}  # the scenario's attainment at each factor
TRUE_FACTOR = 4 + 4 * (0.95 - 0.90) / (0.95 - 0.50)
EVIDENCE = {"path": "examples/traces/mooncake_sample.jsonl", "format": "mooncake", "sha256": "ab" * 32,
            "size_bytes": 12345, "window": {"offset_s": 0.0, "length_s": 20.0, "requests": 40},
            "recorded_rate_rps": RECORDED_RPS, "skipped_rows": 0, "synthesised": "prompt text: one fixed text a block",
            "block_tokens": 512, "implied_cache_share": 0.58, "speed_factors": [1.0, 8.0, 4.0, 2.0]}


def _trace_rung(factor: float, grows: bool = False) -> StepFigures:
    rate, judged = factor * RECORDED_RPS, 400
    attained = round(SHARE[factor] * judged)
    grows = grows and factor == 8.0
    return replace(ladder({1: 100.0})[0], concurrency=0, rate_rps=rate, offered_rps=rate, judged_requests=judged,
                   attained_requests=attained, attainment=attained / judged, goodput_rps=rate * SHARE[factor],
                   backlog_growth_rps=0.4 * rate if grows else 0.0, backlog_growth_se=0.01, backlog_growth_dof=30,
                   waits_settled=0 if grows else 1,
                   objective_misses={"ttft": judged - attained} if attained < judged else {})


def _document(traced: bool, grows: bool = False) -> dict[str, Any]:
    closed = [StepWindow("dense", c, 10.0 * c, 10.0 * c + 30.0) for c in CURVE]
    factors = list(SHARE) if traced else []
    rungs = [StepWindow("dense", 0, 100.0 + 30 * i, 125.0 + 30 * i, rate_rps=f * RECORDED_RPS, speed_factor=f)
             for i, f in enumerate(factors)]
    manifest = RunManifest(run_id="r-trace", created_at=1.0, steps=(*closed, *rungs),
                           traces={"dense": EVIDENCE} if traced else {})
    figures = {"dense": [*ladder(CURVE), *(_trace_rung(f, grows) for f in factors)]}
    doc = document_from_figures(manifest, figures, policy=Policy(), source={"kind": "records", "run_dir": "r"},
                                generated_at=0.0)
    return json.loads(json.dumps(doc))


def test_the_trace_answer_is_in_the_document_in_factors_with_its_evidence() -> None:
    lane = read_document(_document(traced=True)).lanes["dense"]
    assert lane.rate is None, "trace rungs are not open-loop rate rungs"
    trace = lane.trace
    assert trace is not None and trace.status == "settled"
    assert trace.max_factor == pytest.approx(TRUE_FACTOR, rel=1e-6)
    assert trace.max_rate_rps == pytest.approx(TRUE_FACTOR * RECORDED_RPS, rel=1e-6)
    assert trace.interval == pytest.approx([4.0, 8.0]) and trace.recorded_rate_rps == RECORDED_RPS
    assert trace.binding_objective == "ttft"
    assert [(p.speed_factor, p.passed) for p in trace.curve] == [(1.0, True), (2.0, True), (4.0, True),
                                                                 (8.0, False)]
    assert trace.sentence.startswith("this node takes 4.44 x the recorded traffic")
    assert trace.trace.sha256 == EVIDENCE["sha256"] and trace.trace.window is not None
    assert (trace.trace.window.length_s, trace.trace.size_bytes, trace.trace.implied_cache_share) == (20.0, 12345,
                                                                                                     0.58)
    assert trace.trace.speed_factors == [1.0, 8.0, 4.0, 2.0]


def test_a_factor_whose_backlog_grew_bounds_the_answer_at_the_last_one_sustained() -> None:
    trace = read_document(_document(traced=True, grows=True)).lanes["dense"].trace
    assert trace is not None and trace.status == "settled" and trace.binding_objective == "sustained"
    assert trace.max_factor == pytest.approx(4.0) and trace.curve[-1].sustained is False


def test_capabilities_and_metrics_say_the_trace_answer() -> None:
    doc = _document(traced=True)
    entry = capability_fragment(doc)["lanes"]["dense"]
    assert entry["trace_max_factor"] == pytest.approx(TRUE_FACTOR, rel=1e-6)
    assert entry["trace_status"] == "settled" and entry["trace_sha256"] == EVIDENCE["sha256"]
    assert entry["trace_max_rate_rps"] == pytest.approx(TRUE_FACTOR * RECORDED_RPS, rel=1e-6)
    assert "max_rate_rps" not in entry
    factor = doc["lanes"]["dense"]["trace"]["max_factor"]
    assert f'satbench_trace_max_factor{{lane="dense",status="settled"}} {float(factor)!r}' in exposition(doc)


def test_a_lane_that_replayed_no_trace_says_nothing_of_one() -> None:
    doc = _document(traced=False)
    assert "trace" not in doc["lanes"]["dense"], "a document without a trace keeps its bytes"
    assert read_document(doc).lanes["dense"].trace is None
    assert not any(k.startswith("trace_") for k in capability_fragment(doc)["lanes"]["dense"])
    assert "satbench_trace_max_factor{" not in exposition(doc)


def test_trace_rungs_without_the_manifest_evidence_read_the_recorded_rate_from_their_factor() -> None:
    """A manifest cut short before its ``traces`` entry: each rung's rate over its factor is the recorded rate."""
    closed = [StepWindow("dense", c, 10.0 * c, 10.0 * c + 30.0) for c in CURVE]
    rungs = [StepWindow("dense", 0, 100.0 + 30 * i, 125.0 + 30 * i, rate_rps=f * RECORDED_RPS, speed_factor=f)
             for i, f in enumerate(SHARE)]
    manifest = RunManifest(run_id="r-trace", created_at=1.0, steps=(*closed, *rungs))
    figures = {"dense": [*ladder(CURVE), *(_trace_rung(f) for f in SHARE)]}
    cut = document_from_figures(manifest, figures, policy=Policy(), source={"kind": "records", "run_dir": "r"},
                                generated_at=0.0)
    trace = read_document(json.loads(json.dumps(cut))).lanes["dense"].trace
    assert trace is not None and trace.recorded_rate_rps == pytest.approx(RECORDED_RPS)
    assert trace.max_factor == pytest.approx(TRUE_FACTOR, rel=1e-6) and trace.trace.sha256 is None
