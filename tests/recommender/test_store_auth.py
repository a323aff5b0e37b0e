"""The metrics store under attack: a real VictoriaMetrics and a real Prometheus, open and with their auth.

The audit's two attacks, against the store the recommender reads its validity from: one forged import of a
node's old fingerprint turned a correctly stale answer ``valid``; one ``delete_series`` turned every answer
``unknown``. The scenario is the truth: node ``gpu-a``'s answer was measured on 4 slots (build b1), its
exporter now publishes 2 slots (build b2), so the answer is ``changed`` (served stale).

- An open store (as before): anyone who reaches it flips the answer (the forge) or blinds the check (the delete).
- The store as a fleet runs it (docs/fleet-store.md, "Credentials"): VictoriaMetrics with ``-httpAuth.*`` and
  every admin endpoint behind an auth key no writer holds; Prometheus behind ``--web.config.file`` (bcrypt
  basic auth), its remote-write receiver on, its admin API off. The forge and the delete without the
  credentials are refused and the answer stays ``changed``; the site's credentialed writes land (a session's
  Prometheus remote-writing with ``basic_auth.password_file``, as ``render_prometheus_config`` renders it).
- A writer that holds the credentials (any site's agent) still cannot make the answer ``valid`` where the
  recommender holds the fleet key: an unsigned series, or a replay of the node's own older signed one, decides
  nothing (``core.fingerprint_signature``).
- The whole path, real at each hop: the simulator as a llama-server, an exporter signing with its node's key,
  a Prometheus scraping it and remote-writing with credentials into the guarded VictoriaMetrics, the
  recommender reading it back with the fleet key: the genuine series verifies after every hop.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest

from satbench.core.fingerprint_labels import info_labels
from satbench.core.fingerprint_signature import node_key
from satbench.core.manifest import RunManifest, StepWindow
from satbench.exporter.collector import RuntimeCollector
from satbench.exporter.live_fingerprint import FingerprintSigner, LiveFingerprints
from satbench.exporter.llamacpp import LlamaCppAdapter
from satbench.exporter.promconfig import ScrapeTarget, render_prometheus_config
from satbench.exporter.server import serve
from satbench.recommender.app import create_app, prometheus_fingerprints
from satbench.recommender.errors import PrometheusUnavailable
from satbench.recommender.prometheus_source import HttpxPromClient
from satbench.recommender.settings import RecommenderSettings
from satbench.recommender.validity import FINGERPRINT_SERIES, check_answers, measured_fingerprints
from satbench.runtimes.processes import ProcessSet
from satbench.session.prometheus import start_prometheus
from testkit.net import free_port
from testkit.prom import PrometheusProcess, prometheus_binary
from testkit.remote_write import HEADERS, write_request
from testkit.victoria import MISSING_REASON, VictoriaMetricsProcess, victoria_metrics_binary
from tests.exporter.test_fingerprint_series import DropInProcess, fingerprint
from tests.recommender.server import serve as serve_app
from tests.recommender.test_signed_fingerprints import FLEET_KEY, MEASURED, NOW_RUNS, exporter_series
from tests.recommender.test_validity import _answer, _document

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

needs_vm = pytest.mark.skipif(victoria_metrics_binary() is None, reason=MISSING_REASON)
needs_prometheus = pytest.mark.skipif(prometheus_binary() is None,
                                      reason="Prometheus is not installed (apt-get install prometheus)")

USER = "site-writer"
PASSWORD = "satbench-store-test-password"
# bcrypt (cost 10) of PASSWORD, as --web.config.file wants it; made once with libxcrypt's crypt(3)
PASSWORD_BCRYPT = "$2b$10$rRtdak0HenO0lYl4qwp2G./F4junVrvhh9ee.uS6OFAWGYHAxircO"
WEB_CONFIG = f"basic_auth_users:\n  {USER}: {PASSWORD_BCRYPT}\n"
KEY = "gpu-a/dense"
REFUSED = range(400, 500)  # VictoriaMetrics answers a wrong authKey 400, 401 or 422 by endpoint


def _import_line(labels: Mapping[str, str], at: float) -> str:
    """One JSON line of VictoriaMetrics' ``/api/v1/import``: the series at ``at`` and the four seconds before."""
    stamps = [int((at - s) * 1000) for s in (4, 3, 2, 1, 0)]
    return json.dumps({"metric": {**labels, "__name__": FINGERPRINT_SERIES}, "values": [1] * 5,
                       "timestamps": stamps})


