"""promtool checks of prometheus/: the config, the rules, and the rule unit tests (fire / do not fire)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from satbench.exporter.promconfig import (
    EXPORTER_JOB,
    LOADGEN_JOB,
    RECOMMENDER_JOB,
    ScrapeTarget,
    render_prometheus_config,
)
from testkit.prom import promtool_binary

PROM_DIR = Path(__file__).resolve().parents[2] / "prometheus"
RULE_FILES = sorted((PROM_DIR / "rules").glob("*.yml"))
RULE_TESTS = sorted((PROM_DIR / "tests").glob("*.yml"))


def promtool(*args: str, cwd: Path = PROM_DIR) -> subprocess.CompletedProcess[str]:
    binary = promtool_binary()
    if binary is None:
        pytest.fail("promtool is not installed (Debian: apt-get install prometheus); make test needs it")
    return subprocess.run([binary, *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False)


def test_the_folder_has_rules_and_tests() -> None:
    assert [p.name for p in RULE_FILES] == ["satbench.alerts.yml", "satbench.rules.yml"]
    assert {p.name for p in RULE_TESTS} == {"alerts_test.yml", "recording_test.yml"}


def test_check_config() -> None:
    done = promtool("check", "config", "prometheus.yml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 rule files found" in done.stdout + done.stderr


def test_check_rules() -> None:
    done = promtool("check", "rules", *(str(p) for p in RULE_FILES))
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("test_file", RULE_TESTS, ids=lambda p: p.name)
def test_rule_unit_tests(test_file: Path) -> None:
    done = promtool("test", "rules", str(test_file.relative_to(PROM_DIR)))
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_has_a_firing_and_a_silent_case() -> None:
    import yaml

    alerts = {
        rule["alert"]: rule
        for group in yaml.safe_load((PROM_DIR / "rules" / "satbench.alerts.yml").read_text())["groups"]
        for rule in group["rules"]
    }
    fired: set[str] = set()
    silent: set[str] = set()
    for test in yaml.safe_load((PROM_DIR / "tests" / "alerts_test.yml").read_text())["tests"]:
        for case in test["alert_rule_test"]:
            (fired if case["exp_alerts"] else silent).add(case["alertname"])
    assert fired == set(alerts) == silent
    for name, rule in alerts.items():
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}, name
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], name
        assert rule["for"], name


def test_file_sd_example_is_valid_file_sd() -> None:
    groups = json.loads((PROM_DIR / "file_sd" / "exporters.json.example").read_text())
    for group in groups:
        assert set(group) == {"targets", "labels"}
        assert set(group["labels"]) == {"lane", "node"}
        assert all(":" in t for t in group["targets"])


def test_rendered_config_passes_promtool(tmp_path: Path) -> None:
    targets = [
        ScrapeTarget(EXPORTER_JOB, "127.0.0.1:9101", {"lane": "dense", "node": "local"}),
        ScrapeTarget(EXPORTER_JOB, "127.0.0.1:9102", {"lane": 'm"o\\e', "node": "local"}),
        ScrapeTarget(LOADGEN_JOB, "127.0.0.1:9110", {"node": "local"}),
        ScrapeTarget(RECOMMENDER_JOB, "[::1]:9108"),
    ]
    config = tmp_path / "prometheus.yml"
    config.write_text(render_prometheus_config(targets, RULE_FILES, scrape_interval_s=0.5))
    done = promtool("check", "config", str(config), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
