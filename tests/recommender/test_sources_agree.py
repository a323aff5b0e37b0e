"""Both sources on the same run: Prometheus (binned, at request end) and records (exact) must agree.

Quantiles agree within the histogram bucket resolution (geometric buckets, ratio 2**(1/16): 4.4 %; the
DESIGN target is 5 %). Throughput differs only at the window edges: Prometheus counts a request's tokens
when it ends, the records when they arrive, so at most one request per user straddles the window, c * O
tokens. Both answers equal the analytic one of the synthetic lanes: throughput grows until c = slots.
"""

from __future__ import annotations

import itertools
import json
import math
from typing import Any

import jsonschema
import pytest

from satbench.answer.policy import Policy
from satbench.recommender.run_analysis import analyze_run
from satbench.recommender.schema import SCHEMA_PATH
from testkit.synthetic import SyntheticLane
from tests.recommender.conftest import LADDER, LANES, STARVING, UNFAIR, WINDOW_S, SyntheticRun

pytestmark = pytest.mark.slow

POLICY = Policy()
BUCKET_RESOLUTION = 0.05


@pytest.fixture(scope="module")
def documents(synthetic_run: SyntheticRun) -> tuple[dict[str, Any], dict[str, Any]]:
    prom = analyze_run(synthetic_run.manifest, prometheus_url=synthetic_run.prometheus_url, run_dir=None,
                       policy=POLICY)
    rec = analyze_run(synthetic_run.manifest, prometheus_url=None, run_dir=synthetic_run.run_dir,
                      policy=POLICY)
    return prom, rec


def analytic_recommendation(lane: SyntheticLane, ladder: tuple[int, ...], policy: Policy) -> int:
    """The same walk on the model's exact throughput: the last rung before gain/doubling < policy."""
    best = ladder[0]
    for lo, hi in itertools.pairwise(ladder):
        ratio = lane.expected_throughput(hi) / lane.expected_throughput(lo)
        gain = ratio ** (1 / math.log2(hi / lo)) - 1
        if gain < policy.min_gain_per_doubling:
            break
        best = hi
    return best


def test_documents_validate_against_the_committed_schema(documents: tuple[dict[str, Any], ...]) -> None:
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    for doc in documents:
        jsonschema.validate(doc, schema)
    assert [d["source"]["kind"] for d in documents] == ["prometheus", "records"]


@pytest.mark.parametrize("lane", LANES, ids=lambda lane: lane.name)
def test_both_sources_give_the_analytic_answer(documents: tuple[dict[str, Any], ...],
                                               lane: SyntheticLane) -> None:
    expected = analytic_recommendation(lane, LADDER, POLICY)
    assert expected == lane.slots
    for doc in documents:
        answer = doc["lanes"][lane.name]
        assert (answer["status"], answer["recommended_concurrency"], answer["binding_constraint"]) == (
            "ok", expected, "throughput_plateau")
        assert answer["saturation_concurrency"] == expected


def test_the_two_lanes_get_different_answers(documents: tuple[dict[str, Any], ...]) -> None:
    for doc in documents:
        lanes = doc["lanes"]
        assert lanes["dense"]["recommended_concurrency"] != lanes["moe"]["recommended_concurrency"]


@pytest.mark.parametrize("lane", LANES, ids=lambda lane: lane.name)
def test_step_figures_agree_within_bucket_resolution(documents: tuple[dict[str, Any], ...],
                                                     lane: SyntheticLane) -> None:
    prom, rec = (d["lanes"][lane.name]["steps"] for d in documents)
    assert [s["concurrency"] for s in prom] == [s["concurrency"] for s in rec] == list(LADDER)
    for p, r in zip(prom, rec, strict=True):
        c = p["concurrency"]
        for name in ("ttft_s", "itl_s", "latency_s", "tpot_s"):
            assert p[name]["p95"] is not None and r[name]["p95"] is not None, (c, name)
            assert p[name]["p95"] == pytest.approx(r[name]["p95"], rel=BUCKET_RESOLUTION), (c, name)
        edge = c * lane.output_tokens / WINDOW_S
        assert abs(p["throughput_tok_s"] - r["throughput_tok_s"]) <= edge + 0.02 * r["throughput_tok_s"], c
        assert abs(p["requests"] - r["requests"]) <= c
        assert p["jain"] > 0.99 and r["jain"] > 0.99
        for name in ("cache_hit_share", "spec_acceptance_rate", "cache_reported_prompt_tokens", "draft_tokens"):
            assert p[name] == r[name], (c, name)  # published with the step: one number both ways
        if lane.cached_prompt_tokens is not None:
            assert r["cache_hit_share"] == pytest.approx(lane.cached_prompt_tokens / lane.prompt_tokens)
            assert r["spec_acceptance_rate"] == pytest.approx(0.75)
        else:
            assert r["cache_hit_share"] is None and r["spec_acceptance_rate"] is None


