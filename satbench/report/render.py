"""The run report: ``report.html`` (self-contained, plots inline), ``README.md``, the CSV exports
(``steps.csv``, ``records.csv``) and the summary ``satbench run`` prints, for one run folder.

All are rebuilt from the raw files alone (manifest.json, steps.json, recommendations.json, records.jsonl)
through ``satbench.report.data.load_run``, so ``satbench report RUN_DIR`` on a copied folder gives the same
report as the session that wrote it, byte for byte. The HTML has no external reference at all (no CDN, no
web font, no script): plots are inline SVG from ``satbench.report.plots``, styles are inline, so it opens
offline.

The report answers first: each lane opens with its answer block (``answer_state``: a settled answer, an
open one such as a lower bound below saturation, or none; the binding constraint with its measured figure
and its bound, the slots, the knee, whether saturation was reached), then the policy the verdicts used and
the workload, then per lane the plots and the tables, then the limitations. The answer lines come last in
the terminal (``console_summary``), where a person reads them after a run.

The answer block is ``satbench.report.answer``, the policy, workload, run facts and limitations
``satbench.report.context``, the two tables per lane ``satbench.report.tables`` (``lane_table``,
``latency_table``) and the CSV exports ``satbench.report.exports``; this module lays them out.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from satbench.report.answer import (
    answer_facts,
    answer_headline,
    answer_state,
    binding_text,
    extra_notes,
    format_recommendation,
    short_facts,
)
from satbench.report.context import limitations, policy_rows, policy_summary, run_lines, when, workload_lines
from satbench.report.data import LaneReport, RunReport, load_run
from satbench.report.exports import RECORDS_COLUMNS, STEPS_COLUMNS, records_rows, steps_rows, write_csv
from satbench.report.tables import (
    LATENCY_FIGURES,
    lane_gpus,
    lane_table,
    latency_table,
    text_table,
)

__all__ = [
    "LATENCY_FIGURES",
    "answer_facts",
    "answer_state",
    "binding_text",
    "console_summary",
    "format_recommendation",
    "lane_gpus",
    "lane_table",
    "latency_table",
    "limitations",
    "policy_rows",
    "policy_summary",
    "render_html",
    "render_markdown",
    "text_table",
    "workload_lines",
    "write_report",
]

# the latency table's figures: (header name, StepFigures attribute)


# ---- the terminal ----------------------------------------------------------------------------------------

def console_summary(report: RunReport) -> str:
    """What ``satbench run`` prints at its end: per lane the rungs table and the latency table (ms), the
    run folder's problems, the policy in one line, then, last, the answers (``recommendations:``, one
    ``format_recommendation`` line per lane with its slots, knee and saturation on the next line)."""
    out: list[str] = []
    for lane in report.lanes:
        out += [f"lane {lane.lane}", text_table(*lane_table(lane)), "",
                f"lane {lane.lane}, latency (ms)", text_table(*latency_table(lane)), ""]
    if report.problems:
        out += ["problems:", *(f"  {p}" for p in report.problems), ""]
    out += [f"policy: {policy_summary(report)}", "", "recommendations:"]
    for lane in report.lanes:
        out += [f"  {format_recommendation(lane)}", f"    {short_facts(lane)}"]
    if not report.lanes:
        out.append("  none")
    return "\n".join(out)


# ---- Markdown --------------------------------------------------------------------------------------------

def _md_cell(text: str) -> str:
    return text.replace("|", "\\|")


def _md_table(headers: Sequence[str], rows: Sequence[Sequence[str]], align: str = "---:") -> list[str]:
    lines = ["| " + " | ".join(_md_cell(h) for h in headers) + " |", "|" + f"{align}|" * len(headers)]
    return lines + ["| " + " | ".join(_md_cell(c) for c in r) + " |" for r in rows]


def render_markdown(report: RunReport) -> str:
    m = report.manifest
    lines = [f"# satbench run {report.run_id}", "",
             f"Finished {when(m.finished_at)}; {report.records_count or 0} requests recorded. "
             "Plots: `report.html`.", "", "## Recommendations", ""]
    for lane in report.lanes:
        headline, badge = answer_headline(lane)
        lines += [f"### {lane.lane}: {headline} ({badge})", ""]
        lines += [f"- **{label}**: {text}" for label, text in answer_facts(lane)]
        lines += [f"- note: {n}" for n in extra_notes(lane)]
        lines += ["", f"`{format_recommendation(lane)}`", ""]
    if not report.lanes:
        lines += ["No lanes.", ""]
    lines += ["## Policy", "", f"The limits the verdicts used (from {report.policy_source}); times in ms.", ""]
    lines += _md_table(("setting", "value", "meaning"), policy_rows(report), ":---")
    workload = workload_lines(m)
    if workload:
        lines += ["", "## Workload", ""] + [f"- {line}" for line in workload]
    lines += ["", "## Run", ""] + [f"- {k}: {v if k != 'command' else f'`{v}`'}" for k, v in run_lines(report)]
    for lane in report.lanes:
        lines += ["", f"## Results: lane {lane.lane}", ""]
        if lane_gpus(lane):
            lines += [lane_gpus(lane), ""]
        if not lane.steps:
            lines.append("(no steps)")
            continue
        lines += ["### Rungs", "", *_md_table(*lane_table(lane)), "", "### Latency (ms)", "",
                  *_md_table(*latency_table(lane))]
        if lane.rate_steps:
            from satbench.report.rates import co_sentence, rate_facts, rate_table

            lines += ["", "### Open-loop rates", ""]
            lines += [f"- **{k}**: {v}" for k, v in rate_facts(lane.rate)]
            lines += ["", *_md_table(*rate_table(lane.rate_steps, lane.rate))]
            said = co_sentence(lane.steps, lane.recommended, lane.rate_steps,
                                None if lane.rate is None else lane.rate.max_rate_rps)
            if said:
                lines += ["", said]
        if lane.trace_steps or lane.trace is not None:
            from satbench.report.traces import trace_evidence, trace_sentence, trace_table

            lines += ["", "### Recorded traffic", ""]
            if lane.trace is not None:
                lines += [trace_sentence(lane.trace), ""]
                lines += [f"- **{k}**: {v}" for k, v in trace_evidence(lane.trace)]
                lines.append("")
            lines += _md_table(*trace_table(lane.trace_steps, lane.trace, lane.trace_factors))
        if lane.prefill is not None:
            from satbench.report.prefill import prefill_sentence, prefill_table

            lines += ["", "### Peak prefill throughput", "", prefill_sentence(lane.prefill), ""]
            lines += _md_table(*prefill_table(lane.prefill))
        if lane.agents is not None:
            from satbench.report.agents import agents_sentence, agents_stamp, agents_table

            lines += ["", "### Concurrent agents", "", agents_sentence(lane.agents), ""]
            lines += [f"- {x}" for x in agents_stamp(lane.agents)] + [""]
            lines += _md_table(*agents_table(lane.agents))
    lines += ["", "## Limitations", ""] + [f"- {item}" for item in limitations(report)]
    lines += [
        "",
        "Raw data: `manifest.json`, `records.jsonl`, `steps.json`, `recommendations.json`; flat tables: "
        "`steps.csv`, `records.csv`. Rebuild with `satbench report <this folder>`.",
        "",
    ]
    return "\n".join(lines)


# ---- HTML ------------------------------------------------------------------------------------------------

_CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;font-size:14px;margin:20px 24px;color:#222;
 max-width:1240px}
h1{font-size:20px;margin:0 0 2px}h2{font-size:18px;border-bottom:1px solid #ccc;padding-bottom:4px;margin-top:28px}
h3{font-size:15px;margin:14px 0 4px}.sub{color:#555;font-size:13px;margin:0 0 12px}
table{border-collapse:collapse;font-size:12px;margin:6px 0}
td,th{border:1px solid #ddd;padding:3px 7px;text-align:right}th{background:#f3f3f3}
td.l,th.l,.meta td,.policy td{text-align:left}.policy td:nth-child(2){white-space:nowrap}
tr.invalid td{color:#777;background:#fafafa}
.answer{border:1px solid;border-left-width:6px;border-radius:4px;padding:8px 12px;margin:0 0 10px}
.answer h2{border:0;margin:0 0 4px;padding:0;font-size:19px}
.answer .badge{display:inline-block;font-size:12px;font-weight:600;padding:1px 8px;border-radius:10px;
 margin-left:8px;vertical-align:middle;color:#fff}
.answer dl{display:grid;grid-template-columns:150px 1fr;gap:2px 10px;margin:4px 0;font-size:14px}
.answer dt{font-weight:600;color:#444}.answer dd{margin:0}
.answer .line{font-family:ui-monospace,monospace;font-size:11px;color:#555;margin:4px 0 0}
.answer ul{margin:2px 0;font-size:12px;color:#444}
.settled{background:#eef7ee;border-color:#2e7d32}.settled .badge{background:#2e7d32}
.open{background:#fff6e0;border-color:#d48806}.open .badge{background:#b26a00}
.none{background:#f2f2f2;border-color:#8a8a8a}.none .badge{background:#6b6b6b}
svg{max-width:100%;height:auto}
"""


