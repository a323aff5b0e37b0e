"""docker-compose.yml against the Compose Specification JSON Schema plus structural checks.

No Docker engine runs in the test environment, so the file is validated and rendered, not started.
``compose_spec.json`` is the Compose Specification schema (Apache-2.0, the compose-spec project's
``schema/compose-spec.json``, commit 170098ba of 2026-06-23), the schema ``docker compose config`` validates
against. ``render`` does what ``docker compose config`` does for this file: YAML anchors and merge keys,
``${VAR:-default}`` interpolation from an env file (``.env`` by default, ``compose/gpu.env`` for a GPU node)
and profile selection (``COMPOSE_PROFILES``); the rendered profiles are checked for what a GPU node needs.

The stack's defences: Grafana wants a login and reads its admin password from an env file outside the checkout
(compose refuses to start without it), every image is pinned by digest or awaits one exactly as the Kubernetes
base lists it (the digests of images both run agree), and the stack's Prometheus, started for real with the
compose command, refuses a remote write, the admin API's deletes and the lifecycle API.
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
    # satbench, the ground and the parts inside it (docs/DESIGN.md, "One name on install"): one folder to copy
    assert "COPY satbench ./satbench" in text
    for part in ("core", "loadgen", "exporter", "recommender", "simulator"):
        assert (ROOT / "satbench" / part / "__init__.py").is_file() and f"COPY {part}" not in text


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


def test_grafana_wants_a_login_and_its_admin_password_comes_from_an_env_file_outside_the_checkout(
    compose: dict[str, Any],
) -> None:
    grafana = compose["services"]["grafana"]
    env = grafana["environment"]
    assert env["GF_AUTH_ANONYMOUS_ENABLED"] == "false" and "GF_AUTH_ANONYMOUS_ORG_ROLE" not in env
    assert not any(key.startswith("GF_SECURITY_ADMIN") for key in env), "no password in the compose file"
    (env_file,) = grafana["env_file"]
    assert isinstance(env_file, str), "the short form: compose refuses to start without the file"
    ignored = subprocess.run(["git", "check-ignore", "-q", env_file], cwd=ROOT, capture_output=True)
    assert ignored.returncode == 0, f"{env_file} must not be part of the checkout"
    text = (ROOT / "docker-compose.yml").read_text()
    assert f"> {env_file.removeprefix('./')}" in text, "the file's top says how to write it"


DIGEST = re.compile(r"^(?P<name>[^@\s]+):(?P<tag>[^@:/\s]+)@(?P<digest>sha256:[0-9a-f]{64})$")


def _kustomize_awaiting() -> dict[str, str]:
    base = yaml.safe_load((ROOT / "deploy/kubernetes/base/kustomization.yaml").read_text())
    return {e["name"]: e["newTag"] for e in base["images"] if not e.get("digest")}


def test_images_are_pinned_by_digest_or_await_one_as_in_kubernetes() -> None:
    awaiting = _kustomize_awaiting()
    seen = set()
    for env_file in (ROOT / ".env", ROOT / "compose/gpu.env"):
        for name, svc in render(env_file)["services"].items():
            if svc.get("build"):
                continue  # this repository's image, built where it runs
            image = svc["image"]
            seen.add(image)
            if DIGEST.match(image):
                continue
            repo, _, tag = image.rpartition(":")
            assert awaiting.get(repo) == tag, f"{name}: {image} is neither pinned by digest nor awaiting one"
    # an image both stacks run has one digest: the manifests' and the compose file's agree
    manifests = "\n".join(p.read_text() for p in (ROOT / "deploy/kubernetes").rglob("*.yaml"))
    shared = {m["name"]: m["digest"] for m in map(DIGEST.match, seen) if m}
    in_k8s = {m["name"]: m["digest"] for m in map(DIGEST.match, re.findall(r"image: (\S+)", manifests)) if m}
    assert {"grafana/grafana", "prom/alertmanager", "prom/prometheus"} <= set(shared)
    for name in set(shared) & set(in_k8s):
        assert shared[name] == in_k8s[name], name


def test_the_stacks_prometheus_is_not_asked_to_take_writes_or_deletes(compose: dict[str, Any]) -> None:
    command = compose["services"]["prometheus"]["command"]
    for flag in ("--web.enable-remote-write-receiver", "--web.enable-admin-api", "--web.enable-lifecycle",
                 "--enable-feature=otlp-write-receiver"):
        assert flag not in command, flag


@pytest.mark.slow
def test_the_stacks_prometheus_refuses_forged_writes_and_deletes(compose: dict[str, Any], tmp_path: Path) -> None:
    """The real Prometheus with the compose command (its config, its flags; loopback and a scratch folder)."""
    import httpx

    from testkit.net import free_port
    from testkit.process import ChildProcess
    from testkit.prom import prometheus_binary

    binary = prometheus_binary()
    if binary is None:
        pytest.skip("Prometheus is not installed (Debian: prometheus)")
    port = free_port()
    swap = {"--config.file": str(ROOT / "compose/prometheus.yml"), "--storage.tsdb.path": str(tmp_path),
            "--web.listen-address": f"127.0.0.1:{port}"}
    argv = [binary]
    for arg in compose["services"]["prometheus"]["command"]:
        flag = arg.split("=", 1)[0]
        argv.append(f"{flag}={swap[flag]}" if flag in swap else arg)
    url = f"http://127.0.0.1:{port}"
    with ChildProcess(argv, name="prometheus", ready_url=f"{url}/-/ready", graceful=True), \
            httpx.Client(timeout=10) as client:
        assert client.get(f"{url}/api/v1/query", params={"query": "1"}).status_code == 200
        refused = {
            "remote write": client.post(f"{url}/api/v1/write", content=b"forged"),
            "delete_series": client.post(f"{url}/api/v1/admin/tsdb/delete_series", params={"match[]": "up"}),
            "clean_tombstones": client.post(f"{url}/api/v1/admin/tsdb/clean_tombstones"),
            "quit": client.post(f"{url}/-/quit"),
        }
        assert {what: answer.status_code >= 400 for what, answer in refused.items()} == dict.fromkeys(refused, True)
