"""ScrapeTarget.params: one router exporter scraped once per lane, as ``__param_<name>`` target labels."""

from __future__ import annotations

import pytest
import yaml

from satbench.exporter.promconfig import EXPORTER_JOB, ScrapeTarget, render_prometheus_config


def test_params_render_as_param_labels_of_one_job() -> None:
    targets = [
        ScrapeTarget(EXPORTER_JOB, "127.0.0.1:9101", {"lane": "a"}, params={"model": "org/m:Q4_K_M"}),
        ScrapeTarget(EXPORTER_JOB, "127.0.0.1:9101", {"lane": "b"}, params={"model": 'we"ird {m}'}),
        ScrapeTarget(EXPORTER_JOB, "127.0.0.1:9102", {"lane": "c"}),
    ]
    doc = yaml.safe_load(render_prometheus_config(targets, []))
    (job,) = doc["scrape_configs"]
    assert job["job_name"] == EXPORTER_JOB
    assert [c["labels"] for c in job["static_configs"]] == [
        {"lane": "a", "__param_model": "org/m:Q4_K_M"},
        {"lane": "b", "__param_model": 'we"ird {m}'},
        {"lane": "c"},
    ]
    assert targets[0].static_labels == {"lane": "a", "__param_model": "org/m:Q4_K_M"}


@pytest.mark.parametrize(
    ("params", "message"),
    [({"bad-name": "x"}, "scrape param"), ({"model": ""}, "non-empty"), ({"model": 3}, "non-empty")],
)
def test_bad_params_are_refused(params: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ScrapeTarget(EXPORTER_JOB, "127.0.0.1:9101", params=params)