def _esc(text: Any) -> str:
    return html.escape(str(text))


def _html_table(headers: Sequence[str], rows: Sequence[Sequence[str]], cls: str = "",
                titles: Sequence[Sequence[str]] | None = None, row_classes: Sequence[str] | None = None,
                left: Sequence[int] = ()) -> str:
    left_cls = ' class="l"'
    head = "".join(f"<th{left_cls if i in left else ''}>{_esc(h)}</th>" for i, h in enumerate(headers))
    body = []
    for r, row in enumerate(rows):
        cells = []
        for i, cell in enumerate(row):
            title = titles[r][i] if titles else ""
            attrs = (left_cls if i in left else "") + (f' title="{_esc(title)}"' if title else "")
            cells.append(f"<td{attrs}>{_esc(cell)}</td>")
        rc = f' class="{row_classes[r]}"' if row_classes and row_classes[r] else ""
        body.append(f"<tr{rc}>" + "".join(cells) + "</tr>")
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def _answer_html(lane: LaneReport) -> str:
    state = answer_state(lane)
    headline, badge = answer_headline(lane)
    rows = []
    for label, text in answer_facts(lane):
        key = ' data-binding="1"' if label == "binding constraint" else ""
        rows.append(f"<dt>{_esc(label)}</dt><dd{key}>{_esc(text)}</dd>")
    notes = extra_notes(lane)
    return (
        f'<section class="answer {state}" data-answer="{_esc(lane.lane)}" data-state="{state}">'
        f'<h2>{_esc(lane.lane)}: {_esc(headline)} <span class="badge">{_esc(badge)}</span></h2>'
        f'<dl>{"".join(rows)}</dl>'
        + (f"<ul>{''.join(f'<li>{_esc(n)}</li>' for n in notes)}</ul>" if notes else "")
        + f'<p class="line">{_esc(format_recommendation(lane))}</p></section>'
    )


