"""The report is rebuilt from a run folder's raw files alone, answers first, is self-contained and
deterministic, exports flat CSV tables, and its first screen shows every lane's answer in headless Chromium."""

from __future__ import annotations

import argparse
import csv
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from satbench.core.figures import StepFigures
from satbench.core.records import read_records
from satbench.report import cli as report_cli
from satbench.report.data import LaneReport, load_run, merge_steps, parse_steps_document
from satbench.report.exports import RECORDS_COLUMNS, STEPS_COLUMNS
from satbench.report.judgments import verdict_label
from satbench.report.plots import lane_figure_svg
from satbench.report.render import (
    answer_state,
    console_summary,
    format_recommendation,
    lane_table,
    latency_table,
    policy_rows,
    render_html,
    render_markdown,
    text_table,
    write_report,
)
from tests.report.screenshot import CHROMIUM, HEIGHT, WIDTH, first_screen_layout, non_white_fraction, screenshot
from tests.report.synthetic import LADDER, make_run_dir

UNSATURATED = {
    "status": "unsaturated",
    "recommended_concurrency": 8,
    "saturation_concurrency": None,
    "binding_constraint": "ladder_top",
    "knee": None,
    "reason": "saturation not reached within the ladder: throughput still grows at the top rung c=8",
    "notes": ["saturation not reached within the ladder: throughput still grows at the top rung c=8"],
}
NO_ANSWER = {
    "status": "insufficient_data",
    "recommended_concurrency": None,
    "saturation_concurrency": None,
    "binding_constraint": None,
    "throughput_at_recommended_tok_s": None,
    "knee": None,
    "reason": "lowest rung c=1 cannot be used: step marked invalid: too few requests",
    "notes": [],
}


def _ttft_bound_moe() -> dict[str, Any]:
    """moe stops below c=8 for its TTFT p95 (a violation the document names with its figure and bound)."""
    from tests.report.synthetic import _server_step

    steps = [_server_step("moe", c) for c in LADDER]
    steps[-1]["violations"] = [{"constraint": "slo_ttft", "measured": 2.3, "limit": 2.0,
                                "detail": "TTFT p95 (s) 2.3 > 2"}]
    return {"binding_constraint": "slo_ttft", "saturation_concurrency": None, "steps": steps, "notes": []}


def test_load_run_merges_client_and_server_figures(tmp_path: Path) -> None:
    report = load_run(make_run_dir(tmp_path))
    assert [lane.lane for lane in report.lanes] == ["dense", "moe"]
    dense = report.lanes[0]
    assert [s.concurrency for s in dense.steps] == list(LADDER)
    assert dense.recommended == 4 and dense.saturation == 8
    assert dense.knee == 4 and dense.slots == 4  # the document's knee, the manifest's /props total_slots
    top = dense.steps[-1]
    # the document's figure is shown (one source with the answer); the records' 380 tok/s is named as differing
    assert top.throughput_tok_s == pytest.approx(1.0)
    assert top.occupancy_ratio == 1.0 and top.queue_depth_avg == 4.0  # server-only figures are there
    assert top.memory_bytes.host_rss_max == pytest.approx(1.208e9)
    assert report.records_count == 2 * sum(LADDER)
    assert report.problems and all("differ from the records'" in p for p in report.problems)
    assert any(p.startswith(f"lane dense c={LADDER[-1]}:") and "throughput_tok_s" in p for p in report.problems)
    # the binding constraint's evidence: the gain per doubling at c=8 against the policy's gain
    assert dense.binding is not None
    assert (dense.binding.name, dense.binding.concurrency) == ("throughput_plateau", 8)
    assert (dense.binding.measured, dense.binding.limit) == (pytest.approx(0.02), pytest.approx(0.10))


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


