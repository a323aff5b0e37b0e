"""After the short real session: every Grafana panel query finds data in the run's Prometheus storage, and
the run's report renders in headless Chromium."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import httpx
import pytest

from satbench.dashboards.overview import DASHBOARDS, panel_queries
from satbench.session.processes import ProcessSet
from satbench.session.prometheus import find_prometheus, render_prometheus_config, start_prometheus
from testkit.net import free_port
from tests.report.screenshot import HEIGHT, WIDTH, non_white_fraction, screenshot
from tests.session.conftest import SessionRun

pytestmark = pytest.mark.skipif(
    shutil.which("prometheus") is None, reason="Prometheus is not installed (apt-get install prometheus)"
)


def _has_data(result: list[dict]) -> bool:
    return any(v[1] not in ("NaN", "+Inf", "-Inf") for series in result for v in series.get("values", []))


def test_every_panel_query_finds_data(short_session: SessionRun, tmp_path: Path) -> None:
    assert short_session.returncode == 0, short_session.stderr[-2000:]
    (run_dir,) = short_session.run_dirs
    manifest = json.loads((run_dir / "manifest.json").read_text())
    start, end = manifest["steps"][0]["start"] - 5, manifest["finished_at"] + 5
    folder = tmp_path / "prom"
    shutil.copytree(run_dir / "prometheus", folder)
    config = render_prometheus_config([], [], 1.0)  # no targets, no rules: read the stored samples only
    processes = ProcessSet(tmp_path / "logs")
    try:
        prom = start_prometheus(
            processes, find_prometheus("prometheus"), folder, config, port=free_port(), timeout_s=30
        )
        found: dict[str, bool] = {}  # panel -> any of its queries found data (a short ladder may lack one)
        with httpx.Client(timeout=10) as client:
            for name, build in DASHBOARDS.items():
                for title, expr in panel_queries(build()):
                    query = expr.replace("$__rate_interval", "5s").replace("$lane", ".*")
                    resp = client.get(
                        f"{prom.url}/api/v1/query_range",
                        params={"query": query, "start": start, "end": end, "step": "1s"},
                    )
                    assert resp.status_code == 200, f"{name} {title}: {resp.text[:300]}"
                    found[title] = found.get(title, False) or _has_data(resp.json()["data"]["result"])
    finally:
        processes.stop_all()
    recs = json.loads((run_dir / "recommendations.json").read_text())
    answered = any(lane.get("recommended_concurrency") is not None for lane in recs["lanes"].values())
    empty = [title for title, ok in found.items() if not ok]
    expected_empty = [] if answered else ["Recommended and saturation concurrency"]
    assert len(found) >= 15 and empty == expected_empty, f"panels without data: {empty}"


@pytest.mark.skipif(
    shutil.which("chromium") is None, reason="chromium is not installed (apt-get install chromium)"
)
def test_session_report_renders(short_session: SessionRun, tmp_path: Path) -> None:
    (run_dir,) = short_session.run_dirs
    png = screenshot(run_dir / "report.html", tmp_path)
    assert png.exists()
    size, ink = non_white_fraction(png)
    assert size == (WIDTH, HEIGHT) and ink > 0.03
    shutil.copy(png, short_session.out_dir / "session-report.png")