def _verdict_titles(lane: LaneReport, headers: Sequence[str]) -> list[list[str]]:
    """Hover text for the verdicts cells: each check's status and the recommender's words."""
    at = headers.index("verdicts")
    out = []
    for step in lane.steps:
        judged = lane.judgments.get(step.concurrency)
        text = "" if judged is None else "\n".join(
            f"{name}: {f.status}" + (f": {f.detail}" if f.detail else "") for name, f in judged.checks.items())
        out.append(["" if i != at else text for i in range(len(headers))])
    return out


def render_html(report: RunReport) -> str:
    from satbench.report.plots import lane_figure_svg  # matplotlib loads only when a report is drawn

    m = report.manifest
    parts = [
        f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>satbench run "
        f"{_esc(report.run_id)}</title><style>{_CSS}</style></head><body>",
        f"<h1>satbench run {_esc(report.run_id)}</h1>",
        f'<p class="sub">finished {_esc(when(m.finished_at))}; {report.records_count or 0} requests recorded; '
        f"lanes {_esc(', '.join(lane.lane for lane in report.lanes) or 'none')}; policy: "
        f"{_esc(policy_summary(report))}</p>",
    ]
    parts += [_answer_html(lane) for lane in report.lanes] or ["<p>No lanes.</p>"]
    parts.append(f"<h2>Policy</h2><p>The limits the verdicts used (from {_esc(report.policy_source)}); "
                 "times in ms.</p>")
    parts.append(_html_table(("setting", "value", "meaning"), policy_rows(report), "policy", left=(0, 2)))
    workload = workload_lines(m)
    if workload:
        parts.append("<h2>Workload</h2><ul>" + "".join(f"<li>{_esc(x)}</li>" for x in workload) + "</ul>")
    meta = _html_table(("", ""), run_lines(report), "meta")
    parts.append("<h2>Run</h2>" + meta.replace("<thead><tr><th></th><th></th></tr></thead>", ""))
    for lane in report.lanes:
        parts.append(f"<h2>Lane {_esc(lane.lane)}</h2>")
        if lane_gpus(lane):
            parts.append(f"<p>{_esc(lane_gpus(lane))}</p>")
        if not lane.steps:
            parts.append("<p>No steps.</p>")
            continue
        parts.append(lane_figure_svg(lane, report.rules))
        headers, rows = lane_table(lane)
        parts.append("<h3>Rungs</h3>")
        parts.append(_html_table(headers, rows, "rungs", titles=_verdict_titles(lane, headers),
                                 row_classes=["" if s.valid else "invalid" for s in lane.steps],
                                 left=(1, len(headers) - 1)))
        parts.append("<h3>Latency (ms)</h3>")
        parts.append(_html_table(*latency_table(lane), "latency"))
        if lane.rate_steps:
            from satbench.report.rates import co_sentence, rate_facts, rate_figure_svg, rate_table

            parts.append("<h3>Open-loop rates</h3>")
            facts = rate_facts(lane.rate)
            if facts:
                parts.append("<ul>" + "".join(f"<li><b>{_esc(k)}</b>: {_esc(v)}</li>" for k, v in facts) + "</ul>")
            parts.append(rate_figure_svg(lane.lane, lane.rate_steps, lane.rate, report.rules.attainment_target,
                                         report.rules.slo.ttft_p95_s))
            headers, rows = rate_table(lane.rate_steps, lane.rate)
            parts.append(_html_table(headers, rows, "rates", left=(len(headers) - 1,)))
            said = co_sentence(lane.steps, lane.recommended, lane.rate_steps,
                                None if lane.rate is None else lane.rate.max_rate_rps)
            if said:
                parts.append(f"<p>{_esc(said)}</p>")
        if lane.trace_steps or lane.trace is not None:
            parts.append(_trace_html(lane))
        if lane.prefill is not None:
            from satbench.report.prefill import prefill_sentence, prefill_table

            parts.append(f"<h3>Peak prefill throughput</h3><p>{_esc(prefill_sentence(lane.prefill))}</p>")
            headers, rows = prefill_table(lane.prefill)
            parts.append(_html_table(headers, rows, "prefill", left=(len(headers) - 1,)))
        if lane.agents is not None:
            from satbench.report.agents import agents_sentence, agents_stamp, agents_table

            stamp = "".join(f"<li>{_esc(x)}</li>" for x in agents_stamp(lane.agents))
            parts.append(f"<h3>Concurrent agents</h3><p>{_esc(agents_sentence(lane.agents))}</p><ul>{stamp}</ul>")
            headers, rows = agents_table(lane.agents)
            parts.append(_html_table(headers, rows, "agents", left=(len(headers) - 1,)))
    parts.append(
        "<h2>Limitations</h2><ul>"
        + "".join(f"<li>{_esc(x)}</li>" for x in limitations(report))
        + "</ul><p>Raw data: manifest.json, records.jsonl, steps.json, recommendations.json; flat tables: "
          "steps.csv, records.csv.</p></body></html>\n"
    )
    return "\n".join(parts)


