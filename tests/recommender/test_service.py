"""The service on a real uvicorn server with a fake analyzer: routes, errors, staleness, metrics, OpenAPI,
schema drift. The background refresh runs every 20 ms, so staleness is reached the way production does.
The test client holds the service's write token; what a write without it gets is
``tests/recommender/test_service_writes.py``'s."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
from pydantic import SecretStr

from satbench.answer.policy import Policy
from satbench.core.figures import StepFigures
from satbench.core.manifest import RunManifest, StepWindow
from satbench.recommender.app import create_app
from satbench.recommender.errors import PrometheusUnavailable
from satbench.recommender.run_analysis import document_from_figures
from satbench.recommender.schema import SCHEMA_PATH, render_schema
from satbench.recommender.settings import RecommenderSettings
from tests.recommender.figures_factory import ladder
from tests.recommender.server import serve


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


class FakeAnalyzer:
    """Answers from synthetic figures; ``down`` makes it fail like an unreachable Prometheus."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.down = False
        self.calls = 0

    async def __call__(self, manifest: RunManifest, run_dir: Path | None) -> dict[str, Any]:
        self.calls += 1
        if self.down:
            raise PrometheusUnavailable("Prometheus at http://127.0.0.1:1 unreachable: connection refused")
        curves = {"dense": {1: 100.0, 2: 200.0, 4: 400.0, 8: 410.0},
                  "moe": {1: 80.0, 2: 160.0, 4: 320.0, 8: 640.0}}
        figures: dict[str, list[StepFigures]] = {}
        for lane in manifest.lane_names():
            rungs = {w.concurrency for w in manifest.windows(lane)}
            figures[lane] = [s for s in ladder(curves[lane]) if s.concurrency in rungs]
        return document_from_figures(manifest, figures, policy=Policy(), generated_at=self.clock(),
                                     source={"kind": "prometheus", "url": "http://prom.test"})


def manifest_dict(run_id: str, lanes: tuple[str, ...] = ("dense", "moe"),
                  created_at: float = 1.0, t0: float = 0.0, finished: bool = True) -> dict[str, Any]:
    """A run's manifest as its session posts it: its windows from ``t0``, finished after the last one
    (``finished`` false: as a killed walk leaves it, ``finished_at`` null)."""
    steps = [StepWindow(lane, c, t0 + 100.0 * i + c, t0 + 100.0 * i + c + 30.0) for i, lane in enumerate(lanes)
             for c in (1, 2, 4, 8)]
    finished_at = max(w.end for w in steps) + 1.0 if finished else None
    return RunManifest(run_id=run_id, created_at=created_at, steps=steps, finished_at=finished_at).to_dict()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def analyzer(clock: FakeClock) -> FakeAnalyzer:
    return FakeAnalyzer(clock)


TOKEN = "service-test-token"


async def no_fingerprints(starts: Any) -> dict[str, Any]:
    """No exporter was scraped: every lane's fingerprint is unknown (what the service takes is tested apart)."""
    return {key: (None, "no exporter in this test") for key in starts}


@pytest.fixture
def client(analyzer: FakeAnalyzer, clock: FakeClock, tmp_path: Path) -> Iterator[httpx.Client]:
    settings = RecommenderSettings(prometheus_url="http://prom.test", runs_dir=tmp_path,
                                   refresh_interval_s=0.02, write_token=SecretStr(TOKEN))
    app = create_app(settings, analyzer=analyzer, clock=clock, fingerprints=no_fingerprints)
    with serve(app) as url, httpx.Client(base_url=url, timeout=10,
                                         headers={"Authorization": f"Bearer {TOKEN}"}) as test_client:
        yield test_client


