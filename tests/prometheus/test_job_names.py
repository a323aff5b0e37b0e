"""One source of scrape job names: ``exporter.promconfig``'s constants. The session's generated config uses
them; the committed Prometheus configs (the fixed stack's and compose's), the docs' scrape examples, every
``job`` matcher of the rules and the job labels of the promtool tests must name exactly the same jobs."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from satbench.exporter.promconfig import (
    EXPORTER_JOB,
    LOADGEN_JOB,
    RECOMMENDER_JOB,
    ScrapeTarget,
    render_prometheus_config,
)

ROOT = Path(__file__).resolve().parents[2]
JOBS = {EXPORTER_JOB, LOADGEN_JOB, RECOMMENDER_JOB}
CONFIGS = [ROOT / "prometheus" / "prometheus.yml", ROOT / "compose" / "prometheus.yml"]
RULE_FILES = sorted((ROOT / "prometheus" / "rules").glob("*.yml"))
RULE_TESTS = sorted((ROOT / "prometheus" / "tests").glob("*.yml"))
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# a label matcher on job inside PromQL or a series selector: job="x", job != "x", job=~"x|y"
_JOB_MATCHER = re.compile(r"""\bjob\s*(=~|!~|!=|=)\s*(["'`])(.*?)\2""")
# a fenced yaml block in Markdown, possibly indented under a list item
_YAML_FENCE = re.compile(r"^([ \t]*)```ya?ml[ \t]*\n(.*?)^\1```", re.MULTILINE | re.DOTALL)


def _job_names(doc: Any) -> list[str]:
    """Every ``job_name`` in a parsed Prometheus config or a fragment of one (a list of scrape configs)."""
    if isinstance(doc, dict):
        found = [doc["job_name"]] if "job_name" in doc else []
        return found + [name for value in doc.values() for name in _job_names(value)]
    if isinstance(doc, list):
        return [name for item in doc for name in _job_names(item)]
    return []


def _matchers(text: str) -> list[tuple[str, str]]:
    return [(op, value) for op, _, value in _JOB_MATCHER.findall(text)]


def test_the_constants_are_distinct_valid_job_names() -> None:
    assert len(JOBS) == 3
    targets = [ScrapeTarget(job, "127.0.0.1:1") for job in sorted(JOBS)]  # validates each name
    doc = yaml.safe_load(render_prometheus_config(targets, []))
    assert sorted(_job_names(doc)) == sorted(JOBS)


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: str(p.relative_to(ROOT)))
def test_committed_configs_name_exactly_the_constants(config: Path) -> None:
    names = _job_names(yaml.safe_load(config.read_text()))
    assert sorted(names) == sorted(JOBS), f"{config.relative_to(ROOT)} scrapes jobs {names}, not {sorted(JOBS)}"


def test_docs_scrape_examples_use_the_constants() -> None:
    examples: dict[str, list[str]] = {}
    for doc in DOCS:
        if not doc.exists():
            continue
        for indent, body in _YAML_FENCE.findall(doc.read_text()):
            if "job_name" not in body:
                continue
            text = textwrap.dedent("\n".join(line.removeprefix(indent) for line in body.splitlines()))
            names = _job_names(yaml.safe_load(text))
            assert names, f"{doc.relative_to(ROOT)}: a yaml example mentions job_name but none parses:\n{body}"
            examples.setdefault(str(doc.relative_to(ROOT)), []).extend(names)
    assert examples.get("docs/real-nodes.md") == [EXPORTER_JOB], examples
    for where, names in examples.items():
        assert set(names) <= JOBS, f"{where} names jobs {names}; use {sorted(JOBS)} (exporter.promconfig)"


def test_every_job_matcher_in_the_rules_is_a_constant() -> None:
    found: list[tuple[str, str, str]] = []
    for path in RULE_FILES:
        for group in yaml.safe_load(path.read_text())["groups"]:
            for rule in group["rules"]:
                name = rule.get("alert") or rule.get("record")
                found += [(name, op, value) for op, value in _matchers(rule["expr"])]
                assert rule.get("labels", {}).get("job", EXPORTER_JOB) in JOBS, name
    assert ("SatbenchExporterDown", "=", EXPORTER_JOB) in found
    for name, op, value in found:
        assert op == "=" and value in JOBS, f"{name}: job{op}{value!r} is not one of {sorted(JOBS)}"


@pytest.mark.parametrize("test_file", RULE_TESTS, ids=lambda p: p.name)
def test_promtool_tests_use_the_constants(test_file: Path) -> None:
    text = test_file.read_text()
    doc = yaml.safe_load(text)
    for op, value in _matchers(text):
        assert op == "=" and value in JOBS, f"{test_file.name}: job{op}{value!r}"
    for test in doc["tests"]:
        for case in test.get("alert_rule_test", []):
            for alert in case["exp_alerts"]:
                assert alert["exp_labels"].get("job", EXPORTER_JOB) in JOBS, (test["name"], alert)