def _forged(fp: Mapping[str, Any]) -> dict[str, str]:
    return {**{k: v for k, v in info_labels(fp).items() if v}, "lane": "dense", "node": "gpu-a",
            "job": "satbench_exporter", "instance": "10.0.0.7:9101"}


def _forged_write(fp: Mapping[str, Any], at: float) -> bytes:
    """The forged series as one remote write (Prometheus' receiver, VictoriaMetrics' ``/api/v1/write``)."""
    return write_request([({**_forged(fp), "__name__": FINGERPRINT_SERIES}, [(1.0, int(at * 1000))])])


def _genuine(fp: Mapping[str, Any], since: float) -> dict[str, str]:
    return dict(exporter_series(fp, node="gpu-a", since=since).labels)


def _validity(url: str, *, auth: tuple[str, str] | None = None, fleet_key: bytes | None = None,
              at: float | None = None) -> tuple[str, str | None]:
    async def run() -> tuple[str, str | None]:
        async with HttpxPromClient(url, auth=auth) as client:
            got = await check_answers(client, measured_fingerprints({KEY: {"fingerprint": MEASURED}}),
                                      now=at if at is not None else time.time(), fleet_key=fleet_key)
        return got[KEY].state, got[KEY].reason

    return asyncio.run(run())


def _post(url: str, *, content: bytes | str = b"", auth: tuple[str, str] | None = None,
          params: Mapping[str, str] | None = None, headers: Mapping[str, str] | None = None) -> int:
    return httpx.post(url, content=content, auth=auth, params=params, headers=headers, timeout=10.0).status_code


@pytest.fixture
def open_vm() -> Iterator[VictoriaMetricsProcess]:
    if victoria_metrics_binary() is None:
        pytest.skip(MISSING_REASON)
    with VictoriaMetricsProcess() as vm:
        yield vm


@pytest.fixture
def guarded_vm() -> Iterator[VictoriaMetricsProcess]:
    if victoria_metrics_binary() is None:
        pytest.skip(MISSING_REASON)
    with VictoriaMetricsProcess(auth=(USER, PASSWORD)) as vm:
        yield vm


@needs_vm
def test_an_open_store_lets_anyone_decide_validity(open_vm: VictoriaMetricsProcess) -> None:
    """Before: no credentials, no key. The forge and the delete both work, for anyone."""
    now = time.time()
    assert _post(open_vm.url + "/api/v1/import", content=_import_line(_genuine(NOW_RUNS, now - 60), now)) == 204
    open_vm.flush()
    assert _validity(open_vm.url, at=now)[0] == "changed"
    assert _post(open_vm.url + "/api/v1/import", content=_import_line(_forged(MEASURED), now)) == 204
    open_vm.flush()
    assert _validity(open_vm.url, at=now)[0] == "valid"  # the forged import turned a stale answer valid
    assert _post(open_vm.url + "/api/v1/admin/tsdb/delete_series",
                 params={"match[]": FINGERPRINT_SERIES}) == 204
    open_vm.flush()
    state, reason = _validity(open_vm.url, at=now)
    assert state == "unknown" and reason is not None and "no live fingerprint" in reason