def test_rungs_table_has_one_unit_per_column(tmp_path: Path) -> None:
    report = load_run(make_run_dir(tmp_path))
    dense, moe = report.lanes
    headers, rows = lane_table(dense)
    assert len(rows) == len(LADDER) and all(len(r) == len(headers) for r in rows)
    for name in ("output tok/s", "input tok/s", "total tok/s", "output tok/s 95% CI", "req/s", "queue p95 ms",
                 "host RSS GiB", "Jain", "pause p99 ms", "verdicts"):
        assert name in headers, name
    col = {h: [r[i] for r in rows] for i, h in enumerate(headers)}
    assert col["verdicts"][-1] == "decode starved"  # a fifth of the requests held 390 ms > 250 ms
    assert col["pause p99 ms"] == ["50.0", "100.0", "200.0", "400.0"]  # one column, one unit, one format
    assert col["host RSS GiB"] == ["1.12", "1.12", "1.12", "1.13"]  # 1.2 GB: GiB, the column's largest value
    assert col["input tok/s"][0] == "200.0"  # from steps.json: the document lacks it
    assert float(col["total tok/s"][0]) == float(col["input tok/s"][0]) + float(col["output tok/s"][0])
    assert col["GPU mem GiB"] == ["-"] * len(LADDER)
    for h, cells in col.items():
        if h not in ("valid", "verdicts", "output tok/s 95% CI"):
            assert all(c == "-" or re.fullmatch(r"-?\d+(\.\d+)?", c) for c in cells), (h, cells)
    # an invalid rung shows its reason, not a bare "no"
    _, moe_rows = lane_table(moe)
    assert moe_rows[-1][1] == "no: too few requests"


def test_cache_and_spec_columns_appear_only_where_a_rung_measured_them(tmp_path: Path) -> None:
    import dataclasses

    dense = load_run(make_run_dir(tmp_path)).lanes[0]
    headers, _ = lane_table(dense)
    assert "cache hit share" not in headers and "spec acceptance" not in headers
    steps = tuple(dataclasses.replace(s, cache_hit_share=0.5 if s.concurrency == 2 else None) for s in dense.steps)
    headers, rows = lane_table(dataclasses.replace(dense, steps=steps))
    col = {h: [r[i] for r in rows] for i, h in enumerate(headers)}
    assert col["cache hit share"] == ["-", "0.50", "-", "-"] and "spec acceptance" not in headers
    assert headers[-1] == "verdicts"


def test_latency_table_is_in_ms(tmp_path: Path) -> None:
    dense = load_run(make_run_dir(tmp_path)).lanes[0]
    headers, rows = latency_table(dense)
    assert headers[0] == "c" and len(headers) == 1 + 16
    assert headers[1:5] == ("TTFT mean ms", "TTFT p50 ms", "TTFT p95 ms", "TTFT p99 ms")
    assert {h.split(" ")[0] for h in headers[1:]} == {"TTFT", "ITL", "TPOT", "e2e"}
    assert all(h.endswith(" ms") for h in headers[1:])
    top = dict(zip(headers, rows[-1], strict=True))
    assert top["TTFT p95 ms"] == "240.0" and top["e2e p99 ms"] == "3200" and top["ITL p50 ms"] == "10.0"
    assert top["TPOT mean ms"] == "10.2"
    text = text_table(headers, rows)
    assert "TTFT ms" in text and "e2e ms" in text  # one group header over mean/p50/p95/p99
    assert text.count("\n") == len(rows) + 2  # group line, stat line, rule, rows


def test_recommendation_lines_say_what_binds(tmp_path: Path) -> None:
    report = load_run(make_run_dir(tmp_path, answers={"moe": _ttft_bound_moe()}))
    dense, moe = report.lanes
    line = format_recommendation(dense)
    assert line.startswith("dense: recommended concurrency 4; saturation at 8; bound by throughput_plateau: ")
    assert "c=8 gained +2.0% per doubling over c=4" in line and "10%" in line and line.endswith("[ok]")
    assert "bound by slo_ttft: TTFT p95 2300 ms at c=8, bound 2000 ms (policy.slo.ttft_p95_s)" in (
        format_recommendation(moe))
    assert "no recommendation (runtime down)" in format_recommendation(
        LaneReport(lane="z", steps=(), status="degraded", reason="runtime down")
    )
    headers, rows = lane_table(dense)
    assert text_table(headers, rows).count("\n") >= len(rows) + 1