def until(predicate: Callable[[], bool], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


def test_nothing_to_serve_is_a_503_with_a_reason(client: httpx.Client) -> None:
    resp = client.get("/recommendations")
    assert resp.status_code == 503
    assert "no run has been registered" in resp.json()["detail"]
    assert client.get("/healthz").json()["document"] == "none"


def test_register_then_serve(client: httpx.Client, tmp_path: Path) -> None:
    resp = client.post("/runs", json=manifest_dict("20261129T101500Z-3f2a"))
    assert resp.status_code == 201, resp.text
    assert resp.json() == {"run_id": "20261129T101500Z-3f2a", "analyzed": True, "reason": None,
                           "lanes": {"dense": 4, "moe": 8}}
    doc = client.get("/recommendations").json()
    jsonschema.validate(doc, json.loads(SCHEMA_PATH.read_text(encoding="utf-8")))
    assert doc["lanes"]["dense"]["binding_constraint"] == "throughput_plateau"
    assert doc["lanes"]["moe"]["binding_constraint"] == "ladder_top"
    assert client.get("/recommendations/dense").json()["recommended_concurrency"] == 4
    assert (tmp_path / "20261129T101500Z-3f2a" / "manifest.json").exists()
    run = client.get("/runs/20261129T101500Z-3f2a").json()
    assert run["analyzed"] and run["manifest"]["run_id"] == "20261129T101500Z-3f2a"
    assert run["recommendations"]["lanes"]["moe"]["recommended_concurrency"] == 8


def test_unknown_lane_and_run_are_404s_that_say_what_exists(client: httpx.Client) -> None:
    client.post("/runs", json=manifest_dict("r1"))
    resp = client.get("/recommendations/nope")
    assert resp.status_code == 404 and "lanes: dense, moe" in resp.json()["detail"]
    assert client.get("/runs/r2").status_code == 404


@pytest.mark.parametrize(
    "change",
    [
        {"run_id": "../../etc"},
        {"run_id": ""},
        {"steps": []},
        {"steps": [{"lane": "dense", "concurrency": 0, "start": 1, "end": 2}]},
        {"steps": [{"lane": "", "concurrency": 1, "start": 1, "end": 2}]},
        {"steps": [{"lane": "dense", "concurrency": 1, "start": "soon", "end": 2}]},
        {"schema": "satbench.manifest/v9"},
    ],
)
def test_bad_manifests_are_422s(client: httpx.Client, change: dict[str, Any]) -> None:
    body = {**manifest_dict("r1"), **change}
    resp = client.post("/runs", json=body)
    assert resp.status_code == 422
    assert resp.json()["detail"]


def test_not_json_is_a_422(client: httpx.Client) -> None:
    resp = client.post("/runs", content=b"{not json", headers={"content-type": "application/json"})
    assert resp.status_code == 422


@pytest.mark.slow
def test_unreachable_source_serves_the_last_good_answer_as_stale(client: httpx.Client, analyzer: FakeAnalyzer,
                                                                 clock: FakeClock) -> None:
    client.post("/runs", json=manifest_dict("r1"))
    analyzer.down = True
    clock.now += 90
    until(lambda: client.get("/healthz").json()["document"] == "stale")
    # a background refresh already in flight when the source went down may still succeed after the clock
    # moved (the answer is then 0 s old when it goes stale); from then on it ages with the clock
    first = client.get("/recommendations").json()["age_s"]
    assert first in (0.0, 90.0), first
    clock.now += 30
    doc = client.get("/recommendations").json()
    assert doc["stale"] is True and doc["age_s"] == first + 30
    lane = doc["lanes"]["dense"]
    assert (lane["status"], lane["last_status"], lane["recommended_concurrency"]) == ("stale", "ok", 4)
    assert "unreachable" in lane["reason"]
    jsonschema.validate(doc, json.loads(SCHEMA_PATH.read_text(encoding="utf-8")))
    assert "satbench_recommendations_stale 1.0" in client.get("/metrics").text
    # the capabilities say it too: the number kept, the status stale with why, as the document
    cut = client.get("/capabilities").json()["lanes"]["dense"]
    assert (cut["status"], cut["max_useful_concurrency"]) == ("stale", 4) and "unreachable" in cut["reason"]
    analyzer.down = False
    until(lambda: client.get("/recommendations").json()["stale"] is False)
    cut = client.get("/capabilities").json()["lanes"]["dense"]
    assert (cut["status"], cut["max_useful_concurrency"]) == ("ok", 4)


def test_first_registration_with_the_source_down_is_pending_then_503(client: httpx.Client,
                                                                      analyzer: FakeAnalyzer) -> None:
    analyzer.down = True
    resp = client.post("/runs", json=manifest_dict("r1"))
    assert resp.status_code == 202 and resp.json()["analyzed"] is False
    resp = client.get("/recommendations")
    assert resp.status_code == 503 and "unreachable" in resp.json()["detail"]


def test_newest_run_per_lane_is_served(client: httpx.Client, clock: FakeClock) -> None:
    client.post("/runs", json=manifest_dict("r1", created_at=1.0))
    clock.now += 1
    client.post("/runs", json=manifest_dict("r2", lanes=("moe",), created_at=2.0, t0=1000.0))  # measured later
    doc = client.get("/recommendations").json()
    assert doc["run_id"] == "r2"
    assert (doc["lanes"]["dense"]["run_id"], doc["lanes"]["moe"]["run_id"]) == ("r1", "r2")


def test_metrics_per_lane(client: httpx.Client) -> None:
    client.post("/runs", json=manifest_dict("r1"))
    text = client.get("/metrics").text
    assert 'satbench_recommended_concurrency{lane="dense"} 4.0' in text
    assert 'satbench_saturation_concurrency{lane="dense"} 4.0' in text
    assert 'satbench_recommended_concurrency{lane="moe"} 8.0' in text
    assert 'satbench_saturation_concurrency{lane="moe"}' not in text  # still growing: no saturation yet
    assert ('satbench_recommendation_status{binding_constraint="throughput_plateau",lane="dense",status="ok"} 1.0'
            in text)
    assert 'satbench_recommendation_status{binding_constraint="ladder_top",lane="moe",status="unsaturated"} 1.0' in text
    doc = client.get("/recommendations").json()
    for lane, answer in doc["lanes"].items():  # the verdict series say what the lane summaries say
        flags = {"decode_starvation": answer["starvation"]["decode_ok"],
                 "prefill_starvation": answer["starvation"]["prefill_ok"], "fairness": answer["fairness"]["ok"]}
        for check, ok in flags.items():
            line = f'satbench_verdict_ok{{check="{check}",lane="{lane}"}}'
            assert (f"{line} {1.0 if ok else 0.0}" in text) if ok is not None else line not in text


def test_runs_dir_is_loaded_at_startup(analyzer: FakeAnalyzer, clock: FakeClock, tmp_path: Path) -> None:
    RunManifest.from_dict(manifest_dict("r7")).write(tmp_path / "r7" / "manifest.json")
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "manifest.json").write_text("{oops", encoding="utf-8")
    settings = RecommenderSettings(runs_dir=tmp_path)
    app = create_app(settings, analyzer=analyzer, clock=clock)
    with serve(app) as url, httpx.Client(base_url=url, timeout=10) as test_client:
        until(lambda: test_client.get("/recommendations").status_code == 200)
        assert test_client.get("/recommendations").json()["run_id"] == "r7"
        assert test_client.get("/healthz").json()["runs"] == 1


@pytest.mark.slow
def test_openapi_describes_the_document(client: httpx.Client) -> None:
    spec = client.get("/openapi.json").json()
    ok = spec["paths"]["/recommendations"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert ok["$ref"].endswith("/RecommendationsDocument")
    assert "503" in spec["paths"]["/recommendations"]["get"]["responses"]
    paths = {"/recommendations/{lane}", "/runs", "/runs/{run_id}", "/healthz", "/metrics"}
    assert paths <= set(spec["paths"])


def test_committed_schema_has_no_drift() -> None:
    assert SCHEMA_PATH.read_text(encoding="utf-8") == render_schema(), "run: python -m satbench.recommender.schema"
