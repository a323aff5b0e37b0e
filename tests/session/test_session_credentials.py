"""A session's credentials end to end: an outside Prometheus that wants basic auth, a runtime that wants a key.

Before, a session pointed at a Prometheus behind credentials (a fleet's store behind its gate) sent none: its
wait for the last scrapes ran to its bound, the recommender it started was refused every query and answered
from the run's records, and its in-process fallback was refused too; and a lane's runtime key (``api_key_env``,
which the load generator sends) never reached the exporter the session started, which then read nothing of a
runtime started with ``--api-key`` but its public ``/health``.

Now ``[prometheus] username`` and ``password_file`` are sent by every reader of that Prometheus in the session,
and one that refuses the session's reads stops it before anything starts, in one line naming the settings. The
test owns what such a site owns (a runtime started with ``--api-key-file``, its exporter, a real Prometheus
behind ``--web.config.file`` scraping both and the load generator) and hands them to ``satbench run`` by URL.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from satbench.core.net import free_port
from satbench.exporter.promconfig import EXPORTER_JOB, LOADGEN_JOB, ScrapeTarget, render_prometheus_config
from satbench.runtimes.external import check_external
from satbench.runtimes.processes import ProcessSet
from satbench.session.config import LaneRuntime, load_session_config
from satbench.session.parts import LaneEndpoint, start_exporters
from testkit.exposition import samples
from testkit.process import ChildProcess
from testkit.prom import PrometheusProcess
from testkit.session import run_session
from tests.recommender.test_store_auth import PASSWORD, USER, WEB_CONFIG

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("prometheus") is None,
                       reason="Prometheus is not installed (apt-get install prometheus)"),
]

ROOT = Path(__file__).resolve().parents[2]
RUNTIME_KEY = "sk-site-runtime-" + "r" * 24
KEY_ENV = "SATBENCH_TEST_RUNTIME_KEY"


@dataclass
class Site:
    runtime_url: str
    exporter_url: str
    prom: PrometheusProcess
    metrics_port: int
    folder: Path


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """A runtime that wants its key, its exporter holding the key, and a Prometheus behind basic auth."""
    folder = tmp_path_factory.mktemp("site")
    (folder / "runtime.keys").write_text(RUNTIME_KEY + "\n")
    sim_port, exp_port, metrics_port = free_port(), free_port(), free_port()
    runtime_url, exporter_url = f"http://127.0.0.1:{sim_port}", f"http://127.0.0.1:{exp_port}"
    sim = ChildProcess([sys.executable, "-m", "satbench.cli", "sim", "--profile", "dense", "--port", str(sim_port),
                        "--api-key-file", str(folder / "runtime.keys"), "--metrics"],
                       name="site-sim", ready_url=f"{runtime_url}/health", cwd=ROOT)
    exporter = ChildProcess([sys.executable, "-m", "satbench.cli", "exporter", "--runtime-url", runtime_url,
                             "--port", str(exp_port), "--gpu", "none"],
                            name="site-exporter", ready_url=f"{exporter_url}/metrics", cwd=ROOT,
                            env={**os.environ, "SATBENCH_EXPORTER_RUNTIME_API_KEY": RUNTIME_KEY})
    targets = [ScrapeTarget(EXPORTER_JOB, exporter_url.removeprefix("http://"), {"lane": "dense"}),
               ScrapeTarget(LOADGEN_JOB, f"127.0.0.1:{metrics_port}")]
    rules = sorted((ROOT / "prometheus" / "rules").glob("*.yml"))
    with sim, exporter, PrometheusProcess(render_prometheus_config(targets, rules, 1.0), web_config=WEB_CONFIG,
                                          auth=(USER, PASSWORD)) as prom:
        yield Site(runtime_url, exporter_url, prom, metrics_port, folder)


def _config(site: Site, name: str, credentials: str) -> Path:
    path = site.folder / f"{name}.toml"
    path.write_text("\n".join([
        f'prometheus = {{ url = "{site.prom.url}", scrape_interval_s = 1.0{credentials} }}',
        "[loadgen]", f"metrics_port = {site.metrics_port}",
        "[[lanes]]", 'name = "dense"', 'runtime = "external"', f'url = "{site.runtime_url}"',
        f'exporter_url = "{site.exporter_url}"', f'api_key_env = "{KEY_ENV}"', ""]))
    return path


def _password_file(site: Site, name: str, password: str) -> str:
    path = site.folder / name
    path.write_text(password + "\n")
    return f', username = "{USER}", password_file = "{path}"'


def test_with_the_credentials_the_session_reads_its_prometheus_and_answers(site: Site, tmp_path: Path) -> None:
    config = _config(site, "with", _password_file(site, "password", PASSWORD))
    run = run_session(tmp_path / "runs", "--config", str(config), env={KEY_ENV: RUNTIME_KEY})
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "not every target scraped after the walk" not in run.stdout  # the wait read the targets
    assert "analysing in-process" not in run.stdout  # the service answered
    answer = json.loads((run.run_dir / "recommendations.json").read_text())
    # the recommender the session started read the figures from the guarded Prometheus, not the records
    assert answer["source"]["kind"] == "prometheus", answer["source"]
    assert answer["lanes"]["dense"]["recommended_concurrency"] in (1, 2)
    manifest = json.loads((run.run_dir / "manifest.json").read_text())
    assert manifest["prometheus"]["username"] == USER
    assert manifest["lanes"]["dense"]["runtime_props"].get("total_slots") == 4  # /props read with the lane's key
    for path in run.run_dir.rglob("*"):  # neither secret in any file the run wrote (logs included)
        if path.is_file():
            text = path.read_text(errors="replace")
            assert PASSWORD not in text and RUNTIME_KEY not in text, path


@pytest.mark.parametrize(("credentials", "said"), [
    ("", "wants credentials: set prometheus.username and prometheus.password_file"),
    ("wrong", "refused the credentials of prometheus.username and prometheus.password_file"),
])
def test_a_refused_read_stops_the_session_before_it_starts_in_one_line(
        site: Site, tmp_path: Path, credentials: str, said: str) -> None:
    extra = _password_file(site, "wrong-password", "not-" + PASSWORD) if credentials else ""
    (tmp_path / "runs").mkdir()
    run = run_session(tmp_path / "runs", "--config", str(_config(site, credentials or "without", extra)),
                      env={KEY_ENV: RUNTIME_KEY}, timeout_s=60)
    assert run.returncode == 1
    assert run.stderr.strip().count("\n") == 0, run.stderr
    assert f"Prometheus at {site.prom.url} answered HTTP 401 to a query: it {said}" in run.stderr
    assert run.run_dirs == [] and run.wall_s < 20  # nothing started, nothing measured, no folder left


def test_the_credentials_go_together_with_a_url_and_a_readable_file(site: Site, tmp_path: Path) -> None:
    password = site.folder / "password-ok"
    password.write_text(PASSWORD)
    given = {"prometheus.url": site.prom.url, "prometheus.username": USER, "prometheus.password_file": str(password)}
    assert load_session_config(None, given).prometheus.read_auth() == (USER, PASSWORD)
    refused = {
        "username and password_file go together": {**given, "prometheus.password_file": None},
        "username is set but url is not": {k: v for k, v in given.items() if k != "prometheus.url"},
        "is not a readable file": {**given, "prometheus.password_file": str(tmp_path / "missing")},
        "the URL carries a password": {**given, "prometheus.url": f"http://{USER}:{PASSWORD}@127.0.0.1:9"},
    }
    for said, overrides in refused.items():
        with pytest.raises(ValueError, match=said):
            load_session_config(None, {k: v for k, v in overrides.items() if v is not None})


def test_the_session_hands_a_lanes_key_to_the_exporter_it_starts(site: Site, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """``start_exporters`` for an external lane with ``api_key_env``: the exporter reads the guarded sources;
    the same lane without it reads only ``/health``. The key is in the child's environment, not its argv."""
    monkeypatch.setenv(KEY_ENV, RUNTIME_KEY)
    got = {}
    processes = ProcessSet(tmp_path / "logs")
    try:
        for name, key_env in (("keyed", KEY_ENV), ("bare", None)):
            lane = LaneRuntime(name=name, runtime="external", url=site.runtime_url, api_key_env=key_env)
            endpoint = LaneEndpoint(lane, check_external(lane.key, site.runtime_url))
            start_exporters([endpoint], processes, timeout_s=30)
            assert endpoint.exporter_url is not None
            got[name] = samples(httpx.get(endpoint.exporter_url + "/metrics", timeout=10).text)
        argv = " ".join(" ".join(child.argv) for child in processes.children)
    finally:
        processes.stop_all()
    assert got["keyed"]["runtime_metrics_up", ()] == 1 and got["keyed"]["runtime_slots_up", ()] == 1
    assert got["bare"]["runtime_metrics_up", ()] == 0
    assert got["bare"]["runtime_http_status", (("source", "metrics"),)] == 401
    assert RUNTIME_KEY not in argv
