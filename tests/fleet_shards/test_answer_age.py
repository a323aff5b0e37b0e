"""How old each answer is, in the recommender's series: the time its last window ended, so that
``time() - satbench_recommendation_measured_timestamp_seconds`` is the answer's age at any instant."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from satbench.recommender.metrics import exposition
from testkit.exposition import samples


def _answer(status: str, recommended: int | None, measured_at: str | None, **where: str) -> dict[str, Any]:
    """An answer with the fields the schema requires (no steps, nothing flagged)."""
    return {**where, "status": status, "recommended_concurrency": recommended, "saturation_concurrency": None,
            "binding_constraint": None, "throughput_at_recommended_tok_s": None,
            "fairness": {"ok": True, "jain_min": None},
            "starvation": {"ok": True, "decode_stall_max_ratio": None, "prefill_wait_max_s": None},
            "run_id": "r", "measured_at": measured_at, "steps": []}


def test_each_measured_answer_publishes_when_it_was_measured_and_an_unmeasured_one_nothing() -> None:
    doc = {"schema": "satbench.recommendations/v2", "generated_at": "2026-12-01T17:00:00Z", "run_id": "r",
           "source": {"kind": "records"}, "policy": {}, "lanes": {
               "a/dense": _answer("ok", 4, "2026-12-01T16:13:16Z", node="a", lane="dense"),
               "dense": _answer("ok", 2, "2026-11-30T00:00:00Z"),
               "b/dense": _answer("insufficient_data", None, None, node="b", lane="dense")}}
    got = samples(exposition(doc))
    name = "satbench_recommendation_measured_timestamp_seconds"
    assert got[(name, (("lane", "dense"), ("node", "a")))] == datetime(2026, 12, 1, 16, 13, 16, tzinfo=UTC).timestamp()
    assert got[(name, (("lane", "dense"),))] == datetime(2026, 11, 30, tzinfo=UTC).timestamp()
    assert not any(k[0] == name and ("node", "b") in k[1] for k in got)
