"""A service that can be exposed, over real HTTP: writes need the token, a posted run is taken at its word only
for its windows (its order is the service's clock, its fingerprint what the exporter published), bounds are
refused in bounded time, and a failed analysis is not redone on every read."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from pydantic import SecretStr

from satbench.core.fingerprint import node_fingerprint
from satbench.recommender.app import create_app
from satbench.recommender.settings import RecommenderSettings
from tests.recommender.server import serve
from tests.recommender.test_service import FakeAnalyzer, FakeClock, manifest_dict

TOKEN = "write-token-for-tests"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _fingerprint(slots: int) -> dict[str, Any]:
    props = {"build_info": "b7000-abc", "model_path": "/m/q.gguf", "total_slots": slots,
             "default_generation_settings": {"n_ctx": 4096}}
    return node_fingerprint(props=props, argv=None, hardware=None, model_files=None)


class Exporters:
    """What Prometheus holds of each lane's exporter: the fingerprint published when its first window began."""

    def __init__(self) -> None:
        self.asked: list[dict[str, float]] = []
        self.published: dict[str, dict[str, Any]] = {"dense": _fingerprint(4)}

    async def __call__(self, starts: Mapping[str, float]) -> dict[str, tuple[dict[str, Any] | None, str | None]]:
        self.asked.append(dict(starts))
        return {key: (self.published.get(key), None if key in self.published else "not scraped")
                for key in starts}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def analyzer(clock: FakeClock) -> FakeAnalyzer:
    return FakeAnalyzer(clock)


@pytest.fixture
def exporters() -> Exporters:
    return Exporters()


@pytest.fixture
def url(analyzer: FakeAnalyzer, clock: FakeClock, exporters: Exporters, tmp_path: Path) -> Iterator[str]:
    settings = RecommenderSettings(prometheus_url="http://prom.test", runs_dir=tmp_path, refresh_interval_s=3600,
                                   write_token=SecretStr(TOKEN), max_body_bytes=1 << 20, max_window_s=600)
    app = create_app(settings, analyzer=analyzer, clock=clock, fingerprints=exporters, background_refresh=False)
    with serve(app) as base:
        yield base


def test_a_write_without_the_token_is_refused_and_reads_stay_open(url: str, tmp_path: Path) -> None:
    body = manifest_dict("r1")
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"}):
        resp = httpx.post(f"{url}/runs", json=body, headers=headers, timeout=10)
        assert resp.status_code == 401, headers
        assert resp.headers["www-authenticate"] == "Bearer" and "write token" in resp.json()["detail"]
    assert not (tmp_path / "r1").exists()  # nothing was registered, nothing persisted
    assert httpx.get(f"{url}/recommendations", timeout=10).status_code == 503  # a read: open, nothing served
    assert httpx.post(f"{url}/runs", json=body, headers=AUTH, timeout=10).status_code == 201
    assert httpx.get(f"{url}/recommendations", timeout=10).json()["run_id"] == "r1"
    assert httpx.get(f"{url}/runs/r1", timeout=10).status_code == 200


def test_a_generated_token_is_needed_when_none_is_configured(analyzer: FakeAnalyzer) -> None:
    # an empty token (an unset variable in a compose file) is no token, never one an empty Bearer matches
    app = create_app(RecommenderSettings(prometheus_url=None, write_token=SecretStr("")), analyzer=analyzer,
                     background_refresh=False)
    token = app.state.write_token
    assert len(token) >= 32
    with pytest.raises(ValueError, match="at least 16 characters"):
        RecommenderSettings(write_token=SecretStr("guessable"))
    with serve(app) as base:
        assert httpx.post(f"{base}/runs", json=manifest_dict("r1"), timeout=10).status_code == 401
        head = b"POST /runs HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer\r\nContent-Length: 2\r\n\r\n"
        assert _raw_post(base, head, iter([b"{}"]))[0] == 401  # an empty Bearer (httpx will not send one)
        ok = httpx.post(f"{base}/runs", json=manifest_dict("r1"), timeout=10,
                        headers={"Authorization": f"Bearer {token}"})
        assert ok.status_code == 201
        lane = httpx.get(f"{base}/recommendations/dense", timeout=10).json()
        assert lane["fingerprint"] is None and "reads no Prometheus" in lane["validity"]["reason"]


