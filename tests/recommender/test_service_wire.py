"""The real service (real analyzer) against the backfilled Prometheus, then ``satbench capabilities``."""

from __future__ import annotations

import argparse
import json

import httpx
import pytest

from satbench.answer.models import CapabilitiesModel
from satbench.recommender import capabilities, capabilities_cli
from satbench.recommender.app import create_app
from satbench.recommender.settings import RecommenderSettings
from testkit.net import free_port
from tests.recommender.conftest import SyntheticRun
from tests.recommender.server import serve

pytestmark = pytest.mark.slow

TOKEN = "wire-test-write-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def test_registered_run_is_analysed_from_prometheus_and_reported(synthetic_run: SyntheticRun,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    settings = RecommenderSettings(prometheus_url=synthetic_run.prometheus_url, refresh_interval_s=3600,
                                   write_token=TOKEN)
    with serve(create_app(settings)) as url:
        resp = httpx.post(f"{url}/runs", json=synthetic_run.manifest.to_dict(), timeout=60, headers=AUTH)
        assert resp.status_code == 201, resp.text
        assert resp.json()["lanes"]["dense"] == 4 and resp.json()["lanes"]["moe"] == 8
        doc = httpx.get(f"{url}/recommendations").json()
        assert doc["source"] == {"kind": "prometheus", "url": synthetic_run.prometheus_url}
        assert capabilities_cli.main(argparse.Namespace(url=url, timeout=5.0)) == 0
        served = httpx.get(f"{url}/capabilities")
        again = httpx.get(f"{url}/capabilities")
    fragment = json.loads(capsys.readouterr().out)
    # the service's cut is the CLI's fragment, byte for byte the same on a second poll, in its declared model
    assert served.status_code == 200 and served.json() == fragment and again.content == served.content
    CapabilitiesModel.model_validate(served.json())
    assert len(served.content) * 5 < len(json.dumps(doc))
    dense = fragment["lanes"]["dense"]
    assert dense["max_useful_concurrency"] == 4
    assert dense["run_id"] == synthetic_run.manifest.run_id
    measured = doc["lanes"]["dense"]["throughput_at_recommended_tok_s"]
    assert dense["throughput_tok_s"] == pytest.approx(measured)
    assert dense["measured_at"].endswith("Z")


def test_the_cli_fragment_is_the_services_cut_under_a_v1_default(synthetic_run: SyntheticRun,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    settings = RecommenderSettings(prometheus_url=synthetic_run.prometheus_url, refresh_interval_s=3600,
                                   default_schema="v1", write_token=TOKEN)
    with serve(create_app(settings)) as url:
        assert httpx.post(f"{url}/runs", json=synthetic_run.manifest.to_dict(), timeout=60,
                          headers=AUTH).status_code == 201
        assert httpx.get(f"{url}/recommendations").json()["schema"] == "satbench.recommendations/v1"
        assert capabilities_cli.main(argparse.Namespace(url=url, timeout=5.0)) == 0
        cut = httpx.get(f"{url}/capabilities").json()
    assert json.loads(capsys.readouterr().out) == cut and cut["schema"] == "satbench.recommendations/v2"


def test_unreachable_prometheus_without_records_is_a_503(synthetic_run: SyntheticRun) -> None:
    settings = RecommenderSettings(prometheus_url=f"http://127.0.0.1:{free_port()}", refresh_interval_s=3600,
                                   prometheus_timeout_s=2.0, write_token=TOKEN)
    with serve(create_app(settings)) as url:
        resp = httpx.post(f"{url}/runs", json=synthetic_run.manifest.to_dict(), timeout=30, headers=AUTH)
        assert resp.status_code == 202
        resp = httpx.get(f"{url}/recommendations")
        assert resp.status_code == 503
        assert "unreachable" in resp.json()["detail"]
        cut = httpx.get(f"{url}/capabilities")
        assert cut.status_code == 503 and cut.json() == resp.json()


def test_capabilities_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    """The one rule: no recommender answering means no lane has an answer (1); a bad URL is bad input (2)."""
    url = f"http://127.0.0.1:{free_port()}"
    assert capabilities_cli.main(argparse.Namespace(url=url, timeout=1.0)) == 1
    err = capsys.readouterr().err
    assert "cannot reach" in err and "satbench serve" in err and len(err.strip().splitlines()) == 1
    assert capabilities_cli.main(argparse.Namespace(url="127.0.0.1:9108", timeout=1.0)) == 2
    assert "--url" in capsys.readouterr().err


def test_capability_fragment_without_an_answer() -> None:
    doc = {"schema": "satbench.recommendations/v1", "generated_at": "2026-11-29T10:19:40Z", "run_id": "r",
           "source": {"kind": "records"}, "policy": {}, "lanes": {
               "moe": {"status": "insufficient_data", "reason": "1 step window(s)", "recommended_concurrency": None,
                       "saturation_concurrency": None, "binding_constraint": None,
                       "throughput_at_recommended_tok_s": None, "fairness": {"ok": True, "jain_min": None},
                       "starvation": {"ok": True, "decode_stall_max_ratio": None, "prefill_wait_max_s": None},
                       "run_id": "r", "measured_at": None, "steps": []}}}
    lane = capabilities.capability_fragment(doc)["lanes"]["moe"]
    assert lane["max_useful_concurrency"] is None and lane["status"] == "insufficient_data"
    assert lane["reason"] and lane["run_id"] == "r"