@needs_vm
def test_victoria_metrics_with_auth_refuses_the_forge_and_the_delete(guarded_vm: VictoriaMetricsProcess) -> None:
    vm, creds, now = guarded_vm, (USER, PASSWORD), time.time()
    # the site's agent writes with the credentials: it lands
    assert _post(vm.url + "/api/v1/import", content=_import_line(_genuine(NOW_RUNS, now - 60), now),
                 auth=creds) == 204
    vm.flush()
    assert _validity(vm.url, auth=creds, at=now)[0] == "changed"
    # a reader without them is refused, and says so (the recommender serves its last answer)
    with pytest.raises(PrometheusUnavailable, match="refused the credentials"):
        _validity(vm.url, at=now)
    with pytest.raises(PrometheusUnavailable, match="refused the credentials"):
        _validity(vm.url, auth=(USER, "wrong"), at=now)
    # the forge, without credentials or with a wrong password: refused, the answer as it was
    forged = _import_line(_forged(MEASURED), now)
    assert _post(vm.url + "/api/v1/import", content=forged) == 401
    assert _post(vm.url + "/api/v1/import", content=forged, auth=(USER, "wrong")) == 401
    assert _post(vm.url + "/api/v1/write", content=_forged_write(MEASURED, now), headers=HEADERS) == 401
    vm.flush()
    assert _validity(vm.url, auth=creds, at=now)[0] == "changed"
    # the delete: refused without credentials, and refused to a writer that holds them (no admin key)
    match = {"match[]": FINGERPRINT_SERIES}
    assert _post(vm.url + "/api/v1/admin/tsdb/delete_series", params=match) == 401
    assert _post(vm.url + "/api/v1/admin/tsdb/delete_series", params=match, auth=creds) in REFUSED
    for path in ("/snapshot/create", "/internal/force_merge", "/internal/resetRollupResultCache"):
        assert httpx.get(vm.url + path, auth=creds, timeout=10.0).status_code in REFUSED, path
    vm.flush()
    assert _validity(vm.url, auth=creds, at=now)[0] == "changed"
    assert len(vm.query(FINGERPRINT_SERIES, now)) == 1  # nothing deleted, nothing forged
    # the operator, with the admin key, can still delete (so the key is what closed it)
    assert _post(vm.url + "/api/v1/admin/tsdb/delete_series", params={**match, "authKey": vm.admin_key or ""},
                 auth=creds) == 204


@needs_vm
def test_a_writer_with_the_credentials_cannot_make_a_stale_answer_valid(guarded_vm: VictoriaMetricsProcess) -> None:
    """Every site holds the write credentials; the fleet key is what stops a site (or a stolen agent) forging
    another node's validity: an unsigned series and a replay of the node's own older signed one."""
    vm, creds, now = guarded_vm, (USER, PASSWORD), time.time()
    lines = [_import_line(_genuine(NOW_RUNS, now - 60), now),
             _import_line(_forged(MEASURED), now),  # unsigned: what the audit imported
             _import_line(_genuine(MEASURED, now - 86400), now)]  # replayed: signed by the node yesterday
    assert _post(vm.url + "/api/v1/import", content="\n".join(lines), auth=creds) == 204
    vm.flush()
    assert len(vm.query(FINGERPRINT_SERIES, now)) == 3
    assert _validity(vm.url, auth=creds, at=now)[0] == "valid"  # without the key: forged
    assert _validity(vm.url, auth=creds, fleet_key=FLEET_KEY, at=now)[0] == "changed"
    # the recommender's own plumbing: settings (credentials and key from the environment's way) to the source
    settings = RecommenderSettings(prometheus_url=vm.url, prometheus_username=USER, prometheus_password=PASSWORD,
                                   fingerprint_key=FLEET_KEY.decode())
    taken = asyncio.run(prometheus_fingerprints(settings)({KEY: now}))
    fp, why = taken[KEY]
    assert why is None and fp is not None and fp["settings"]["slots"] == 2


@needs_vm
def test_a_lane_with_only_forged_series_is_unknown_unverified(guarded_vm: VictoriaMetricsProcess) -> None:
    vm, creds, now = guarded_vm, (USER, PASSWORD), time.time()
    assert _post(vm.url + "/api/v1/import", content=_import_line(_forged(MEASURED), now), auth=creds) == 204
    vm.flush()
    assert _validity(vm.url, auth=creds, at=now)[0] == "valid"
    state, reason = _validity(vm.url, auth=creds, fleet_key=FLEET_KEY, at=now)
    assert state == "unknown" and reason is not None and reason.startswith("unverified")