def test_decode_starvation_flagged_by_both_sources(documents: tuple[dict[str, Any], ...]) -> None:
    for doc in documents:
        starving, fair = doc["lanes"][STARVING.name], doc["lanes"]["dense"]
        answer = (starving["recommended_concurrency"], starving["binding_constraint"])
        assert answer == (1, "decode_starvation")
        assert all(not s["violations"] for s in fair["steps"])
        assert starving["starvation"]["decode_by_rung"] == {"1": "not_applicable", "2": "flagged", "4": "flagged"}
        limit = POLICY.slo.tbt_p99_s or 0.0
        assert max(s["pause_s"]["p99"] for s in fair["steps"]) < limit < starving["steps"][1]["pause_s"]["p99"]


def test_unfair_admission_flagged_by_both_sources(documents: tuple[dict[str, Any], ...]) -> None:
    for doc in documents:
        unfair = doc["lanes"][UNFAIR.name]
        assert (unfair["recommended_concurrency"], unfair["binding_constraint"]) == (1, "fairness")
        assert unfair["steps"][1]["user_itl_ratio"] > POLICY.max_user_itl_ratio  # user 0 decodes 3x faster


def test_memory_headroom_from_prometheus(documents: tuple[dict[str, Any], ...]) -> None:
    prom, rec = documents
    memory = prom["lanes"]["dense"]["steps"][0]["memory_bytes"]
    assert memory["gpu_max"] == 6e9 and memory["gpu_total"] == 8e9  # the fullest GPU: what headroom reads
    assert (memory["gpu_sum_max"], memory["gpu_sum_total"], memory["gpu_count"]) == (8e9, 16e9, 2)
    assert (memory["gpu_names"], memory["gpu_simulated"]) == ("NVIDIA H200", False)
    assert rec["lanes"]["dense"]["steps"][0]["memory_bytes"]["gpu_max"] is None


def test_a_window_prometheus_missed_is_flagged_then_taken_from_records(synthetic_run: SyntheticRun) -> None:
    prom_only = analyze_run(synthetic_run.manifest, prometheus_url=synthetic_run.prometheus_url, run_dir=None,
                            policy=POLICY)
    gappy = prom_only["lanes"]["gappy"]
    assert (gappy["status"], gappy["recommended_concurrency"]) == ("degraded", 1)
    assert "missed scrapes" in (gappy["steps"][1]["unusable_reason"] or "")
    hybrid = analyze_run(synthetic_run.manifest, prometheus_url=synthetic_run.prometheus_url,
                         run_dir=synthetic_run.run_dir, policy=POLICY)
    assert hybrid["source"]["kind"] == "prometheus"
    assert [n for n in hybrid["notes"] if n.startswith("gappy c=2: figures from the run's records")]
    lane = hybrid["lanes"]["gappy"]
    answer = (lane["status"], lane["recommended_concurrency"], lane["binding_constraint"])
    assert answer == ("unsaturated", 4, "ladder_top")


def test_unreachable_prometheus_falls_back_to_records(synthetic_run: SyntheticRun) -> None:
    from testkit.net import free_port

    doc = analyze_run(synthetic_run.manifest, prometheus_url=f"http://127.0.0.1:{free_port()}",
                      run_dir=synthetic_run.run_dir, policy=POLICY)
    assert doc["source"]["kind"] == "records"
    assert "unreachable" in doc["notes"][0] and "records" in doc["notes"][0]
    assert doc["lanes"]["dense"]["recommended_concurrency"] == 4
