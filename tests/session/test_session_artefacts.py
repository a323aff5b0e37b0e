"""After the short real session: the run's report renders in headless Chromium. (Every Grafana panel query
is replayed against a real session's storage in tests/grafana/test_panel_data.py, relay row included.)"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.report.screenshot import HEIGHT, WIDTH, non_white_fraction, screenshot
from tests.session.conftest import SessionRun

pytestmark = pytest.mark.skipif(
    shutil.which("prometheus") is None, reason="Prometheus is not installed (apt-get install prometheus)"
)


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