@needs_prometheus
def test_prometheus_with_web_auth_refuses_the_forge_and_has_no_delete(tmp_path: Path) -> None:
    """A Prometheus as the store: remote-write receiver on, basic auth in --web.config.file, admin API off.
    A session's Prometheus remote-writes into it with the rendered basic_auth (password from a file)."""
    creds = (USER, PASSWORD)
    store = PrometheusProcess("global:\n  scrape_interval: 1s\n", web_config=WEB_CONFIG, auth=creds,
                              extra_args=["--web.enable-remote-write-receiver"])
    password_file = tmp_path / "remote-write-password"
    password_file.write_text(PASSWORD + "\n")
    with store:
        session = PrometheusProcess("")
        session.config_text = render_prometheus_config(
            [ScrapeTarget("session_self", f"127.0.0.1:{session.port}")], [], scrape_interval_s=0.5,
            remote_write=[f"{store.url}/api/v1/write"], remote_write_auth=(USER, password_file.resolve()))
        assert PASSWORD not in session.config_text
        with session:
            store.wait_for_scrapes('up{job="session_self"} == 1')  # the credentialed write landed
        body = _forged_write(MEASURED, time.time())
        assert _post(store.url + "/api/v1/write", content=body, headers=HEADERS) == 401
        assert _post(store.url + "/api/v1/write", content=body, headers=HEADERS, auth=(USER, "wrong")) == 401
        assert store.query(FINGERPRINT_SERIES) == []
        match = {"match[]": "up"}
        assert _post(store.url + "/api/v1/admin/tsdb/delete_series", params=match) == 401
        deleted = httpx.post(store.url + "/api/v1/admin/tsdb/delete_series", params=match, auth=creds, timeout=10.0)
        assert deleted.status_code >= 400 and deleted.json()["error"] == "admin APIs disabled"  # 2.42: a 500
        assert store.query('up{job="session_self"}')  # nothing deleted
        # the forged body is a valid write: with the credentials it lands (so 401 was the credentials)
        assert _post(store.url + "/api/v1/write", content=body, headers=HEADERS, auth=creds) == 204
        assert len(store.query(FINGERPRINT_SERIES)) == 1


@needs_vm
@needs_prometheus
def test_a_real_exporters_signed_series_verifies_after_prometheus_and_the_store(
        guarded_vm: VictoriaMetricsProcess, tmp_path: Path) -> None:
    vm, creds = guarded_vm, (USER, PASSWORD)
    password_file = tmp_path / "remote-write-password"
    password_file.write_text(PASSWORD)
    flags = ("-c", "8192", "-np", "2", "-b", "256", "-ub", "64", "--metrics")
    signer = FingerprintSigner(node_key(FLEET_KEY, "gpu-a"))
    with DropInProcess(free_port(), *flags) as sim:
        collector = RuntimeCollector(LlamaCppAdapter(sim.url, props_ttl_s=0), budget_s=2.0,
                                     fingerprints=LiveFingerprints(cpu=("Test CPU (2 cores)", None), signer=signer))
        exporter = serve(collector)
        try:
            live = fingerprint(exporter.url)  # what the node runs: 2 slots
            measured = {**live, "settings": {**live["settings"], "slots": 4}}  # the answer was measured on 4
            config = render_prometheus_config(
                [ScrapeTarget("satbench_exporter", exporter.url.removeprefix("http://"),
                              {"lane": "dense", "node": "gpu-a"})], [], scrape_interval_s=0.5,
                remote_write=[vm.write_url], remote_write_auth=(USER, password_file.resolve()))
            with PrometheusProcess(config):
                vm.wait_holds(lambda v: bool(v.query(FINGERPRINT_SERIES)), what="the exporter's signed series")
        finally:
            exporter.close()
            collector.close()
    now = time.time()

    def state(fleet_key: bytes | None) -> str:
        async def run() -> str:
            async with HttpxPromClient(vm.url, auth=creds) as client:
                got = await check_answers(client, measured_fingerprints({KEY: {"fingerprint": measured},
                                                                          "gpu-a/moe": {"fingerprint": live}}),
                                          now=now, fleet_key=fleet_key)
            assert got["gpu-a/moe"].state == "unknown"  # no series of that lane at all
            return got[KEY].state
        return asyncio.run(run())

    assert state(FLEET_KEY) == "changed"  # the genuine series verified: it decided
    labels = {k: v for k, v in info_labels(measured).items() if v}
    forged = {**labels, "lane": "dense", "node": "gpu-a", "job": "satbench_exporter"}
    assert _post(vm.url + "/api/v1/import", content=_import_line(forged, now), auth=creds) == 204
    vm.flush()
    assert state(None) == "valid"  # a credentialed forge, without the key
    assert state(FLEET_KEY) == "changed"