def _trace_html(lane: LaneReport) -> str:
    """The lane's "Recorded traffic" section (``satbench.report.traces``)."""
    from satbench.report.traces import trace_evidence, trace_figure_svg, trace_sentence, trace_table

    parts = ['<section class="trace"><h3>Recorded traffic</h3>']
    if lane.trace is not None:
        parts.append(f"<p><b>{_esc(trace_sentence(lane.trace))}</b></p>")
        parts.append(trace_figure_svg(lane.lane, lane.trace))
    headers, rows = trace_table(lane.trace_steps, lane.trace, lane.trace_factors)
    parts.append(_html_table(headers, rows, "traces", left=(len(headers) - 1,)))
    if lane.trace is not None:
        parts.append("<ul>" + "".join(f"<li><b>{_esc(k)}</b>: {_esc(v)}</li>" for k, v in trace_evidence(lane.trace))
                     + "</ul>")
    return "".join(parts) + "</section>"


# ---- files -----------------------------------------------------------------------------------------------

def write_report(run_dir: Path) -> tuple[Path, Path, Path, Path]:
    """Rebuilds ``report.html``, ``README.md``, ``steps.csv`` and ``records.csv`` (an empty table where
    ``records.jsonl`` is missing) in ``run_dir`` from its raw files; returns the four paths."""
    report = load_run(run_dir)
    html_path, md_path = run_dir / "report.html", run_dir / "README.md"
    html_path.write_text(render_html(report), encoding="utf-8")
    md_path.write_text(render_markdown(report), encoding="utf-8")
    steps_csv = write_csv(run_dir / "steps.csv", STEPS_COLUMNS, steps_rows(report))
    records = run_dir / "records.jsonl"
    records_csv = write_csv(run_dir / "records.csv", RECORDS_COLUMNS,
                            records_rows(records) if records.exists() else ())
    return html_path, md_path, steps_csv, records_csv
