"""The session's readiness check "Prometheus has scraped these targets since t", over a mock targets API."""

from __future__ import annotations

import json

import httpx
import pytest

from satbench.session.prometheus import _unix, remote_write_lag, wait_remote_written, wait_scraped_since


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


def _self_metrics(*pages: tuple[float, list[float]]) -> httpx.Client:
    """Prometheus' own /metrics, one page per request (the last repeats): its newest stored sample and each
    remote_write queue's newest sent one."""
    texts = [("# TYPE prometheus_remote_storage_highest_timestamp_in_seconds gauge\n"
              f"prometheus_remote_storage_highest_timestamp_in_seconds {stored}\n"
              "# TYPE prometheus_remote_storage_queue_highest_sent_timestamp_seconds gauge\n"
              + "".join(f'prometheus_remote_storage_queue_highest_sent_timestamp_seconds{{remote_name="q{i}"}} {s}\n'
                        for i, s in enumerate(sent))) for stored, sent in pages]
    calls = iter(range(10**6))

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text=texts[min(next(calls), len(texts) - 1)])

    return httpx.Client(transport=httpx.MockTransport(answer))


def test_the_end_waits_until_every_queue_sent_what_was_stored_when_it_began() -> None:
    # stored 100 when the wait began; scraping goes on (stored grows), and the slower queue reaches 100 later:
    # done then, not when it catches up with a target that keeps moving
    client = _self_metrics((100.0, [99.0, 98.0]), (101.0, [100.5, 99.5]), (102.0, [101.0, 100.0]),
                           (103.0, [102.0, 101.0]))
    assert wait_remote_written("http://prom", timeout_s=5.0, client=client)
    assert remote_write_lag(client.get("http://prom/metrics").text) == (103.0, 101.0)


def test_a_queue_that_never_catches_up_or_no_queue_is_a_timeout_not_an_exception() -> None:
    assert not wait_remote_written("http://prom", timeout_s=0.3, client=_self_metrics((100.0, [50.0])))
    assert not wait_remote_written("http://prom", timeout_s=0.3, client=_self_metrics((100.0, [])))
