"""docker-compose.yml against the Compose Specification JSON Schema plus structural checks.

No Docker engine runs in the test environment, so the file is validated, not started. ``compose_spec.json``
is the Compose Specification schema (Apache-2.0, compose-spec project) as shipped inside the
``docker-compose`` 1.29.2 wheel on PyPI (``compose/config/compose_spec.json``).
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = Path(__file__).with_name("compose_spec.json")
RUNTIME_CREATED = {"./runs", "./models"}  # created by a run, not part of a checkout


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_matches_compose_specification(compose: dict[str, Any]) -> None:
    import json

    schema = json.loads(SCHEMA.read_text())
    validator = jsonschema.Draft7Validator(schema)
    errors = sorted(validator.iter_errors(compose), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)


def test_schema_rejects_a_broken_file(compose: dict[str, Any]) -> None:
    import json

    broken = {**compose, "services": {"x": {"image": "a", "ports": "not-a-list", "bogus": 1}}}
    validator = jsonschema.Draft7Validator(json.loads(SCHEMA.read_text()))
    assert list(validator.iter_errors(broken))


def test_every_service_has_an_image_or_build(compose: dict[str, Any]) -> None:
    for name, svc in compose["services"].items():
        assert svc.get("image") or svc.get("build"), name


def test_published_ports_are_loopback_only(compose: dict[str, Any]) -> None:
    for name, svc in compose["services"].items():
        for port in svc.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"


def test_depends_on_names_exist(compose: dict[str, Any]) -> None:
    names = set(compose["services"])
    for name, svc in compose["services"].items():
        deps = svc.get("depends_on", {})
        for dep in deps if isinstance(deps, list) else deps.keys():
            assert dep in names, f"{name} depends on unknown {dep}"
            cond = deps[dep].get("condition") if isinstance(deps, dict) else None
            if cond == "service_healthy":
                assert "healthcheck" in compose["services"][dep], (
                    f"{name} waits for {dep} health, none defined"
                )


def test_bind_mounts_exist(compose: dict[str, Any]) -> None:
    named = set(compose.get("volumes") or {})
    for name, svc in compose["services"].items():
        for vol in svc.get("volumes", []):
            text = str(vol)
            if text.startswith("${"):  # ${VAR:-default}: check the default
                source = text[2 : text.index("}")].split(":-", 1)[-1]
            else:
                source = text.split(":")[0]
            if source in named:
                continue
            if source in RUNTIME_CREATED:
                continue
            assert (ROOT / source).exists(), f"{name} mounts missing {source}"


def test_long_running_services_have_healthchecks(compose: dict[str, Any]) -> None:
    for name, svc in compose["services"].items():
        if "benchmark" in svc.get("profiles", []):
            continue
        assert "healthcheck" in svc, name


def test_llamacpp_profile_uses_the_official_server_image(compose: dict[str, Any]) -> None:
    llama = [s for s in compose["services"].values() if "llamacpp" in s.get("profiles", [])]
    assert llama and all(s["image"] == "ghcr.io/ggml-org/llama.cpp:server" for s in llama)


def test_dockerfile_installs_satbench() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["satbench"]' in text
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    for part in (name.rstrip("*") for name in packages["include"]):  # every installed package, the ground too
        assert f"COPY {part} ./{part}" in text and (ROOT / part).is_dir()


def test_compose_prometheus_scrapes_each_lane() -> None:
    prom = yaml.safe_load((ROOT / "compose/prometheus.yml").read_text())
    lanes = {
        sc["labels"]["lane"]
        for job in prom["scrape_configs"]
        for sc in job["static_configs"]
        if sc.get("labels")
    }
    assert lanes == {"dense", "moe"}
