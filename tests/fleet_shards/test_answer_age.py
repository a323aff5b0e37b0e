"""How old each answer is, in the recommender's series: the time its last window ended, so that
``time() - satbench_recommendation_measured_timestamp_seconds`` is the answer's age at any instant."""

from __future__ import annotations

from datetime import UTC, datetime

from satbench.recommender.metrics import exposition
from testkit.exposition import samples


def test_each_measured_answer_publishes_when_it_was_measured_and_an_unmeasured_one_nothing() -> None:
    doc = {"schema": "satbench.recommendations/v2", "lanes": {
        "a/dense": {"node": "a", "lane": "dense", "status": "ok", "recommended_concurrency": 4,
                    "measured_at": "2026-12-01T16:13:16Z"},
        "dense": {"status": "ok", "recommended_concurrency": 2, "measured_at": "2026-11-30T00:00:00Z"},
        "b/dense": {"node": "b", "lane": "dense", "status": "insufficient_data", "recommended_concurrency": None,
                    "measured_at": None}}}
    got = samples(exposition(doc))
    name = "satbench_recommendation_measured_timestamp_seconds"
    assert got[(name, (("lane", "dense"), ("node", "a")))] == datetime(2026, 12, 1, 16, 13, 16, tzinfo=UTC).timestamp()
    assert got[(name, (("lane", "dense"),))] == datetime(2026, 11, 30, tzinfo=UTC).timestamp()
    assert not any(k[0] == name and ("node", "b") in k[1] for k in got)
