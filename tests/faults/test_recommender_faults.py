"""The recommender when its sources fail: Prometheus down, Prometheus slow, records gone, broken windows.

The promise (DESIGN.md, recommendations ``status``): never an answer computed from a broken window, never a
hang. Prometheus unreachable with records at hand: the records answer, and the document says so. Neither
source: before any good answer a 503 with the reason, after one the last good answer marked ``stale`` with
its age. A window the load generator marked invalid makes the lane ``degraded`` below it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from satbench.answer.policy import Policy
from satbench.core.manifest import RunManifest
from satbench.core.records import RequestRecord, write_records
from satbench.recommender.app import create_app
from satbench.recommender.errors import SourceUnavailable
from satbench.recommender.run_analysis import analyze_run_async
from satbench.recommender.settings import RecommenderSettings
from testkit.net import free_port
from testkit.synthetic import SyntheticLane, simulate_run
from tests.recommender.server import serve

LANE = SyntheticLane("dense", slots=4)


def _run(**window_changes: Any) -> tuple[RunManifest, list[RequestRecord]]:
    manifest, records = simulate_run((LANE,), (1, 2, 4, 8), t0=time.time() - 600, window_s=6.0)
    if window_changes:
        steps = tuple(dataclasses.replace(w, **window_changes) if w.concurrency == 4 else w for w in manifest.steps)
        manifest = manifest.model_copy(update={"steps": steps})
    return manifest, records


def _run_dir(root: Path, manifest: RunManifest, records: list[RequestRecord]) -> Path:
    run_dir = root / manifest.run_id
    manifest.write(run_dir / "manifest.json")
    write_records(run_dir / "records.jsonl", records)
    return run_dir


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections (the kernel's backlog) and never answers: a hung Prometheus."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    try:
        yield int(sock.getsockname()[1])
    finally:
        sock.close()


@contextmanager
def _client(prometheus_url: str, runs_dir: Path | None) -> Iterator[httpx.Client]:
    """The service on a real uvicorn on loopback (no background refresh: the test drives analysis)."""
    settings = RecommenderSettings(prometheus_url=prometheus_url, runs_dir=runs_dir, prometheus_timeout_s=0.5,
                                   write_token="faults-write-token-0")
    with serve(create_app(settings, background_refresh=False)) as url, \
            httpx.Client(base_url=url, timeout=30, headers={"Authorization": "Bearer faults-write-token-0"}) as client:
        yield client


def test_prometheus_down_and_no_records_is_a_503_with_the_reason() -> None:
    manifest, _ = _run()
    with _client(f"http://127.0.0.1:{free_port()}", None) as client:
        resp = client.post("/runs", json=manifest.to_dict())
        assert resp.status_code == 202 and not resp.json()["analyzed"]
        assert "Prometheus" in (resp.json()["reason"] or "")
        resp = client.get("/recommendations")
        assert resp.status_code == 503 and "Prometheus" in resp.json()["detail"]


def test_prometheus_down_falls_back_to_records_then_goes_stale(tmp_path: Path) -> None:
    manifest, records = _run()
    run_dir = _run_dir(tmp_path, manifest, records)
    with _client(f"http://127.0.0.1:{free_port()}", tmp_path) as client:
        assert client.post("/runs", json=manifest.to_dict()).status_code == 201
        doc = client.get("/recommendations").json()
        assert doc["source"]["kind"] == "records"
        assert any("Prometheus" in n for n in doc.get("notes", [])), doc.get("notes")
        assert doc["lanes"]["dense"]["status"] == "ok"
        good = doc["lanes"]["dense"]["recommended_concurrency"]
        shutil.move(run_dir / "records.jsonl", tmp_path / "elsewhere.jsonl")
        client.post("/runs", json=manifest.to_dict())
        resp = client.get("/recommendations")
        assert resp.status_code == 200
        stale = resp.json()
        lane = stale["lanes"]["dense"]
        assert stale.get("stale") is True and lane["status"] == "stale" and lane["age_s"] >= 0
        assert lane["recommended_concurrency"] == good and lane["reason"]
        assert client.get("/healthz").json()["document"] == "stale"


def test_a_hung_prometheus_is_given_up_on_in_bounded_time(silent_port: int) -> None:
    manifest, _ = _run()
    t0 = time.monotonic()
    with pytest.raises(SourceUnavailable):
        asyncio.run(analyze_run_async(manifest, prometheus_url=f"http://127.0.0.1:{silent_port}",
                                      run_dir=None, policy=Policy(), prometheus_timeout_s=0.5))
    assert time.monotonic() - t0 < 10.0


def test_a_hung_prometheus_with_records_answers_from_the_records(tmp_path: Path, silent_port: int) -> None:
    manifest, records = _run()
    run_dir = _run_dir(tmp_path, manifest, records)
    doc = asyncio.run(analyze_run_async(manifest, prometheus_url=f"http://127.0.0.1:{silent_port}",
                                        run_dir=run_dir, policy=Policy(), prometheus_timeout_s=0.5))
    assert doc["source"]["kind"] == "records"


def test_a_window_marked_invalid_degrades_the_lane_below_it(tmp_path: Path) -> None:
    why = "runtime unreachable during the window (9 connections refused)"
    manifest, records = _run(valid=False, reason=why)
    run_dir = _run_dir(tmp_path, manifest, records)
    doc = asyncio.run(analyze_run_async(manifest, prometheus_url=None, run_dir=run_dir, policy=Policy()))
    lane = doc["lanes"]["dense"]
    assert lane["status"] == "degraded", lane
    assert "c=4" in lane["reason"]
    assert lane["recommended_concurrency"] is not None and lane["recommended_concurrency"] <= 2