def test_answers_keep_the_services_order_whatever_created_at_a_body_claims(url: str, clock: FakeClock,
                                                                            tmp_path: Path) -> None:
    httpx.post(f"{url}/runs", json=manifest_dict("forged", created_at=4e9), headers=AUTH, timeout=10)
    clock.now += 5
    httpx.post(f"{url}/runs", json=manifest_dict("honest", created_at=1_799_999_000.0), headers=AUTH, timeout=10)
    doc = httpx.get(f"{url}/recommendations", timeout=10).json()
    assert {k: v["run_id"] for k, v in doc["lanes"].items()} == {"dense": "honest", "moe": "honest"}
    # and persisted so: the forged run's manifest says the service's time, not 4e9
    persisted = json.loads((tmp_path / "forged" / "manifest.json").read_text())
    assert persisted["created_at"] == 1_800_000_000.0


def test_an_old_manifest_posted_again_does_not_replace_a_newer_answer(url: str, clock: FakeClock) -> None:
    # last night's run (windows from t0=0) then tonight's (t0=50,000 s later); last night's manifest, readable by
    # anyone at GET /runs/{id}, is then posted again with the token. Before, it ranked by when it was posted and
    # replaced tonight's answer.
    old = manifest_dict("night-1", t0=0.0)
    assert httpx.post(f"{url}/runs", json=old, headers=AUTH, timeout=10).status_code == 201
    clock.now += 60
    assert httpx.post(f"{url}/runs", json=manifest_dict("night-2", t0=50_000.0), headers=AUTH,
                      timeout=10).status_code == 201
    clock.now += 60
    again = httpx.get(f"{url}/runs/night-1", timeout=10).json()["manifest"]
    assert httpx.post(f"{url}/runs", json=again, headers=AUTH, timeout=10).status_code == 201
    doc = httpx.get(f"{url}/recommendations", timeout=10).json()
    assert {k: v["run_id"] for k, v in doc["lanes"].items()} == {"dense": "night-2", "moe": "night-2"}
    assert doc["run_id"] == "night-2"
    listed = httpx.get(f"{url}/runs", timeout=10).json()["runs"]
    assert [(r["key"], r["measured_at"], r["serves"]) for r in listed] == [
        ("night-1", 138.0, []), ("night-2", 50_138.0, ["dense", "moe"])]  # each lane's last window end


def test_a_partial_run_never_outranks_a_complete_one_whenever_it_was_measured(url: str, clock: FakeClock) -> None:
    done = manifest_dict("done", lanes=("dense",), t0=0.0)
    assert httpx.post(f"{url}/runs", json=done, headers=AUTH, timeout=10).status_code == 201
    clock.now += 60
    killed = manifest_dict("killed", t0=9_000.0, finished=False)  # measured later, dense and moe
    assert httpx.post(f"{url}/runs", json=killed, headers=AUTH, timeout=10).status_code == 201
    doc = httpx.get(f"{url}/recommendations", timeout=10).json()
    assert {k: (v["run_id"], v.get("partial")) for k, v in doc["lanes"].items()} == {
        "dense": ("done", None),
        "moe": ("killed", "run killed: it did not finish (finished_at null: the session was killed or crashed "
                          "mid-walk)")}
    assert doc["run_id"] == "done"
    assert any(n.startswith("run killed is partial") and "moe" in n and "dense" not in n for n in doc["notes"])


def test_the_fingerprint_comes_from_the_exporters_never_the_body(url: str, exporters: Exporters) -> None:
    body = manifest_dict("r1")
    forged = _fingerprint(64)
    body["lanes"] = {"dense": {"fingerprint": forged}, "moe": {"fingerprint": forged}}
    assert httpx.post(f"{url}/runs", json=body, headers=AUTH, timeout=10).status_code == 201
    starts = exporters.asked[-1]
    assert starts == {"dense": 1.0, "moe": 101.0}  # each lane's first window start (manifest_dict)
    doc = httpx.get(f"{url}/recommendations", timeout=10).json()
    dense, moe = doc["lanes"]["dense"], doc["lanes"]["moe"]
    assert dense["fingerprint"]["settings"]["slots"] == 4  # what its exporter published, not the body's 64
    assert dense["fingerprint"]["digest"] == exporters.published["dense"]["digest"] != forged["digest"]
    assert moe["fingerprint"] is None and "not scraped" in moe["validity"]["reason"]


