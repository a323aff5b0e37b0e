"""The trace answer where its readers read it: the document (``lanes.<key>.trace``), the capability fragment
and the ``/metrics`` families, from the trace rungs of ``tests.recommender.trace_scenario``: 1x, 2x, 4x and 8x
of a 2 requests/s window at 100 %, 99 %, 95 % and 50 % attainment, which crosses the 90 % target at 4.444x,
bound by the TTFT objective: the crossing can lie anywhere between 4x and 8x, so the answer is ``undecided``
(its interval does not hold it within 10 %), stated with that interval. The same scenario with the backlog
growing at 8x is one whose 8x rung draws no attainment (not sustained): the answer is then 4x, the last rung
the lane sustained. A lane that replayed no
trace says nothing of one, so every document written before stays the same.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from satbench.answer.document import read_document
from satbench.answer.policy import Policy
from satbench.recommender.capabilities import capability_fragment
from satbench.recommender.metrics import exposition
from satbench.recommender.run_analysis import document_from_figures
from satbench.report.traces import trace_sentence
from tests.recommender.trace_scenario import EVIDENCE, RECORDED_RPS, TRUE_FACTOR, scenario


def _document(**case: bool) -> dict[str, Any]:
    manifest, figures = scenario(**case)
    doc = document_from_figures(manifest, figures, policy=Policy(), source={"kind": "records", "run_dir": "r"},
                                generated_at=0.0)
    return json.loads(json.dumps(doc))


def test_the_trace_answer_is_in_the_document_in_factors_with_its_evidence() -> None:
    lane = read_document(_document()).lanes["dense"]
    assert lane.rate is None, "trace rungs are not open-loop rate rungs"
    trace = lane.trace
    assert trace is not None and trace.status == "undecided"
    assert trace.reason is not None and trace.reason.startswith("the factor's interval [4, 8] x does not hold")
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
    trace = read_document(_document(grows=True)).lanes["dense"].trace
    assert trace is not None and trace.status == "undecided" and trace.binding_objective == "sustained"
    assert trace.max_factor == pytest.approx(4.0) and trace.curve[-1].sustained is False


def test_capabilities_and_metrics_say_the_trace_answer() -> None:
    doc = _document()
    entry = capability_fragment(doc)["lanes"]["dense"]
    assert entry["trace_max_factor"] == pytest.approx(TRUE_FACTOR, rel=1e-6)
    assert entry["trace_status"] == "undecided" and entry["trace_sha256"] == EVIDENCE["sha256"]
    assert entry["trace_max_rate_rps"] == pytest.approx(TRUE_FACTOR * RECORDED_RPS, rel=1e-6)
    assert "max_rate_rps" not in entry
    factor = doc["lanes"]["dense"]["trace"]["max_factor"]
    assert f'satbench_trace_max_factor{{lane="dense",status="undecided"}} {float(factor)!r}' in exposition(doc)


def test_a_lane_that_replayed_no_trace_says_nothing_of_one() -> None:
    doc = _document(traced=False)
    assert "trace" not in doc["lanes"]["dense"], "a document without a trace keeps its bytes"
    assert read_document(doc).lanes["dense"].trace is None
    assert not any(k.startswith("trace_") for k in capability_fragment(doc)["lanes"]["dense"])
    assert "satbench_trace_max_factor{" not in exposition(doc)


def test_trace_rungs_without_the_manifest_evidence_read_the_recorded_rate_from_their_factor() -> None:
    """A manifest cut short before its ``traces`` entry: each rung's rate over its factor is the recorded rate."""
    trace = read_document(_document(evidence=False)).lanes["dense"].trace
    assert trace is not None and trace.recorded_rate_rps == pytest.approx(RECORDED_RPS)
    assert trace.max_factor == pytest.approx(TRUE_FACTOR, rel=1e-6) and trace.trace.sha256 is None


def test_an_interval_with_no_bound_above_is_written_and_read_as_null() -> None:
    """The 8x rung attains 89 % of 400: its interval straddles the 90 % target, so no rung's interval lies wholly
    below it and the crossing has no bound above. JSON has no infinity: the document says null there (it failed
    to validate before), and the report says so in words."""
    manifest, figures = scenario()
    figures["dense"] = [replace(s, attained_requests=356, attainment=0.89, goodput_rps=16 * 0.89)
                        if s.rate_rps == 16.0 else s for s in figures["dense"]]
    doc = document_from_figures(manifest, figures, policy=Policy(), source={"kind": "records", "run_dir": "r"},
                                generated_at=0.0)
    trace = read_document(json.loads(json.dumps(doc))).lanes["dense"].trace
    assert trace is not None and trace.status == "undecided" and trace.interval is not None
    assert trace.interval[1] is None and trace.interval[0] == pytest.approx(4.0)
    assert "no bound above" in (trace.reason or "") and "no bound above" in trace_sentence(trace)
