"""The session's readiness check "Prometheus has scraped these targets since t", over a mock targets API."""

from __future__ import annotations

import json

import httpx
import pytest

from satbench.session.prometheus import _unix, wait_scraped_since


@pytest.mark.parametrize(
    ("stamp", "expected"),
    [
        ("2026-12-01T11:22:39.123456789Z", 1796124159.123456),  # Prometheus' nanoseconds, cut to micro
        ("2026-12-01T11:22:39Z", 1796124159.0),
        ("2026-12-01T12:22:39.5+01:00", 1796124159.5),
        ("0001-01-01T00:00:00Z", -62135596800.0),  # never scraped: long before any window
        ("not a time", None),
    ],
)
def test_prometheus_stamps_parse(stamp: str, expected: float | None) -> None:
    got = _unix(stamp)
    assert got == (None if expected is None else pytest.approx(expected, abs=1e-6))


def _targets(*last: tuple[str, str]) -> httpx.Client:
    body = {"data": {"activeTargets": [{"labels": {"job": job}, "lastScrape": when} for job, when in last]}}
    return httpx.Client(transport=httpx.MockTransport(lambda request: httpx.Response(200, text=json.dumps(body))))


def test_ready_once_every_target_of_the_jobs_was_scraped_after_the_time() -> None:
    since = _unix("2026-12-01T11:22:39Z") or 0.0
    client = _targets(("exporter", "2026-12-01T11:22:40.1Z"), ("loadgen", "2026-12-01T11:22:39.9Z"),
                      ("other", "2026-12-01T10:00:00Z"))  # a job not asked about does not hold the wait
    assert wait_scraped_since("http://prom", since, ("exporter", "loadgen"), timeout_s=1.0, client=client)


def test_a_target_not_scraped_since_is_a_timeout_not_an_exception() -> None:
    since = _unix("2026-12-01T11:22:39Z") or 0.0
    client = _targets(("exporter", "2026-12-01T11:22:40Z"), ("loadgen", "2026-12-01T11:22:38Z"))
    assert not wait_scraped_since("http://prom", since, ("exporter", "loadgen"), timeout_s=0.3, client=client)
    assert not wait_scraped_since("http://prom", since, ("absent",), timeout_s=0.2, client=client)
