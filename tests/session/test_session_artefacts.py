"""After the shared real session: the run's report renders in headless Chromium. (Every Grafana panel query
is replayed against the same session's storage in tests/grafana/test_panel_data.py, relay row included.)"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from testkit.session import SharedSession
from tests.report.screenshot import HEIGHT, WIDTH, non_white_fraction, screenshot

pytestmark = [
    pytest.mark.skipif(shutil.which("prometheus") is None,
                       reason="Prometheus is not installed (apt-get install prometheus)"),
    pytest.mark.slow,
    pytest.mark.timeout(300),  # the first test to ask for the shared session waits for it
]


@pytest.mark.skipif(
    shutil.which("chromium") is None, reason="chromium is not installed (apt-get install chromium)"
)
def test_session_report_renders(shared_session: SharedSession, tmp_path: Path) -> None:
    run_dir = shared_session.run.run_dir
    png = screenshot(run_dir / "report.html", tmp_path)
    assert png.exists()
    size, ink = non_white_fraction(png)
    assert size == (WIDTH, HEIGHT) and ink > 0.03
    shutil.copy(png, shared_session.run.out_dir / "session-report.png")
