"""Where the store's credentials and the fingerprint key come from, and where they never go.

Every secret is read from the environment or a file, never a flag's value (which any user of the host reads in
``/proc``); a bad one is refused in one line naming the setting; none appears in what is served or written: the
document's ``source``, ``/healthz``, an error, a run's ``prometheus.yml``. The stores' own refusals are in
``test_store_auth.py`` (real VictoriaMetrics and Prometheus).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import yaml
from pydantic import ValidationError

from satbench.exporter.cli import fingerprint_key
from satbench.exporter.promconfig import LOADGEN_JOB, ScrapeTarget, render_prometheus_config
from satbench.recommender import cli
from satbench.recommender.app import create_app
from satbench.recommender.errors import BadInput, PrometheusUnavailable
from satbench.recommender.prometheus_source import HttpxPromClient, public_url
from satbench.recommender.settings import RecommenderSettings
from satbench.session.config import SessionConfigError, load_session_config
from testkit.prom import promtool_binary
from tests.recommender.server import serve

SECRET = "s3cret-store-password"


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli.configure(parser)
    return parser.parse_args(list(argv))


def test_the_recommender_reads_the_store_password_and_the_key_from_files_or_the_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    password, key = tmp_path / "password", tmp_path / "fleet.key"
    password.write_text(SECRET + "\n")
    key.write_text("k" * 32 + "\n")
    settings = cli.build_settings(parse("--prometheus-username", "reader", "--prometheus-password-file",
                                        str(password), "--fingerprint-key-file", str(key)))
    assert settings.prometheus_auth() == ("reader", SECRET)
    assert settings.fingerprint_key_bytes() == b"k" * 32
    assert SECRET not in repr(settings) and "k" * 32 not in repr(settings)
    monkeypatch.setenv("SATBENCH_RECOMMENDER_PROMETHEUS_USERNAME", "env-reader")
    monkeypatch.setenv("SATBENCH_RECOMMENDER_PROMETHEUS_PASSWORD", "from-env")
    monkeypatch.setenv("SATBENCH_RECOMMENDER_FINGERPRINT_KEY", "e" * 20)
    settings = cli.build_settings(parse())
    assert settings.prometheus_auth() == ("env-reader", "from-env")
    assert settings.fingerprint_key_bytes() == b"e" * 20


@pytest.mark.parametrize(("argv", "needle"), [
    (("--prometheus-password-file", "{missing}"), "--prometheus-password-file"),
    (("--prometheus-password-file", "{empty}"), "the file is empty"),
    (("--fingerprint-key-file", "{empty}"), "--fingerprint-key-file"),
])
def test_a_bad_secret_file_is_refused_naming_the_flag(tmp_path: Path, argv: tuple[str, ...], needle: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").write_text("\n")
    args = [a.format(missing=tmp_path / "missing", empty=tmp_path / "empty") for a in argv]
    with pytest.raises(BadInput, match=needle):
        cli.build_settings(parse("--prometheus-username", "reader", *args))
    assert cli.main(parse("--prometheus-username", "reader", *args)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err


def test_a_short_key_or_a_password_without_a_user_is_refused() -> None:
    with pytest.raises(ValidationError, match="fingerprint_key must be at least 16"):
        RecommenderSettings(fingerprint_key="short")
    with pytest.raises(ValidationError, match="prometheus_password is set without prometheus_username"):
        RecommenderSettings(prometheus_password=SECRET)
    assert RecommenderSettings(fingerprint_key="  ").fingerprint_key is None


def test_queries_carry_basic_auth_and_a_refusal_names_the_settings_not_the_password() -> None:
    seen: list[str | None] = []

    def store(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("authorization"))
        if request.headers.get("authorization") != "Basic " + base64.b64encode(f"reader:{SECRET}".encode()).decode():
            return httpx.Response(401, text="Unauthorized")
        return httpx.Response(200, json={"status": "success", "data": {"resultType": "vector", "result": []}})

    async def ask(url: str, auth: tuple[str, str] | None) -> None:
        async with HttpxPromClient(url, auth=auth, transport=httpx.MockTransport(store)) as client:
            await client.query("up", 0.0)

    asyncio.run(ask("http://store.example:8428", ("reader", SECRET)))
    with pytest.raises(PrometheusUnavailable) as info:
        asyncio.run(ask(f"http://reader:{SECRET}-wrong@store.example:8428", None))
    assert "prometheus_username and prometheus_password" in str(info.value)
    assert SECRET not in str(info.value) and "reader:***@store.example" in str(info.value)
    assert seen[1] is not None and seen[1].startswith("Basic ")  # a URL's userinfo is sent as basic auth


@pytest.mark.slow
def test_no_password_in_the_document_source_or_healthz() -> None:
    assert public_url(f"http://reader:{SECRET}@vm:8428/select/0/prometheus") == \
        "http://reader:***@vm:8428/select/0/prometheus"
    assert public_url("http://vm:8428") == "http://vm:8428"
    settings = RecommenderSettings(prometheus_url=f"http://reader:{SECRET}@127.0.0.1:9", port=0,
                                   refresh_interval_s=3600, write_token="t" * 16)
    with serve(create_app(settings)) as url:
        health = httpx.get(url + "/healthz", timeout=10).json()
    assert health["prometheus_url"] == "http://reader:***@127.0.0.1:9"


def test_the_exporter_reads_its_key_from_a_file_or_the_environment(tmp_path: Path) -> None:
    path = tmp_path / "node.key"
    path.write_text("n" * 64 + "\n")
    assert fingerprint_key(path) == b"n" * 64
    assert fingerprint_key(None, {"SATBENCH_EXPORTER_FINGERPRINT_KEY": "v" * 20}) == b"v" * 20
    assert fingerprint_key(None, {}) is None
    done = subprocess.run([sys.executable, "-m", "satbench.cli", "exporter", "--runtime-url", "http://127.0.0.1:1",
                           "--port", "0", "--fingerprint-key-file", str(tmp_path / "missing")],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "--fingerprint-key-file" in done.stderr


def test_a_session_remote_writes_with_a_password_file_and_never_a_password(tmp_path: Path) -> None:
    password = tmp_path / "rw-password"
    password.write_text(SECRET)
    config = load_session_config(None, {"prometheus.remote_write": ["http://vm.example:8428/api/v1/write"],
                                        "prometheus.remote_write_username": "site-a",
                                        "prometheus.remote_write_password_file": str(password)})
    auth = config.prometheus.remote_write_auth()
    assert auth == ("site-a", password.resolve())
    text = render_prometheus_config([ScrapeTarget(LOADGEN_JOB, "127.0.0.1:9110")], [],
                                    remote_write=config.prometheus.remote_write, remote_write_auth=auth)
    assert SECRET not in text
    section = yaml.safe_load(text)["remote_write"][0]
    assert section["basic_auth"] == {"username": "site-a", "password_file": str(password.resolve())}
    with pytest.raises(ValueError, match="absolute"):
        render_prometheus_config([], [], remote_write=["http://vm:8428/api/v1/write"],
                                 remote_write_auth=("a", Path("relative")))
    binary = promtool_binary()
    if binary is None:
        pytest.skip("promtool is not installed (Debian: apt-get install prometheus)")
    (tmp_path / "prometheus.yml").write_text(text)
    done = subprocess.run([binary, "check", "config", "prometheus.yml"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(("overrides", "needle"), [
    ({"prometheus.remote_write": [f"http://site:{SECRET}@vm:8428/api/v1/write"]}, "carries a password"),
    ({"prometheus.remote_write": ["http://vm:8428/api/v1/write"], "prometheus.remote_write_username": "a"},
     "go together"),
    ({"prometheus.remote_write_username": "a", "prometheus.remote_write_password_file": "{file}"},
     "names no URL"),
    ({"prometheus.remote_write": ["http://vm:8428/api/v1/write"], "prometheus.remote_write_username": "a",
      "prometheus.remote_write_password_file": "{missing}"}, "not a readable file"),
])
def test_bad_remote_write_credentials_are_refused_before_anything_runs(
        tmp_path: Path, overrides: dict[str, object], needle: str) -> None:
    (tmp_path / "file").write_text("x")
    filled = {k: v.format(file=tmp_path / "file", missing=tmp_path / "missing") if isinstance(v, str) else v
              for k, v in overrides.items()}
    with pytest.raises(SessionConfigError) as info:
        load_session_config(None, filled)
    assert needle in str(info.value) and "prometheus" in str(info.value)
    assert SECRET not in str(info.value)
