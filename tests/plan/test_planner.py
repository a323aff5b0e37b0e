"""The plan's arithmetic and what it rests on, over fleets whose answers the test chose: every expected count is
worked out here from the answers (``ceil(target / conservative figure)``), never read from the planner."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from satbench.answer.document import read_document
from satbench.core.lane_evidence import FingerprintModel
from satbench.plan.answers import node_kind
from satbench.plan.planner import KindPlan, Plan, nodes_needed, plan
from tests.plan.documents import document, lane, rate_block

NP4 = {"digest": "sha256:np4", "runtime": {"build": "b6000"}, "model": {"path": "dense.gguf", "files": None},
       "settings": {"slots": 4, "batch": 2048, "ubatch": 512}, "hardware": {"gpu": "H100", "gpu_count": 1}}
NP2 = {**NP4, "digest": "sha256:np2", "settings": {"slots": 2, "batch": 2048, "ubatch": 512}}


def planned(lanes: dict[str, dict[str, Any]], target: str, amount: float, **options: Any) -> Plan:
    return plan(read_document(document(lanes)), target, amount, **options)  # type: ignore[arg-type]


def only_kind(result: Plan) -> KindPlan:
    (lane_plan,) = result.lanes
    (kind,) = lane_plan.kinds
    return kind


@pytest.mark.parametrize(("amount", "per_node", "nodes"), [
    (10.0, 3.0, 4), (9.0, 3.0, 3), (0.5, 3.0, 1), (0.7, 0.1, 7), (0.30000000000000004, 0.1, 3), (12.0, 11.99, 2),
])
def test_nodes_needed_is_the_ceiling_of_the_target_over_one_node(amount: float, per_node: float, nodes: int) -> None:
    assert nodes_needed(amount, per_node) == nodes


@pytest.mark.parametrize(("rate", "nodes", "at_point", "fails"), [
    (10.0, 3, 2, None),   # 10/4 = 2.5 -> 3; two nodes would carry 5 each, the answer itself
    (13.0, 4, 3, None),   # three would carry 4.33, within the answer
    (7.0, 2, 2, True),    # one would carry 7, above the interval's upper end 6
    (5.5, 2, 2, None),    # one would carry 5.5: above the answer 5, within its interval
])
def test_a_rate_plan_reads_the_interval_at_its_lower_end(rate: float, nodes: int, at_point: int,
                                                         fails: bool | None) -> None:
    kind = only_kind(planned({"a/dense": lane("a", "dense", 4, fingerprint=NP4, rate=rate_block(5.0, [4.0, 6.0]))},
                             "rate", rate))
    assert (kind.nodes, kind.nodes_at_point, kind.per_node, kind.one_fewer_fails) == (nodes, at_point, 4.0, fails)
    assert kind.load_per_node == pytest.approx(rate / nodes)
    assert kind.headroom == pytest.approx(4.0 / (rate / nodes) - 1)
    assert (kind.slots, kind.concurrency, kind.nodes_in_fleet) == (4, 4, 1)
    (used,) = kind.answers
    assert (used.key, used.run_id, used.age_s, used.validity, used.point) == ("a/dense", "r-a", 3600.0, "valid", 5.0)


def rung(rate: float, offered: float, low: float, *, passed: bool = True) -> dict[str, Any]:
    return {"rate_rps": rate, "offered_rps": offered, "valid": True, "sustained": True, "attainment": 0.97,
            "attainment_interval": [low, 1.0], "goodput_rps": offered, "goodput_tok_s": None, "passed": passed,
            "missed_most": None, "latency_mean_s": 0.5, "ttft_p95_s": 0.3}


def test_a_rung_that_passed_decided_is_a_lower_bound_where_the_interval_reaches_zero() -> None:
    curve = [rung(2.0, 2.1, 0.95), rung(3.0, 2.8, 0.93), rung(3.5, 3.5, 0.85), rung(4.5, 4.5, 0.2, passed=False)]
    rate = rate_block(4.0, [0.0, 4.5], status="undecided", curve=curve)
    kind = only_kind(planned({"a/dense": lane("a", "dense", 4, fingerprint=NP4, rate=rate)}, "rate", 10.0))
    # 3.0 offered 2.8 passed with its interval above 0.9; 3.5 did not show it (0.85): 2.8 is the most promised
    assert (kind.per_node, kind.nodes, kind.nodes_at_point) == (2.8, 4, 3)
    assert "decided" in kind.answers[0].basis


def test_a_rate_answer_promising_no_rate_is_not_used_and_says_why() -> None:
    curve = [rung(2.0, 2.1, 0.85)]
    rate = rate_block(4.0, [0.0, 4.5], status="undecided", curve=curve)
    result = planned({"a/dense": lane("a", "dense", 4, fingerprint=NP4, rate=rate)}, "rate", 10.0)
    assert result.lanes[0].kinds == [] and "interval reaches 0" in result.lanes[0].not_used[0].why


def test_an_unsaturated_rate_answer_is_a_lower_bound_with_nothing_above() -> None:
    rate = rate_block(3.0, None, status="unsaturated")
    kind = only_kind(planned({"a/dense": lane("a", "dense", 4, fingerprint=NP4, rate=rate)}, "rate", 7.0))
    assert (kind.nodes, kind.per_node, kind.one_fewer_fails) == (3, 3.0, None)
    assert "lower bound" in kind.answers[0].basis


def test_a_rate_target_does_not_turn_a_concurrency_answer_into_a_rate() -> None:
    result = planned({"a/dense": lane("a", "dense", 4, fingerprint=NP4)}, "rate", 5.0)
    assert result.lanes[0].kinds == []
    why = result.lanes[0].not_used[0].why
    assert "Little's law" in why and "--users" in why


@pytest.mark.parametrize(("users", "steps", "nodes", "load", "fails"), [
    (10, (1, 2, 4, 8), 3, 4.0, None),   # 3 nodes carry at most 4; 2 would carry 5, below the next rung 8
    (10, (2, 4, 5), 3, 4.0, True),      # 2 would carry 5, the rung the walk stopped at
    (4, (2, 4, 8), 1, 4.0, None),
    (17, (4, 8), 5, 4.0, None),         # 5 nodes carry at most ceil(17/5) = 4; 4 would carry 5, below 8
])
def test_a_users_plan_counts_the_busiest_node(users: int, steps: tuple[int, ...], nodes: int, load: float,
                                              fails: bool | None) -> None:
    kind = only_kind(planned({"a/dense": lane("a", "dense", 4, fingerprint=NP4, steps=steps)}, "users", users))
    assert (kind.nodes, kind.load_per_node, kind.per_node) == (nodes, load, 4.0)
    assert kind.one_fewer_fails is fails


def test_an_undecided_concurrency_answer_plans_from_the_smaller_side_of_its_doubling() -> None:
    undecided = {"smaller": 4, "larger": 8, "gain": 0.2, "interval": [0.05, 0.4]}
    answer = lane("a", "dense", 8, fingerprint=NP4, status="undecided", undecided=undecided, steps=(4, 8, 16))
    kind = only_kind(planned({"a/dense": answer}, "users", 20))
    assert (kind.per_node, kind.nodes, kind.nodes_at_point) == (4.0, 5, 3)


def fleet() -> dict[str, dict[str, Any]]:
    changed = lane("b", "dense", 6, fingerprint=NP4, state="changed", status="stale", rate=rate_block(9.0, [8, 10]),
                   reason="measured on something else: settings.slots 4 -> 2")
    return {
        "a/dense": lane("a", "dense", 4, fingerprint=NP4, rate=rate_block(10.0, [9.0, 11.0])),
        "b/dense": changed,
        "c/dense": lane("c", "dense", 4, fingerprint=NP4, state="unknown", rate=rate_block(8.0, [7.0, 9.0])),
        "e/dense": lane("e", "dense", 4, fingerprint=None, rate=rate_block(8.0, [7.0, 9.0])),
        "f/dense": lane("f", "dense", 2, fingerprint=NP2, rate=rate_block(5.0, [4.5, 5.5])),
        "a/moe": lane("a", "moe", None, fingerprint=NP4),
    }


def test_stale_changed_unchecked_and_unanswered_lanes_are_listed_not_used() -> None:
    doc = document(fleet())
    doc["nodes"]["d"] = {"labels": {}, "lanes": ["d/dense"]}
    result = plan(read_document(doc), "rate", 20.0)
    dense, moe = result.lanes
    why = {n.key: n.why for n in dense.not_used}
    assert set(why) == {"b/dense", "c/dense", "d/dense", "e/dense"}
    assert why["b/dense"].startswith("stale: measured on something else")
    assert why["c/dense"].startswith("validity unknown") and "--unchecked" in why["c/dense"]
    assert "no answer" in why["d/dense"] and "no fingerprint" in why["e/dense"]
    assert [a.key for k in dense.kinds for a in k.answers] == ["a/dense", "f/dense"]
    assert moe.kinds == [] and "no answer" in moe.not_used[0].why
    unchecked = plan(read_document(doc), "rate", 20.0, unchecked=True)
    assert {a.key for k in unchecked.lanes[0].kinds for a in k.answers} == {"a/dense", "c/dense", "f/dense"}


def test_mixed_kinds_get_a_count_each_and_the_fewest_is_cheapest() -> None:
    result = plan(read_document(document(fleet())), "rate", 20.0, unchecked=True, lanes=["dense"])
    (dense,) = result.lanes
    np4, np2 = dense.kinds
    # np4: a (9) and c (7, unchecked) are one kind, planned from the lesser: ceil(20 / 7) = 3; np2: ceil(20 / 4.5) = 5
    assert (np4.slots, np4.per_node, np4.nodes, np4.nodes_in_fleet) == (4, 7.0, 3, 2)
    assert (np2.slots, np2.per_node, np2.nodes, np2.nodes_in_fleet) == (2, 4.5, 5, 1)
    assert dense.cheapest == np4.kind != np2.kind


def test_a_stale_document_plans_nothing() -> None:
    doc = document({"a/dense": lane("a", "dense", 4, fingerprint=NP4, status="stale", last_status="ok",
                                    reason="source unreachable; serving the answer of 10:00")}, stale=True)
    result = plan(read_document(doc), "users", 8)
    assert result.lanes[0].kinds == [] and result.lanes[0].not_used[0].why.startswith("stale: source unreachable")


def test_the_age_is_the_documents_else_counted_from_when_it_was_measured() -> None:
    answer = lane("a", "dense", 4, fingerprint=NP4, age_s=None)
    now = datetime(2026, 12, 5, 9, 30, tzinfo=UTC)  # measured 09:00
    kind = only_kind(plan(read_document(document({"a/dense": answer})), "users", 8, now=now))
    assert kind.answers[0].age_s == 1800.0
    assert kind.answers[0].measured_at == "2026-12-05T09:00:00Z"


def test_the_target_must_be_a_finite_number_above_zero() -> None:
    doc = read_document(document({"a/dense": lane("a", "dense", 4, fingerprint=NP4)}))
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="target"):
            plan(doc, "users", bad)


@pytest.mark.parametrize(("change", "same"), [
    ({"digest": "sha256:other", "unknown": {"hardware.driver": "not said"}}, True),
    ({"hardware": {**NP4["hardware"], "driver": "570.1"}}, True),
    ({"hardware": {**NP4["hardware"], "cpu": "another CPU"}}, False),
    ({"settings": {**NP4["settings"], "ubatch": 256}}, False),
    ({"hardware": {"gpu": "L40S", "gpu_count": 1}}, False),
    ({"model": {"path": "dense-q4.gguf", "files": None}}, False),
    ({"runtime": {"build": "b6001"}}, False),
])
def test_a_node_kind_is_what_decides_capacity_not_the_digest_nor_the_driver(change: dict[str, Any], same: bool) -> None:
    kind, said, slots = node_kind(FingerprintModel.model_validate(NP4))
    other = node_kind(FingerprintModel.model_validate({**NP4, **change}))[0]
    assert (other == kind) is same
    assert (said, slots) == ("dense.gguf, slots 4, batch 2048/512, 1x H100", 4)


def test_an_answer_from_a_run_that_did_not_finish_says_so() -> None:
    answer = lane("a", "dense", 4, fingerprint=NP4, partial="run r-a killed mid-walk")
    kind = only_kind(planned({"a/dense": answer}, "users", 8))
    assert kind.answers[0].basis.endswith("from a run that did not finish: run r-a killed mid-walk")
