"""render_prometheus_config: structure, quoting and validation (read back with a YAML parser)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from satbench.exporter.promconfig import (
    EXPORTER_JOB,
    LOADGEN_JOB,
    ScrapeTarget,
    format_duration,
    render_prometheus_config,
)


@pytest.mark.parametrize(("seconds", "text"), [(1.0, "1s"), (15, "15s"), (0.25, "250ms"), (1.5, "1500ms")])
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


@pytest.mark.parametrize("seconds", [0, -1, 0.0001])
def test_format_duration_rejects(seconds: float) -> None:
    with pytest.raises(ValueError):
        format_duration(seconds)


def test_structure_and_quoting() -> None:
    targets = [
        ScrapeTarget(EXPORTER_JOB, "127.0.0.1:9101", {"lane": "dense", "node": "n1"}),
        ScrapeTarget(EXPORTER_JOB, "127.0.0.1:9102", {"lane": 'we"ird: {lane}', "node": "n1"}),
        ScrapeTarget(LOADGEN_JOB, "localhost:9110"),
    ]
    text = render_prometheus_config(targets, [Path("/r/a.yml"), Path("/r/b c.yml")])
    doc = yaml.safe_load(text)
    assert doc["global"] == {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"}
    assert doc["rule_files"] == ["/r/a.yml", "/r/b c.yml"]
    jobs = {job["job_name"]: job for job in doc["scrape_configs"]}
    assert list(jobs) == [EXPORTER_JOB, LOADGEN_JOB]
    assert jobs[EXPORTER_JOB]["static_configs"] == [
        {"targets": ["127.0.0.1:9101"], "labels": {"lane": "dense", "node": "n1"}},
        {"targets": ["127.0.0.1:9102"], "labels": {"lane": 'we"ird: {lane}', "node": "n1"}},
    ]
    assert jobs[LOADGEN_JOB]["static_configs"] == [{"targets": ["localhost:9110"]}]
    assert jobs[LOADGEN_JOB]["metrics_path"] == "/metrics"


def test_no_targets_no_rules() -> None:
    doc = yaml.safe_load(render_prometheus_config([], []))
    assert doc["scrape_configs"] == [] and "rule_files" not in doc


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"job": "bad job", "address": "h:1"}, "job name"),
        ({"job": "j", "address": "http://h:1"}, "host:port"),
        ({"job": "j", "address": "h:1/metrics"}, "host:port"),
        ({"job": "j", "address": "h:1", "labels": {"__address__": "x"}}, "target label"),
        ({"job": "j", "address": "h:1", "labels": {"la-ne": "x"}}, "target label"),
        ({"job": "j", "address": "h:1", "metrics_path": "metrics"}, "metrics_path"),
    ],
)
def test_scrape_target_validation(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ScrapeTarget(**kwargs)


def test_one_metrics_path_per_job() -> None:
    targets = [ScrapeTarget("j", "h:1"), ScrapeTarget("j", "h:2", metrics_path="/other")]
    with pytest.raises(ValueError, match="mixes metrics paths"):
        render_prometheus_config(targets, [])