@pytest.mark.slow
def test_open_and_missing_answers_do_not_look_settled(tmp_path: Path) -> None:
    run_dir = make_run_dir(tmp_path, answers={"dense": UNSATURATED, "moe": NO_ANSWER})
    report = load_run(run_dir)
    dense = report.lanes[0]
    assert [answer_state(lane) for lane in report.lanes] == ["open", "none"]
    line = format_recommendation(dense)
    assert line.startswith("dense: at least concurrency 8 (saturation not reached within the ladder)")
    assert "lower bound" in line and "extend the ladder" in line and "bound by ladder_top" not in line
    assert "c=8 still gained +2.0% per doubling" in line
    page = render_html(report)
    blocks = re.findall(r'<section class="answer (\w+)" data-answer="(\w+)"', page)
    assert blocks == [("open", "dense"), ("none", "moe")]
    assert "settled" not in re.sub(r"<style>.*?</style>", "", page, flags=re.S)
    assert "saturation not reached, extend the ladder" in page
    readme = render_markdown(report)
    assert "### dense: at least concurrency 8 (open: lower bound)" in readme
    assert "### moe: no recommendation (no answer: insufficient data)" in readme
    settled = render_html(load_run(make_run_dir(tmp_path / "ok")))
    assert re.findall(r'<section class="answer (\w+)"', settled) == ["settled", "settled"]


def test_console_summary_ends_with_the_answers(tmp_path: Path) -> None:
    report = load_run(make_run_dir(tmp_path))
    text = console_summary(report)
    lines = text.splitlines()
    assert lines[0] == "lane dense" and "lane moe" in lines
    assert "verdicts" in text and "pause p99" in text and "Jain" in text and "TTFT ms" in text
    head, answers = text.split("\nrecommendations:\n")
    assert "lane dense" in head and "lane moe, latency (ms)" in head and "policy: " in head
    answer_lines = answers.splitlines()
    assert answer_lines[0] == f"  {format_recommendation(report.lanes[0])}"
    assert answer_lines[1].startswith("    slots: 4") and "knee: c=4" in answer_lines[1]
    assert answer_lines[2] == f"  {format_recommendation(report.lanes[1])}"
    assert len(answer_lines) == 4  # nothing after the answers


@pytest.mark.slow
def test_html_is_self_contained_and_answers_first(tmp_path: Path) -> None:
    html_text = render_html(load_run(make_run_dir(tmp_path)))
    assert html_text.count("<svg") == 2
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html_text)
    assert "<script" not in html_text
    assert "recommended c=4" in html_text and "saturation c=8" in html_text
    marks = ('data-answer="dense"', 'data-answer="moe"', "<h2>Policy</h2>", "<h2>Run</h2>", "<h2>Lane dense</h2>",
             "<svg", "<h3>Rungs</h3>", "<h3>Latency (ms)</h3>", "<h2>Limitations</h2>")
    order = [html_text.index(mark) for mark in marks]
    assert order == sorted(order)
    assert "binding constraint" in html_text and "4 (the runtime&#x27;s total_slots)" in html_text


def test_the_policy_the_verdicts_used_is_stated(tmp_path: Path) -> None:
    report = load_run(make_run_dir(tmp_path))
    rows = {name: value for name, value, _ in policy_rows(report)}
    assert rows["slo.tbt_p99_s"] == "250 ms" and rows["slo.ttft_p95_s"] == "2000 ms"
    assert rows["jain_min"] == "not set" and rows["min_gain_per_doubling"] == "0.1"
    assert report.policy_source == "recommendations.json"
    bare = load_run(make_run_dir(tmp_path / "bare", with_recommendations=False))
    assert bare.policy_source != "recommendations.json" and bare.rules.slo.tbt_p99_s == 0.25
    assert all(lane.recommended is None for lane in bare.lanes)
    assert bare.lanes[0].checks[8]["decode_starvation"] == "flagged"  # judged under the same policy


@pytest.mark.slow
def test_plots_draw_each_threshold_on_its_own_axis(tmp_path: Path) -> None:
    report = load_run(make_run_dir(tmp_path, policy={"slo": {"tbt_p99_s": 0.25}, "jain_min": 0.9}))
    svg = lane_figure_svg(report.lanes[0], report.rules)
    assert "Decode pauses" in svg and "stall limit 250 ms" in svg
    assert "Jain limit 0.9 (jain_min)" in svg and "ratio limit 1.5x (right)" in svg
    assert "Latency" in svg and "TTFT p95 objective 2000 ms" in svg
    assert svg == lane_figure_svg(report.lanes[0], report.rules)  # same run, same bytes


