"""The service when its clients or its disk misbehave, on a real uvicorn server on loopback built as
``satbench recommender`` builds it (``recommender.http_server``): half-sent requests closed at their deadline, a
bound on connections, a wrong ``Host`` refused (DNS rebinding), a full or read-only runs folder answered 507/503
with nothing registered, and the served bytes built once per change, never per poll."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from pydantic import SecretStr

from satbench.core.manifest import RunManifest
from satbench.recommender.app import analysis_workers, create_app
from satbench.recommender.http_server import deadline_protocol, uvicorn_config
from satbench.recommender.settings import RecommenderSettings
from testkit.net import free_port, wait_http
from tests.recommender.test_service import FakeAnalyzer, FakeClock, manifest_dict, no_fingerprints, until

TOKEN = "guards-test-write-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@contextlib.contextmanager
def running(app: Any, config: uvicorn.Config) -> Iterator[str]:
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="uvicorn-guards", daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{config.port}"
    try:
        wait_http(url + "/healthz", timeout_s=30)
        yield url
    finally:
        server.should_exit = True
        # the lifespan's own shutdown (the analyses' process, where one was given) ends before anything after
        # this block touches what the app held: a join that gave up first raced it (a pool closed twice)
        thread.join(timeout=60)
        assert not thread.is_alive(), "the service did not stop within 60 s"


def settings_for(tmp_path: Path, **more: Any) -> RecommenderSettings:
    values: dict[str, Any] = {"refresh_interval_s": 3600, **more}
    return RecommenderSettings(prometheus_url="http://prom.test", runs_dir=tmp_path, port=free_port(),
                               write_token=SecretStr(TOKEN), **values)


@contextlib.contextmanager
def service(tmp_path: Path, analyzer: Any = None, clock: Any = None, *, parser: str = "httptools",
            background_refresh: bool = False, **more: Any) -> Iterator[tuple[str, Any]]:
    clock = clock or FakeClock()
    settings = settings_for(tmp_path, **more)
    app = create_app(settings, analyzer=analyzer or FakeAnalyzer(clock), clock=clock, fingerprints=no_fingerprints,
                     background_refresh=background_refresh)
    config = uvicorn_config(app, settings)
    if parser != "httptools":
        config.http = deadline_protocol(settings.request_timeout_s, settings.max_connections, parser="h11")
    with running(app, config) as url:
        yield url, app


def closed_within(sock: socket.socket, timeout_s: float) -> float | None:
    """Seconds until the server closed ``sock`` (EOF or reset), or None when it was still open at ``timeout_s``."""
    t0 = time.monotonic()
    sock.settimeout(timeout_s)
    try:
        while sock.recv(4096):
            pass
    except TimeoutError:
        return None
    except ConnectionResetError:
        pass
    return time.monotonic() - t0


# -- half-sent requests -------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("parser", ["httptools", "h11"])
def test_half_sent_requests_are_closed_at_their_deadline_and_whole_ones_are_not(tmp_path: Path,
                                                                                 parser: str) -> None:
    clock = FakeClock()
    analyzer = FakeAnalyzer(clock)
    slow = threading.Event()

    async def slow_analyzer(manifest: RunManifest, run_dir: Path | None) -> dict[str, Any]:
        await asyncio.sleep(1.5)  # longer than the deadline: a whole request at work is never cut
        slow.set()
        return await analyzer(manifest, run_dir)

    with service(tmp_path, slow_analyzer, clock, parser=parser, request_timeout_s=0.6) as (url, _):
        port = int(url.rsplit(":", 1)[1])
        silent = socket.create_connection(("127.0.0.1", port))
        half_head = socket.create_connection(("127.0.0.1", port))
        half_head.sendall(b"GET /recommendations HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        half_body = socket.create_connection(("127.0.0.1", port))
        half_body.sendall(f"POST /runs HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n"
                          "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{".encode())
        trickle = socket.create_connection(("127.0.0.1", port))
        with silent, half_head, half_body, trickle:
            t0 = time.monotonic()
            for byte in b"GET /recommendations HTTP/1.1\r\nHost: 127.0.0.1\r\n":  # 4.5 s at a byte per 0.1 s
                try:
                    trickle.sendall(bytes([byte]))
                except OSError:
                    break
                time.sleep(0.1)
            assert closed_within(trickle, 5.0) is not None and time.monotonic() - t0 < 2.5  # data is no extension
            for sock in (silent, half_head, half_body):
                assert closed_within(sock, 0.5) is not None, f"{sock} still open"
            # a whole request whose answer takes longer than the deadline is answered
            resp = httpx.post(f"{url}/runs", json=manifest_dict("r-slow"), headers=AUTH, timeout=20)
            assert resp.status_code == 201 and slow.is_set()
            # a keep-alive poller pausing less than the deadline between requests keeps its connection
            with httpx.Client(base_url=url, timeout=5) as client:
                for _ in range(3):
                    assert client.get("/recommendations").status_code == 200
                    time.sleep(0.4)


@pytest.mark.slow
def test_connections_past_the_bound_are_closed_on_arrival_and_polls_go_on_after(tmp_path: Path) -> None:
    with service(tmp_path, request_timeout_s=1.0, max_connections=16) as (url, _):
        port = int(url.rsplit(":", 1)[1])
        time.sleep(1.5)  # wait_http's connections closed
        held = [socket.create_connection(("127.0.0.1", port)) for _ in range(16)]
        try:
            time.sleep(0.2)
            extra = socket.create_connection(("127.0.0.1", port))
            with extra:
                assert closed_within(extra, 0.8) is not None  # closed at once, the held ones still open
            assert all(closed_within(s, 0.01) is None for s in held[:4])
            for sock in held:  # the held ones reach their deadline
                assert closed_within(sock, 5.0) is not None
        finally:
            for sock in held:
                sock.close()
        assert httpx.get(f"{url}/healthz", timeout=5).status_code == 200


# -- Host ------------------------------------------------------------------------------------------------
HOSTS = {"evil.example": 421, "evil.example:9108": 421, "localhost.evil.example": 421, "example.org": 421,
         "127.0.0.1": 200, "localhost:9108": 200, "LOCALHOST.": 200, "[::1]:9108": 200, "10.1.2.3:9108": 200,
         "recommender.satbench.svc": 200, "a.example.org": 200}


def test_a_host_the_service_is_not_named_is_refused_before_any_route(tmp_path: Path) -> None:
    allowed = ["recommender.satbench.svc", "*.example.org"]
    with service(tmp_path, allowed_hosts=allowed) as (url, _):
        assert httpx.post(f"{url}/runs", json=manifest_dict("r1"), headers=AUTH, timeout=10).status_code == 201
        for i, (host, status) in enumerate(HOSTS.items()):
            for path in ("/runs/r1", "/recommendations", "/capabilities", "/healthz"):
                resp = httpx.get(f"{url}{path}", headers={"Host": host}, timeout=10)
                assert resp.status_code == status, (host, path, resp.text)
                if status == 421:  # nothing of the run reaches the rebound page
                    assert "allowed_hosts" in resp.json()["detail"] and "r1" not in resp.text
            posted = httpx.post(f"{url}/runs", json=manifest_dict(f"r-{i}"), headers={**AUTH, "Host": host},
                                timeout=10)
            assert posted.status_code == (421 if status == 421 else 201), host


def test_allowed_hosts_refuses_what_is_not_a_name() -> None:
    with pytest.raises(ValueError, match="allowed_hosts"):
        RecommenderSettings(allowed_hosts=["http://evil.example/"])
    names = RecommenderSettings(host="0.0.0.0").host_names()
    assert "0.0.0.0" in names and socket.gethostname() in names and "evil.example" not in names


# -- a runs folder that cannot take a run ---------------------------------------------------------------------
def test_a_read_only_runs_folder_is_a_503_with_nothing_registered(tmp_path: Path) -> None:
    def read_only(manifest: RunManifest, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))

    clock = FakeClock()
    settings = settings_for(tmp_path)
    app = create_app(settings, analyzer=FakeAnalyzer(clock), clock=clock, fingerprints=no_fingerprints,
                     background_refresh=False, write_manifest=read_only)
    with running(app, uvicorn_config(app, settings)) as url:
        resp = httpx.post(f"{url}/runs", json=manifest_dict("r1"), headers=AUTH, timeout=10)
        assert resp.status_code == 503 and "Read-only file system" in resp.json()["detail"], resp.text
        assert httpx.get(f"{url}/runs/r1", timeout=10).status_code == 404
        assert httpx.get(f"{url}/recommendations", timeout=10).status_code == 503
        assert httpx.get(f"{url}/healthz", timeout=10).json()["runs"] == 0
    assert list(tmp_path.iterdir()) == []  # the run's folder, made before the write failed, is gone


def test_a_full_runs_folder_is_a_507_with_nothing_registered_and_a_retry_later_succeeds(tmp_path: Path) -> None:
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full to fill a write")
    run_dir = tmp_path / "r1"
    run_dir.mkdir()
    # the manifest's temporary file is /dev/full: the kernel's own ENOSPC, through the real writer
    (run_dir / f".manifest.json.{os.getpid()}.tmp").symlink_to("/dev/full")
    with service(tmp_path) as (url, _):
        resp = httpx.post(f"{url}/runs", json=manifest_dict("r1"), headers=AUTH, timeout=10)
        assert resp.status_code == 507 and "No space left" in resp.json()["detail"], resp.text
        assert httpx.get(f"{url}/runs/r1", timeout=10).status_code == 404
        assert httpx.get(f"{url}/healthz", timeout=10).json()["runs"] == 0
        assert list(run_dir.iterdir()) == []  # the torn temporary file removed; the folder was already there
        resp = httpx.post(f"{url}/runs", json=manifest_dict("r1"), headers=AUTH, timeout=10)
        assert resp.status_code == 201 and (run_dir / "manifest.json").is_file()


# -- the served bytes, built once per change ---------------------------------------------------------------
@pytest.mark.slow
def test_served_bytes_are_built_once_per_change_and_a_stale_age_once_per_second(tmp_path: Path) -> None:
    clock = FakeClock()
    analyzer = FakeAnalyzer(clock)
    with service(tmp_path, analyzer, clock, background_refresh=True, refresh_interval_s=0.05) as (url, app):
        store = app.state.store
        assert httpx.post(f"{url}/runs", json=manifest_dict("r1"), headers=AUTH, timeout=10).status_code == 201
        analyzer.down = True
        clock.now += 90
        until(lambda: store.state == "stale")
        first = httpx.get(f"{url}/recommendations", timeout=10).json()
        before = dict(store.builds)
        with httpx.Client(base_url=url, timeout=10) as client:
            for i in range(40):
                for path, headers in (("/recommendations", {}), ("/recommendations?schema=v1", {}),
                                      ("/capabilities", {}), ("/recommendations", {"Accept-Encoding": "gzip"})):
                    assert client.get(path, headers=headers).status_code == 200
                if i % 10 == 9:
                    clock.now += 0.25  # 40 polls of four forms over a second of age
            assert store.builds["render"] == before["render"]  # nothing rendered whole
            # at most one fill per whole second of age (and the next second's, made ahead)
            assert store.builds["age"] - before["age"] <= 3
            raw = client.get("/recommendations", headers={"Accept-Encoding": "identity"})
        served = raw.json()
        assert served["stale"] is True and served["age_s"] == first["age_s"] + 1.0
        assert served["lanes"]["dense"]["reason"].endswith(f"({served['age_s']:.0f} s old)")
        # the filled-in template is the stale document as ``mark_stale`` defines it (``document()``), exactly
        assert served == store.document()
        zipped = httpx.get(f"{url}/recommendations", headers={"Accept-Encoding": "gzip"}, timeout=10)
        assert zipped.headers["content-encoding"] == "gzip" and zipped.content == raw.content  # httpx unzips


class ElsewhereAnalyzer:
    """``FakeAnalyzer``'s answers, with the process that computed them in the notes (picklable: no closure)."""

    def __init__(self) -> None:
        self.inner = FakeAnalyzer(FakeClock())

    async def __call__(self, manifest: RunManifest, run_dir: Path | None) -> dict[str, Any]:
        doc = await self.inner(manifest, run_dir)
        return {**doc, "notes": [*doc.get("notes", []), f"analysed in process {os.getpid()}"]}


@pytest.mark.slow
def test_the_entry_points_analyse_in_a_worker_process(tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    with analysis_workers() as workers:
        app = create_app(settings, analyzer=ElsewhereAnalyzer(), clock=FakeClock(), fingerprints=no_fingerprints,
                         background_refresh=False, analysis_executor=workers)
        with running(app, uvicorn_config(app, settings)) as url:
            assert httpx.post(f"{url}/runs", json=manifest_dict("r1"), headers=AUTH, timeout=60).status_code == 201
            notes = httpx.get(f"{url}/recommendations", timeout=10).json()["notes"]
    pids = {int(n.rsplit(" ", 1)[1]) for n in notes if n.startswith("analysed in process")}
    assert len(pids) == 1 and os.getpid() not in pids