def _raw_post(url: str, head: bytes, body_chunks: Iterator[bytes], timeout_s: float = 10.0) -> tuple[int, float]:
    """A POST written on a socket (so a body larger than what is read can be offered), its status and time."""
    parts = urlsplit(url)
    start = time.monotonic()
    with socket.create_connection((parts.hostname, parts.port), timeout=timeout_s) as sock:
        sock.sendall(head)
        try:
            for chunk in body_chunks:
                sock.sendall(chunk)
        except OSError:  # the service answered and closed while the rest was still coming
            pass
        reply = b""
        while b"\r\n" not in reply:
            data = sock.recv(4096)
            if not data:
                break
            reply += data
    return int(reply.split(b" ")[1]), time.monotonic() - start


def test_a_100_mb_body_is_refused_without_being_read(url: str) -> None:
    hundred = 100 << 20
    chunk = b"x" * (1 << 20)
    head = (f"POST /runs HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n"
            "Content-Type: application/json\r\n"
            f"Content-Length: {hundred}\r\n\r\n").encode()
    status, took = _raw_post(url, head, iter([chunk] * 100))
    assert status == 413 and took < 5.0, took
    chunked = (f"POST /runs HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n"
               "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n").encode()
    framed = (b"%x\r\n" % len(chunk) + chunk + b"\r\n" for _ in range(100))
    status, took = _raw_post(url, chunked, framed)
    assert status == 413 and took < 5.0, took
    unauthorised = head.replace(TOKEN.encode(), b"nope")
    status, took = _raw_post(url, unauthorised, iter([chunk] * 100))
    assert status == 401 and took < 5.0, took


def test_runs_too_large_to_analyse_are_refused(url: str, analyzer: FakeAnalyzer) -> None:
    many = [{"lane": "dense", "concurrency": 1 + i % 64, "start": 1000.0 + i, "end": 1000.5 + i} for i in range(10_000)]
    start = time.monotonic()
    resp = httpx.post(f"{url}/runs", json={**manifest_dict("many"), "steps": many}, headers=AUTH, timeout=30)
    assert resp.status_code == 413 and "max_steps" in resp.json()["detail"], resp.text[:300]
    assert time.monotonic() - start < 10.0
    long = {**manifest_dict("long"), "steps": [{"lane": "dense", "concurrency": 1, "start": 0.0, "end": 86400.0}]}
    resp = httpx.post(f"{url}/runs", json=long, headers=AUTH, timeout=10)
    assert resp.status_code == 413 and "max_window_s" in resp.json()["detail"]
    assert analyzer.calls == 0  # none of them cost an analysis


def test_a_failed_analysis_is_answered_from_the_store_until_it_is_retried(url: str, analyzer: FakeAnalyzer,
                                                                         clock: FakeClock) -> None:
    analyzer.down = True
    assert httpx.post(f"{url}/runs", json=manifest_dict("r1"), headers=AUTH, timeout=10).status_code == 202
    calls = analyzer.calls
    for _ in range(20):
        info = httpx.get(f"{url}/runs/r1", timeout=10).json()
        assert info["analyzed"] is False and "unreachable" in info["reason"]
    assert analyzer.calls == calls  # 20 reads, no analysis
    analyzer.down = False
    clock.now += 3600  # the retry interval (the refresh interval) later
    assert httpx.get(f"{url}/runs/r1", timeout=10).json()["analyzed"] is True
    assert analyzer.calls == calls + 1


def test_a_run_folder_written_after_start_is_read_without_a_write(url: str, tmp_path: Path) -> None:
    from satbench.core.manifest import RunManifest

    RunManifest.from_dict(manifest_dict("written")).write(tmp_path / "written" / "manifest.json")
    info = httpx.get(f"{url}/runs/written", timeout=10).json()
    assert info["analyzed"] is True
    assert httpx.get(f"{url}/runs/..%2Fetc", timeout=10).status_code == 404
