"""docker-compose.yml against the Compose Specification JSON Schema plus structural checks.

No Docker engine runs in the test environment, so the file is validated and rendered, not started.
``compose_spec.json`` is the Compose Specification schema (Apache-2.0, the compose-spec project's
``schema/compose-spec.json``, commit 170098ba of 2026-06-23), the schema ``docker compose config`` validates
against. ``render`` does what ``docker compose config`` does for this file: YAML anchors and merge keys,
``${VAR:-default}`` interpolation from an env file (``.env`` by default, ``compose/gpu.env`` for a GPU node)
and profile selection (``COMPOSE_PROFILES``); the rendered profiles are checked for what a GPU node needs.
"""

from __future__ import annotations

import re
import subprocess
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
            text = f"{vol['source']}:{vol['target']}" if isinstance(vol, dict) else str(vol)
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


_VAR = re.compile(r"\$\{(\w+)(?::-([^}]*))?\}")


def read_env_file(path: Path) -> dict[str, str]:
    """``KEY=VALUE`` lines of a compose env file (comments and blank lines skipped)."""
    out = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


def _interpolate(value: Any, env: dict[str, str]) -> Any:
    if isinstance(value, str):
        return _VAR.sub(lambda m: env.get(m.group(1)) or (m.group(2) or ""), value)
    if isinstance(value, dict):
        return {k: _interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [_interpolate(v, env) for v in value]
    return value


def render(env_file: Path, extra_profiles: tuple[str, ...] = (), **env: str) -> dict[str, Any]:
    """The services ``docker compose --env-file ENV_FILE [--profile P] config`` would run (see the docstring)."""
    variables = {**read_env_file(env_file), **env}
    data = _interpolate(yaml.safe_load((ROOT / "docker-compose.yml").read_text()), variables)
    active = set(filter(None, variables.get("COMPOSE_PROFILES", "").split(","))) | set(extra_profiles)
    services = {name: svc for name, svc in data["services"].items()
                if not svc.get("profiles") or active & set(svc["profiles"])}
    return {**data, "services": services}


def _flag(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == flag]


def _lane_urls(services: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The runtime URL each exporter watches (by the lane its alias names) and the benchmark's --url list."""
    exporters = {}
    for name, svc in services.items():
        if (svc.get("command") or [""])[0] == "exporter":
            aliases = ((svc.get("networks") or {}).get("default") or {}).get("aliases") or [name]
            exporters[aliases[0]] = _flag(svc["command"], "--runtime-url")[0]
    bench = services["benchmark"]["command"]
    by_exporter = dict(zip(_flag(bench, "--exporter-url"), _flag(bench, "--url"), strict=True))
    watched = [exporters[url.removeprefix("http://").split(":")[0]] for url in by_exporter]
    return watched, list(by_exporter.values())


def test_the_gpu_profile_runs_cuda_llamacpp_with_gpus_and_one_set_of_lane_urls() -> None:
    services = render(ROOT / "compose/gpu.env", ("benchmark",), SATBENCH_UID="1234", SATBENCH_GID="5678")["services"]
    assert {"sim-dense", "sim-moe", "exporter-dense", "exporter-moe"}.isdisjoint(services)
    gpu = {"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}
    for lane in ("dense", "moe"):
        server = services[f"llamacpp-{lane}"]
        assert re.fullmatch(r"ghcr\.io/ggml-org/llama\.cpp:server-cuda\d*-b\d+", server["image"]), server["image"]
        assert server["deploy"]["resources"]["reservations"]["devices"] == [gpu]
        assert _flag(server["command"], "--n-gpu-layers") == ["999"]
        assert "--metrics" in server["command"] and "--slots" in server["command"]
        exporter = services[f"exporter-{lane}-gpu"]
        assert exporter["deploy"]["resources"]["reservations"]["devices"] == [gpu], "NVML needs the GPU"
        assert exporter["pid"] == f"service:llamacpp-{lane}" and _flag(exporter["command"], "--runtime-pid") == ["1"]
    watched, measured = _lane_urls(services)
    assert watched == measured == ["http://llamacpp-dense:8080", "http://llamacpp-moe:8080"]
    bench = services["benchmark"]
    assert bench["user"] == "1234:5678" and bench["command"][0] == "run"
    assert "loadgen.ladder.concurrency=[1, 2, 4, 8]" in bench["command"]
    (runs,) = [v for v in bench["volumes"] if isinstance(v, dict) and v["target"] == "/opt/satbench/runs"]
    assert runs["bind"] == {"create_host_path": False}, "Docker must not create ./runs as root"
    # ./runs is part of the checkout (runs/.gitkeep, not ignored), so whoever cloned the repository owns it
    ignored = subprocess.run(["git", "check-ignore", "-q", "runs/.gitkeep"], cwd=ROOT, capture_output=True)
    assert (ROOT / "runs" / ".gitkeep").is_file() and ignored.returncode == 1


def test_the_laptop_profile_runs_the_simulators_and_the_same_services_read_them() -> None:
    services = render(ROOT / ".env", ("benchmark",))["services"]
    assert {"sim-dense", "sim-moe", "exporter-dense", "exporter-moe"} <= set(services)
    assert not any(name.startswith("llamacpp-") or name.endswith("-gpu") for name in services)
    assert all("deploy" not in svc for svc in services.values()), "no GPU needed on a laptop"
    watched, measured = _lane_urls(services)
    assert watched == measured == ["http://sim-dense:8080", "http://sim-moe:8080"]


def test_the_benchmark_session_config_uses_the_stack() -> None:
    from satbench.session.config import load_session_config

    config = load_session_config(ROOT / "compose/session.toml", {
        "lanes": [{"name": "dense", "runtime": "external", "url": "http://sim-dense:8080",
                   "exporter_url": "http://exporter-dense:9101"}]})
    assert config.prometheus.url == "http://prometheus:9090" and config.recommender.url == "http://recommender:9108"
    assert config.loadgen.metrics_port == 9400 and config.loadgen.metrics_host == "0.0.0.0"
    prom = yaml.safe_load((ROOT / "compose/prometheus.yml").read_text())
    targets = {t for job in prom["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]}
    assert {"benchmark:9400", "exporter-dense:9101", "exporter-moe:9101", "recommender:9108"} <= targets


def test_dockerfile_installs_satbench() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["satbench"]' in text
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    assert packages["include"] == ["satbench", "satbench.*"]
    # satbench, and every folder it links in (the ground and the parts: docs/DESIGN.md, "One name on install")
    linked = {p.name for p in (ROOT / "satbench").iterdir() if p.is_symlink()}
    assert linked >= {"core", "loadgen", "exporter", "recommender", "simulator"}
    for part in {"satbench"} | linked:
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


def test_the_stack_alertmanager_config_is_valid_and_prometheus_sends_to_it() -> None:
    import shutil

    prom = yaml.safe_load((ROOT / "compose/prometheus.yml").read_text())
    targets = [t for am in prom["alerting"]["alertmanagers"] for sc in am["static_configs"] for t in sc["targets"]]
    assert targets == ["alertmanager:9093"]
    config = yaml.safe_load((ROOT / "compose/alertmanager.yml").read_text())
    assert all(hook.get("send_resolved") for r in config["receivers"] for hook in r.get("webhook_configs", []))
    amtool = shutil.which("amtool")
    if amtool is None:
        pytest.skip("amtool (Debian: prometheus-alertmanager) is not installed")
    checked = subprocess.run([amtool, "check-config", str(ROOT / "compose/alertmanager.yml")],
                             capture_output=True, text=True, timeout=30)
    assert checked.returncode == 0, checked.stdout + checked.stderr