@needs_prometheus
def test_the_sessions_own_prometheus_takes_no_write_and_no_delete(tmp_path: Path) -> None:
    """The Prometheus a session starts (``start_prometheus``, as ``satbench run`` does) has neither the
    remote-write receiver nor the admin API: nothing written into it, nothing deleted from it."""
    processes = ProcessSet(tmp_path / "logs")
    try:
        port = free_port()
        started = start_prometheus(processes, "prometheus", tmp_path / "prometheus",
                                   render_prometheus_config([ScrapeTarget("session_self", f"127.0.0.1:{port}")], [],
                                                            scrape_interval_s=0.5), port=port, timeout_s=30)
        body = _forged_write(MEASURED, time.time())
        written = httpx.post(started.url + "/api/v1/write", content=body, headers=HEADERS, timeout=10.0)
        assert written.status_code == 404 and "remote write receiver needs to be enabled" in written.text
        deleted = httpx.post(started.url + "/api/v1/admin/tsdb/delete_series", params={"match[]": "up"},
                             timeout=10.0)
        assert deleted.status_code >= 400 and deleted.json()["error"] == "admin APIs disabled"
        found = httpx.get(started.url + "/api/v1/query", params={"query": FINGERPRINT_SERIES}, timeout=10.0)
        assert found.json()["data"]["result"] == []
    finally:
        processes.stop_all()


@needs_vm
def test_the_service_serves_the_forged_lane_stale_only_with_the_key(guarded_vm: VictoriaMetricsProcess,
                                                                     tmp_path: Path) -> None:
    """``satbench recommender`` as configured (credentials, key) over the guarded store, after a credentialed
    forge: its own validity loop serves the answer stale with the key, valid without it."""
    vm, creds, now = guarded_vm, (USER, PASSWORD), time.time()
    assert _answer("gpu-a", "dense")["fingerprint"] == MEASURED  # the scenario: measured on 4 slots, build b1
    lines = [_import_line(_genuine(NOW_RUNS, now - 60), now + s) for s in range(0, 60, 5)]
    lines += [_import_line(_forged(MEASURED), now + s) for s in range(0, 60, 5)]
    assert _post(vm.url + "/api/v1/import", content="\n".join(lines), auth=creds) == 204
    vm.flush()
    doc = _document({KEY: _answer("gpu-a", "dense")})

    async def analyzer(manifest: RunManifest, run_dir: Path | None) -> dict[str, Any]:
        return doc

    async def no_fingerprints(starts: Any) -> dict[str, Any]:
        return {key: (None, "not read in this test") for key in starts}

    manifest = RunManifest(run_id="r1", created_at=now - 100, steps=(StepWindow(KEY, 1, now - 90, now - 60),))
    served: dict[bytes | None, tuple[str, str]] = {}
    for key in (None, FLEET_KEY):
        settings = RecommenderSettings(prometheus_url=vm.url, prometheus_username=USER,
                                       prometheus_password=PASSWORD, runs_dir=tmp_path / ("open" if key is None
                                                                                          else "keyed"),
                                       fingerprint_key=None if key is None else key.decode(),
                                       refresh_interval_s=3600, validity_interval_s=0.2, write_token="w" * 16)
        with serve_app(create_app(settings, analyzer=analyzer, fingerprints=no_fingerprints)) as url, \
                httpx.Client(base_url=url, timeout=10, headers={"Authorization": "Bearer " + "w" * 16}) as client:
            assert client.post("/runs", json=manifest.to_dict()).status_code in (201, 202)
            deadline = time.monotonic() + 20
            while True:
                lane = client.get("/recommendations").json()["lanes"][KEY]
                if lane["validity"] is not None and lane["validity"]["checked_at"] is not None:
                    break
                assert time.monotonic() < deadline, lane
                time.sleep(0.1)
            served[key] = (lane["status"], lane["validity"]["state"])
    assert served[None] == ("ok", "valid")  # the forge decides without the key
    assert served[FLEET_KEY] == ("stale", "changed")
