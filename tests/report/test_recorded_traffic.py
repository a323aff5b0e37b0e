"""The report's Recorded traffic section (``satbench.report.traces``) from a run folder of
``tests.recommender.trace_scenario``: 1x, 2x, 4x and 8x of a 2 requests/s window at 100 %, 99 %, 95 % and 50 %
attainment, whose answer the scenario puts at 4.444x. The section says it in one sentence naming the file and
the window, draws attainment against the factor, lists each rung by factor and the evidence; the trace rungs
are not open-loop rate rungs; a run that replayed no trace has no such section.
"""

from __future__ import annotations

import json
from pathlib import Path

from satbench.answer.document import read_document
from satbench.answer.policy import Policy
from satbench.recommender.run_analysis import document_from_figures
from satbench.report.data import load_run
from satbench.report.render import render_html, render_markdown
from tests.recommender.trace_scenario import EVIDENCE, scenario


def _run_dir(root: Path, *, traced: bool) -> Path:
    manifest, figures = scenario(traced=traced)
    run_dir = root / manifest.run_id
    run_dir.mkdir()
    manifest.write(run_dir / "manifest.json")
    (run_dir / "steps.json").write_text(json.dumps({"steps": [f.to_dict() for f in figures["dense"]]}))
    doc = document_from_figures(manifest, figures, policy=Policy(), source={"kind": "records", "run_dir": "r"},
                                generated_at=0.0)
    read_document(json.loads(json.dumps(doc)))
    (run_dir / "recommendations.json").write_text(json.dumps(doc))
    return run_dir


def test_the_report_says_how_much_of_the_recorded_traffic_the_node_takes(tmp_path: Path) -> None:
    report = load_run(_run_dir(tmp_path, traced=True))
    (lane,) = report.lanes
    assert lane.rate_steps == () and len(lane.trace_steps) == 4
    markdown, html = render_markdown(report), render_html(report)
    sentence = ("this node takes 4.44 x the recorded traffic of mooncake_sample.jsonl (window 0-20 s, 40 requests, "
                "recorded at 2 requests/s)")
    for text in (markdown, html):
        assert "Recorded traffic" in text and sentence in text
        assert "Open-loop rates" not in text
        assert EVIDENCE["sha256"] in text and "12345 bytes" in text and "58.0%" in text
    section = markdown.split("### Recorded traffic")[1].split("\n## ")[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")][1:]  # past the header
    assert [row.split("|")[1].strip() for row in rows] == ["1x", "2x", "4x", "8x"]
    assert "fail" in rows[-1] and all("pass" in row for row in rows[:-1])
    assert "4.44 x the recorded traffic of mooncake_sample.jsonl (undecided)" in markdown  # the answer box
    assert "speed factor (x the recorded traffic)" in html and "answer 4.44x the recorded traffic" in html


def test_a_run_without_a_trace_has_no_recorded_traffic_section(tmp_path: Path) -> None:
    report = load_run(_run_dir(tmp_path, traced=False))
    assert report.lanes[0].trace is None and report.lanes[0].trace_steps == ()
    assert "Recorded traffic" not in render_markdown(report) and "Recorded traffic" not in render_html(report)