@pytest.mark.slow
def test_readme_lists_results_and_limitations(tmp_path: Path) -> None:
    run_dir = make_run_dir(tmp_path)
    write_report(run_dir)
    text = (run_dir / "README.md").read_text()
    for needle in (
        "## Recommendations",
        "### dense: recommended concurrency 4 (settled)",
        "## Policy",
        "## Results: lane dense",
        "### Latency (ms)",
        "## Limitations",
        "Simulator lanes",
        "moe c=8 (too few requests)",
        "| 4 | yes |",
    ):
        assert needle in text
    assert text.index("## Recommendations") < text.index("## Policy") < text.index("## Results: lane dense")
    for lane in load_run(run_dir).lanes:
        assert format_recommendation(lane) in text


@pytest.mark.slow
def test_report_without_steps_json_still_renders(tmp_path: Path) -> None:
    run_dir = make_run_dir(tmp_path, with_steps=False)
    report = load_run(run_dir)
    assert any("steps.json is missing" in p for p in report.problems)
    assert report.lanes[0].steps[0].throughput_tok_s > 0  # recomputed from records.jsonl
    write_report(run_dir)
    assert "steps.json is missing" in (run_dir / "README.md").read_text()


def _read_csv(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        return list(reader.fieldnames or []), list(reader)


@pytest.mark.slow
def test_csv_exports_read_back(tmp_path: Path) -> None:
    run_dir = make_run_dir(tmp_path)
    written = write_report(run_dir)
    assert [p.name for p in written] == ["report.html", "README.md", "steps.csv", "records.csv"]
    columns, steps = _read_csv(run_dir / "steps.csv")
    assert columns == list(STEPS_COLUMNS) and len(set(columns)) == len(columns)
    assert [(r["lane"], int(r["concurrency"])) for r in steps] == [(lane, c) for lane in ("dense", "moe")
                                                                   for c in LADDER]
    report = load_run(run_dir)
    for lane in report.lanes:
        for step in lane.steps:
            row = next(r for r in steps if r["lane"] == lane.lane and int(r["concurrency"]) == step.concurrency)
            assert float(row["output_tok_s"]) == pytest.approx(step.throughput_tok_s)
            assert float(row["ttft_ms_p95"]) == pytest.approx(step.ttft_s.p95 * 1000)  # type: ignore[operator]
            assert float(row["e2e_ms_mean"]) == pytest.approx(step.latency_s.mean * 1000)  # type: ignore[operator]
            assert float(row["pause_ms_p99"]) == pytest.approx(step.pause_s.p99 * 1000)  # type: ignore[operator]
            assert float(row["host_rss_max_bytes"]) == pytest.approx(step.memory_bytes.host_rss_max)
            assert row["slots"] == "4" and row["lane_status"] == "ok"
            assert row["recommended"] == ("true" if step.concurrency == 4 else "false")
    dense8 = steps[3]
    assert dense8["decode_starvation_status"] == "flagged" and dense8["verdicts"] == "decode starved"
    assert float(dense8["decode_starvation_measured"]) == pytest.approx(0.39)  # the pause excess p99
    assert dense8["gain_per_doubling"] == "0.02" and dense8["violations"] == "decode_starvation"
    moe8 = steps[-1]
    assert (moe8["valid"], moe8["reason"]) == ("false", "too few requests")
    assert dense8["gpu_mem_max_bytes"] == "" and dense8["errors_timeout"] == "0"
    columns, records = _read_csv(run_dir / "records.csv")
    assert columns == list(RECORDS_COLUMNS)
    originals = list(read_records(run_dir / "records.jsonl"))
    assert len(records) == len(originals) == report.records_count
    first = records[0]
    assert first["request_id"] == originals[0].request_id and first["outcome"] == "ok"
    assert (first["itl_count"], float(first["itl_mean_ms"]), float(first["itl_max_ms"])) == ("31", 10.0, 10.0)
    assert float(first["ttft_ms"]) == pytest.approx(20.0) and float(first["e2e_ms"]) == pytest.approx(300.0)
    assert float(first["sent_at_unix_s"]) == originals[0].sent_at


@pytest.mark.slow
def test_same_run_gives_the_same_bytes(tmp_path: Path) -> None:
    run_dir = make_run_dir(tmp_path)
    first = {p.name: p.read_bytes() for p in write_report(run_dir)}
    copy = tmp_path / "copy" / run_dir.name
    shutil.copytree(run_dir, copy)
    second = {p.name: p.read_bytes() for p in write_report(copy)}
    assert first == second


@pytest.mark.slow
def test_cli_rebuilds_and_reports_bad_folders(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = make_run_dir(tmp_path)
    assert report_cli.main(argparse.Namespace(run_dir=run_dir)) == 0
    assert (run_dir / "report.html").stat().st_size > 10_000
    assert (run_dir / "steps.csv").stat().st_size > 0 and (run_dir / "records.csv").stat().st_size > 0
    assert "steps.csv" in capsys.readouterr().out
    assert report_cli.main(argparse.Namespace(run_dir=tmp_path / "nope")) == 2
    empty = tmp_path / "empty"
    empty.mkdir()
    assert report_cli.main(argparse.Namespace(run_dir=empty)) == 1
    assert "manifest.json is missing" in capsys.readouterr().err


def _report_under_test(tmp_path: Path) -> Path:
    """The synthetic run (one lane settled, one a lower bound), or the run folder ``SATBENCH_REPORT_RUN``
    names, copied here and rebuilt with this code."""
    source = os.environ.get("SATBENCH_REPORT_RUN")
    if not source:
        return make_run_dir(tmp_path / "runs", answers={"moe": UNSATURATED})
    run_dir = tmp_path / "runs" / Path(source).name
    run_dir.mkdir(parents=True)
    for name in ("manifest.json", "steps.json", "recommendations.json", "records.jsonl"):
        if (Path(source) / name).exists():
            shutil.copy(Path(source) / name, run_dir / name)
    return run_dir


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("chromium") is None and not Path(CHROMIUM).exists(),
    reason="chromium is not installed (apt-get install chromium)",
)
def test_first_screen_shows_every_answer(tmp_path: Path) -> None:
    """In a 1280x800 viewport, every lane's answer block (headline and binding constraint) lies on the
    first screen, as Chromium lays it out; the screenshot of that screen is not blank. With
    ``SATBENCH_REPORT_PICTURE=PATH`` the PNG is kept there (docs/images/report-first-screen.png)."""
    run_dir = _report_under_test(tmp_path)
    html_path = write_report(run_dir)[0]
    report = load_run(run_dir)
    layout = first_screen_layout(html_path, tmp_path)
    assert layout["viewport"] == {"width": WIDTH, "height": HEIGHT}
    answers = {a["lane"]: a for a in layout["answers"]}
    assert list(answers) == [lane.lane for lane in report.lanes]
    for lane in report.lanes:
        block = answers[lane.lane]
        assert block["state"] == answer_state(lane)
        for part in (block["headline"], block["binding"]):
            assert part is not None and part["top"] >= 0 and part["bottom"] <= HEIGHT, (lane.lane, part)
        first = "no recommendation" if lane.recommended is None else (
            f"at least concurrency {lane.recommended}" if lane.status == "unsaturated"
            else f"recommended concurrency {lane.recommended}")
        assert first in block["headline"]["text"]
        assert (lane.binding_constraint or "none") in block["binding"]["text"]
    png = screenshot(html_path, tmp_path)
    assert png.exists(), "chromium wrote no screenshot"
    size, ink = non_white_fraction(png)
    assert size == (WIDTH, HEIGHT)
    assert ink > 0.03, f"screenshot is nearly blank ({ink:.1%} non-white pixels)"
    picture = os.environ.get("SATBENCH_REPORT_PICTURE")
    if picture:
        with Image.open(png) as img:
            img.convert("RGB").quantize(colors=128).save(picture, optimize=True)
