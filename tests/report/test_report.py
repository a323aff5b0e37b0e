"""The report is rebuilt from a run folder's raw files alone, is self-contained and renders in a browser."""

from __future__ import annotations

import argparse
import re
import shutil
from pathlib import Path

import pytest

from core.figures import StepFigures
from satbench.report import cli as report_cli
from satbench.report.data import LaneReport, load_run, merge_steps, parse_steps_document, verdict_label
from satbench.report.render import format_recommendation, lane_table, render_html, text_table, write_report
from tests.report.screenshot import CHROMIUM, HEIGHT, WIDTH, non_white_fraction, screenshot
from tests.report.synthetic import LADDER, make_run_dir


def test_load_run_merges_client_and_server_figures(tmp_path: Path) -> None:
    report = load_run(make_run_dir(tmp_path))
    assert [lane.lane for lane in report.lanes] == ["dense", "moe"]
    dense = report.lanes[0]
    assert [s.concurrency for s in dense.steps] == list(LADDER)
    assert dense.recommended == 4 and dense.saturation == 8
    top = dense.steps[-1]
    # the document's figure is shown (one source with the answer); the records' 380 tok/s is named as differing
    assert top.throughput_tok_s == pytest.approx(1.0)
    assert top.occupancy_ratio == 1.0 and top.queue_depth_avg == 4.0  # server-only figures are there
    assert top.memory_bytes.host_rss_max == pytest.approx(1.208e9)
    assert report.records_count == 2 * sum(LADDER)
    assert report.problems and all("differ from the records'" in p for p in report.problems)
    assert any(p.startswith(f"lane dense c={LADDER[-1]}:") and "throughput_tok_s" in p for p in report.problems)


@pytest.mark.parametrize("shape", ["list", "steps", "lanes"])
def test_steps_document_shapes(shape: str) -> None:
    step = {"concurrency": 2, "window_s": 5.0, "requests": 3, "throughput_tok_s": 10.0}
    doc: object = {
        "list": [{"lane": "a", **step}],
        "steps": {"steps": [{"lane": "a", **step}]},
        "lanes": {"lanes": {"a": [step]}},
    }[shape]
    (fig,) = parse_steps_document(doc)
    assert (fig.lane, fig.concurrency, fig.throughput_tok_s) == ("a", 2, 10.0)


def test_steps_document_rejects_garbage() -> None:
    with pytest.raises(ValueError, match=r"steps\.json"):
        parse_steps_document("nope")


def test_merge_steps_prefers_primary() -> None:
    a = StepFigures(
        lane="x", concurrency=1, window_s=1, requests=1, errors=0, throughput_tok_s=5, requests_per_s=1
    )
    b = StepFigures(
        lane="x",
        concurrency=1,
        window_s=1,
        requests=9,
        errors=0,
        throughput_tok_s=7,
        requests_per_s=2,
        occupancy_ratio=0.5,
        jain=0.9,
    )
    merged = merge_steps(a, b)
    assert (merged.throughput_tok_s, merged.occupancy_ratio, merged.jain, merged.requests) == (5, 0.5, 0.9, 1)


@pytest.mark.parametrize(
    ("checks", "label"),
    [
        (None, "unknown"),
        ({"decode_starvation": "not_applicable", "fairness": "ok"}, "ok"),
        ({"decode_starvation": "flagged", "fairness": "flagged", "interference": "warn"},
         "decode starved, unfair, (prefill interference)"),
        ({"decode_starvation": "insufficient_data", "fairness": "ok"}, "insufficient data"),
        ({"decode_starvation": "unknown"}, "unknown"),
    ],
)
def test_verdict_label(checks: dict[str, str] | None, label: str) -> None:
    assert verdict_label(checks) == label


def test_tables_and_recommendation_lines(tmp_path: Path) -> None:
    report = load_run(make_run_dir(tmp_path))
    headers, rows = lane_table(report.lanes[0])
    assert len(rows) == len(LADDER) and len(rows[0]) == len(headers)
    assert rows[-1][headers.index("verdicts")] == "decode starved"  # pause p99 400 ms > 250 ms
    assert rows[-1][headers.index("pause p99")] == "400 ms"
    assert "recommended concurrency 4" in format_recommendation(report.lanes[0])
    assert "no recommendation (runtime down)" in format_recommendation(
        LaneReport(lane="z", steps=(), status="degraded", reason="runtime down")
    )
    table = text_table(headers, rows)
    assert table.count("\n") == len(rows) + 1


def test_html_is_self_contained(tmp_path: Path) -> None:
    html_text = render_html(load_run(make_run_dir(tmp_path)))
    assert html_text.count("<svg") == 2
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html_text)
    assert "<script" not in html_text
    assert "recommended c=4" in html_text and "saturation c=8" in html_text


def test_readme_lists_results_and_limitations(tmp_path: Path) -> None:
    run_dir = make_run_dir(tmp_path)
    write_report(run_dir)
    text = (run_dir / "README.md").read_text()
    for needle in (
        "## Recommendations",
        "## Results: lane dense",
        "## Limitations",
        "Simulator lanes",
        "moe c=8 (too few requests)",
        "| 4 | yes |",
    ):
        assert needle in text


def test_report_without_steps_json_still_renders(tmp_path: Path) -> None:
    run_dir = make_run_dir(tmp_path, with_steps=False)
    report = load_run(run_dir)
    assert any("steps.json is missing" in p for p in report.problems)
    assert report.lanes[0].steps[0].throughput_tok_s > 0  # recomputed from records.jsonl
    write_report(run_dir)
    assert "steps.json is missing" in (run_dir / "README.md").read_text()


def test_cli_rebuilds_and_reports_bad_folders(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = make_run_dir(tmp_path)
    assert report_cli.main(argparse.Namespace(run_dir=run_dir)) == 0
    assert (run_dir / "report.html").stat().st_size > 10_000
    assert report_cli.main(argparse.Namespace(run_dir=tmp_path / "nope")) == 2
    empty = tmp_path / "empty"
    empty.mkdir()
    assert report_cli.main(argparse.Namespace(run_dir=empty)) == 1
    assert "manifest.json is missing" in capsys.readouterr().err


@pytest.mark.skipif(
    shutil.which("chromium") is None and not Path(CHROMIUM).exists(),
    reason="chromium is not installed (apt-get install chromium)",
)
def test_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    run_dir = make_run_dir(tmp_path / "runs")
    html_path, _ = write_report(run_dir)
    png = screenshot(html_path, tmp_path)
    assert png.exists(), "chromium wrote no screenshot"
    size, ink = non_white_fraction(png)
    assert size == (WIDTH, HEIGHT)
    assert ink > 0.03, f"screenshot is nearly blank ({ink:.1%} non-white pixels)"
