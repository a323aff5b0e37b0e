"""Schemathesis against the recommender's own OpenAPI, with and without the write token: no generated request
gets a 5xx.

The app serves a real analysis (records source, a synthetic run in ``runs_dir``) so the 200 paths are
exercised too, not only 404s. Examples are bounded so the whole fuzz takes seconds; 503 ("nothing computed
yet") is a documented answer, not a server error, so only 500/502/504 and undocumented 5xx fail. Without the
token every write is a 401; with it the writes reach validation, the bounds and the analysis.
"""

from __future__ import annotations

import asyncio
import atexit
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from satbench.core.records import write_records
from satbench.recommender.app import create_app
from satbench.recommender.settings import RecommenderSettings
from testkit.synthetic import SyntheticLane, simulate_run

_RUNS = Path(tempfile.mkdtemp(prefix="satbench-fuzz-runs-"))
# made at import: every pytest worker that collects this module makes one, and only the one that runs its
# tests tears the fixture down, so each process removes its own at exit
atexit.register(shutil.rmtree, _RUNS, True)
_MANIFEST, _RECORDS = simulate_run((SyntheticLane("dense", slots=4),), (1, 2, 4, 8), t0=time.time() - 600,
                                   window_s=4.0)
_MANIFEST.write(_RUNS / _MANIFEST.run_id / "manifest.json")
write_records(_RUNS / _MANIFEST.run_id / "records.jsonl", _RECORDS)

TOKEN = "fuzz-write-token-0000"
APP = create_app(RecommenderSettings(prometheus_url=None, runs_dir=_RUNS, write_token=TOKEN,
                                     allowed_hosts=["testserver"]),  # the ASGI test client's Host
                 background_refresh=False)
asyncio.run(APP.state.store.register(_MANIFEST))
schema = schemathesis.openapi.from_asgi("/openapi.json", APP)


@pytest.fixture(scope="module", autouse=True)
def _remove_runs() -> Iterator[None]:
    yield
    shutil.rmtree(_RUNS, ignore_errors=True)


def test_the_fuzzed_app_serves_a_document() -> None:
    assert APP.state.store.state == "fresh"
    assert APP.state.store.document()["lanes"]["dense"]["status"] == "ok"


@pytest.mark.slow
@pytest.mark.parametrize("token", [TOKEN, None], ids=["with-token", "without-token"])
@schema.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_request_gets_a_server_error(case: schemathesis.Case, token: str | None) -> None:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    response = case.call(headers=headers)
    assert response.status_code < 500 or response.status_code == 503, (
        f"{case.method} {case.formatted_path} -> {response.status_code}: {response.text[:300]}")
    if token is None and case.method.upper() not in ("GET", "HEAD", "OPTIONS"):
        assert response.status_code == 401
