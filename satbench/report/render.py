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

The two tables per lane are ``satbench.report.tables`` (``lane_table``, ``latency_table``); the CSV exports
are ``satbench.report.exports``.
"""

from __future__ import annotations

import html
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from core.manifest import RunManifest
from recommender.policy import SLO, Policy
from satbench.report.data import Finding, LaneReport, RunReport, load_run
from satbench.report.exports import RECORDS_COLUMNS, STEPS_COLUMNS, records_rows, steps_rows, write_csv
from satbench.report.plots import lane_figure_svg
from satbench.report.tables import (
    LATENCY_FIGURES,
    NONE,
    bytes_text,
    lane_gpus,
    lane_table,
    latency_table,
    measure,
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


# ---- the answer ------------------------------------------------------------------------------------------

def answer_state(lane: LaneReport) -> str:
    """``settled`` (status ok, with an answer), ``open`` (an answer that is not settled: a lower bound below
    saturation, a stale or degraded one) or ``none`` (no answer)."""
    if lane.recommended is None:
        return "none"
    return "settled" if lane.status == "ok" else "open"


def _previous_rung(lane: LaneReport, c: int) -> int | None:
    below = [s.concurrency for s in lane.steps if s.concurrency < c and s.valid
             and (lane.judgments.get(s.concurrency) is None or lane.judgments[s.concurrency].usable is not False)]
    return max(below, default=None)


def binding_text(lane: LaneReport) -> str:
    """The binding constraint's evidence in words: the rung that showed it, its measured figure and the
    policy's bound (empty where the lane has no binding constraint)."""
    b: Finding | None = lane.binding
    if b is None:
        return ""
    if b.name in ("throughput_plateau", "ladder_top") and b.measured is not None and b.concurrency is not None:
        prev = _previous_rung(lane, b.concurrency)
        over = "" if prev is None else f" over c={prev}"
        interval = "" if b.interval is None else f" (interval {b.interval[0]:+.1%}..{b.interval[1]:+.1%})"
        least = "?" if b.limit is None else f"{b.limit * 100:g}%"
        if b.name == "throughput_plateau":
            return (f"c={b.concurrency} gained {b.measured:+.1%} per doubling{over}{interval}, less than the "
                    f"{least} a doubling must buy ({b.bound})")
        return (f"the top rung c={b.concurrency} still gained {b.measured:+.1%} per doubling{over}; a plateau "
                f"is a gain under {least} ({b.bound})")
    if b.measured is None or b.limit is None or b.concurrency is None or not b.unit:
        return b.detail
    measured, limit = measure(b.measured, b.unit), measure(b.limit, b.unit)
    return f"{b.figure} {measured} at c={b.concurrency}, bound {limit} ({b.bound})"


def format_recommendation(lane: LaneReport) -> str:
    """One line: the lane's answer (its first clause ``recommended concurrency N``, or ``at least concurrency
    N`` for a lower bound), the binding constraint with its figure and bound, or why there is none."""
    if lane.recommended is None:
        why = lane.reason or (f"status {lane.status}" if lane.status else "no answer")
        return f"{lane.lane}: no recommendation ({why})"
    there = ([] if lane.throughput_at_recommended is None
             else [f"{lane.throughput_at_recommended:.1f} tok/s there"])
    evidence = binding_text(lane)
    if lane.status == "unsaturated":  # the top rung, a lower bound: say so first
        parts = [f"{lane.lane}: at least concurrency {lane.recommended} (saturation not reached within the ladder)",
                 *there, "lower bound" + (f": {evidence}" if evidence else "") + "; extend the ladder"]
        return "; ".join(parts) + f" [{lane.status}]"
    parts = [f"{lane.lane}: recommended concurrency {lane.recommended}"]
    if lane.saturation is not None:
        parts.append(f"saturation at {lane.saturation}")
    if lane.binding_constraint:
        parts.append(f"bound by {lane.binding_constraint}" + (f": {evidence}" if evidence else ""))
    parts += there
    text = "; ".join(parts) + f" [{lane.status}]"
    return text + (f" ({lane.reason})" if lane.reason else "")


def _headline(lane: LaneReport) -> tuple[str, str]:
    """The block's headline and its badge."""
    state = answer_state(lane)
    if state == "none":
        return "no recommendation", f"no answer: {lane.status.replace('_', ' ')}"
    if lane.status == "unsaturated":
        return f"at least concurrency {lane.recommended}", "open: lower bound"
    if state == "open":
        return f"recommended concurrency {lane.recommended}", f"open: {lane.status.replace('_', ' ')}"
    return f"recommended concurrency {lane.recommended}", "settled"


def _ladder(lane: LaneReport) -> str:
    return "/".join(str(s.concurrency) for s in lane.steps) or "-"


def answer_facts(lane: LaneReport) -> list[tuple[str, str]]:
    """The answer block's rows, (label, text): why (an open or missing answer), the binding constraint with
    its evidence, saturation, the knee, the slots and the throughput at the answer."""
    facts: list[tuple[str, str]] = []
    if lane.status == "unsaturated":
        facts.append(("lower bound", "saturation not reached, extend the ladder (ladder.extend, or higher rungs "
                                     "in ladder.concurrency)"))
    elif lane.reason:
        facts.append(("why", lane.reason))
    if lane.binding_constraint:
        evidence = binding_text(lane)
        facts.append(("binding constraint", lane.binding_constraint + (f": {evidence}" if evidence else "")))
    elif lane.recommended is None:
        facts.append(("binding constraint", "none: no answer"))
    if lane.saturation is not None:
        facts.append(("saturation", f"reached at c={lane.saturation}"))
    elif lane.status == "unsaturated" or lane.binding_constraint == "ladder_top":
        facts.append(("saturation", f"not reached within the ladder {_ladder(lane)}"))
    else:
        facts.append(("saturation", "not reached" + (f" (the answer stops at {lane.binding_constraint})"
                                                     if lane.binding_constraint else "")))
    facts.append(("knee", "none" if lane.knee is None else f"c={lane.knee}"))
    facts.append(("slots", "unknown" if lane.slots is None else f"{lane.slots} (the runtime's total_slots)"))
    if lane.throughput_at_recommended is not None:
        facts.append(("throughput there", f"{lane.throughput_at_recommended:.1f} output tok/s at c={lane.recommended}"))
    return facts


def _short_facts(lane: LaneReport) -> str:
    """Slots, knee and saturation in one line (the terminal's second line of each answer)."""
    facts = dict(answer_facts(lane))
    return "; ".join(f"{k}: {facts[k]}" for k in ("slots", "knee", "saturation"))


def _extra_notes(lane: LaneReport) -> list[str]:
    """The recommender's notes the block does not already say."""
    said = {lane.reason or "", lane.binding.detail if lane.binding else ""}
    return [n for n in lane.notes if n not in said]


# ---- the policy and the workload -----------------------------------------------------------------------

def _policy_fields() -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for name, info in Policy.model_fields.items():
        if name == "slo":
            out += [(f"slo.{n}", i) for n, i in SLO.model_fields.items()]
        else:
            out.append((name, info))
    return out


def _setting(name: str, value: Any) -> str:
    if value is None:
        return "not set"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if name.endswith("_s"):
        return f"{value * 1000:g} ms"
    return f"{value:g}"


def policy_rows(report: RunReport) -> list[tuple[str, str, str]]:
    """Every setting of the policy the verdicts used, (setting, value, meaning); times in ms."""
    dumped = report.rules.model_dump(mode="json")
    rows = []
    for name, info in _policy_fields():
        head, _, sub = name.partition(".")
        value = dumped[head][sub] if sub else dumped[head]
        rows.append((name, _setting(name, value), str(info.description or "")))
    return rows


def policy_summary(report: RunReport) -> str:
    """The limits that decide an answer, in one line."""
    p = report.rules
    parts = [f"a doubling must gain {p.min_gain_per_doubling:.0%}"]
    for label, value in (("TTFT p95", p.slo.ttft_p95_s), ("ITL p95", p.slo.itl_p95_s),
                         ("e2e p95", p.slo.e2e_p95_s), ("pause p99", p.slo.tbt_p99_s)):
        if value is not None:
            parts.append(f"{label} <= {value * 1000:g} ms")
    parts.append(f"errors <= {p.max_error_ratio:.0%}")
    if p.jain_min is not None:
        parts.append(f"Jain >= {p.jain_min:g}")
    parts.append(f"queued wait <= {p.max_admission_wait_ratio:g}x the FIFO bound")
    parts.append(f"users' wait/pace within {p.max_user_wait_ratio:g}x/{p.max_user_itl_ratio:g}x")
    return ", ".join(parts)


def limitations(report: RunReport) -> list[str]:
    out = []
    runtimes = {str(v.get("runtime", "")) for v in report.manifest.lanes.values() if isinstance(v, dict)}
    if "simulator" in runtimes:
        out.append(
            "Simulator lanes model a llama.cpp batcher; their figures describe the simulator's profile, "
            "not a real GPU. Their GPU memory column is the simulator's model (weights, compute buffers and "
            "KV cache in use: the fullest of its modelled GPUs, and the sum over them where there are several), "
            "marked modelled in its header, never a reading of a device."
        )
    if runtimes - {"simulator"} and not report.manifest.hardware.get("gpu"):
        reason = report.manifest.hardware.get("gpu_reason") or "no GPU evidence"
        out.append(f"No GPU memory figures for the other lanes: {reason}.")
    for name, info in report.manifest.lanes.items():
        if isinstance(info, dict) and info.get("node_reason"):  # an external node seen from elsewhere
            out.append(f"Lane {name} ({info.get('url', '?')}): {info['node_reason']}.")
    invalid = [
        f"{lane.lane} c={s.concurrency} ({s.reason or 'invalid'})"
        for lane in report.lanes
        for s in lane.steps
        if not s.valid
    ]
    if invalid:
        out.append("Steps excluded from the answer: " + "; ".join(invalid) + ".")
    out.append(
        "Closed-loop load: each virtual user sends its next request when the previous one ends, so "
        "arrival rate follows service rate; open-loop arrivals are not measured."
    )
    out.append(
        "Short step windows give wide confidence intervals; compare runs with the same ladder and windows."
    )
    out += [f"Run folder problem: {p}." for p in report.problems]
    return out


def _when(ts: float | None) -> str:
    return NONE if not ts else time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))


def _length_text(dist: Any) -> str:
    """A token-length distribution as written in the config (loadgen's ``LengthDist``), in words."""
    if not isinstance(dist, dict):
        return "?"
    kind = dist.get("kind", "fixed")
    if kind == "fixed":
        return f"{dist.get('value', '?')} (fixed)"
    if kind == "uniform":
        return f"{dist.get('low', '?')}..{dist.get('high', '?')} (uniform)"
    return (f"lognormal, median {dist.get('median', '?')}, sigma {dist.get('sigma', '?')}, "
            f"clipped to {dist.get('low', '?')}..{dist.get('high', '?')}")


def workload_lines(manifest: RunManifest) -> list[str]:
    """What each user sent and how the ladder was walked, from the manifest's config (empty if unknown)."""
    section = manifest.config.get("loadgen")
    loadgen: dict[str, Any] = section if isinstance(section, dict) else manifest.config
    work = loadgen.get("workload")
    if not isinstance(work, dict):
        return []
    ladder_section = loadgen.get("ladder")
    ladder: dict[str, Any] = ladder_section if isinstance(ladder_section, dict) else {}
    share = work.get("prefill_probe_share") or 0
    extend = ladder.get("extend")
    lines = [
        f"prompt tokens: {_length_text(work.get('prompt_tokens'))}",
        f"output tokens: {_length_text(work.get('output_tokens'))}"
        f"{', EOS ignored' if work.get('ignore_eos') else ''}, temperature {work.get('temperature', '?')}",
        f"prefill probes: {share:.0%} of requests with {work.get('prefill_probe_tokens', '?')} prompt tokens"
        if share else "prefill probes: none",
        f"seed {work.get('seed', '?')}; closed-loop users, ladder "
        + "/".join(str(c) for c in ladder.get("concurrency") or [])
        + (f", extended past the top rung while it pays (at most {ladder.get('max_concurrency', '?')})" if extend
           else "")
        + "; "
        f"warm-up {loadgen.get('warmup_s', '?')} s, window {loadgen.get('min_window_s', '?')}.."
        f"{loadgen.get('max_window_s', '?')} s",
    ]
    shared, conversation = work.get("shared_prefix"), work.get("conversation")
    if isinstance(shared, dict):
        lines.insert(3, f"shared prefixes: {shared.get('share', 0):.0%} of requests open with one of "
                        f"{shared.get('prefixes', '?')} common {shared.get('tokens', '?')}-token prefixes")
    if isinstance(conversation, dict):
        lines.insert(-1, f"conversations of {conversation.get('turns', '?')} turns: each request repeats the "
                         "user's previous exchange and adds a message")
    return lines


def _gpu_text(hardware: dict) -> str:
    gpus = hardware.get("gpu")
    if not gpus:
        return f"none ({hardware.get('gpu_reason') or 'not reported'})"
    return ", ".join(
        f"{g.get('name')} ({bytes_text(g.get('memory_total_bytes'))}, driver {g.get('driver')})"
        for g in gpus
        if isinstance(g, dict)
    )


def _run_lines(report: RunReport) -> list[tuple[str, str]]:
    m = report.manifest
    out = [
        ("run", report.run_id),
        ("command", " ".join(m.command) or NONE),
        ("started", _when(m.created_at)),
        ("finished", _when(m.finished_at)),
        ("satbench", f"{m.versions.get('satbench', '?')} (commit {m.versions.get('git_commit') or 'unknown'})"),
        ("CPU", f"{m.hardware.get('cpu_model') or '?'}, {m.hardware.get('cpu_cores_logical') or '?'} cores"),
        ("RAM", bytes_text(m.hardware.get("ram_bytes"))),
        ("GPU", _gpu_text(m.hardware)),
        ("requests recorded", str(report.records_count if report.records_count is not None else NONE)),
    ]
    for name, info in m.lanes.items():
        info = info if isinstance(info, dict) else {}
        net = m.network.get(name)
        rtt = net.get("rtt_median_s") if isinstance(net, dict) else None
        out.append((f"lane {name}", f"{info.get('runtime', '?')} at {info.get('url', '?')}"
                    + (f", RTT {rtt * 1000:.2f} ms" if isinstance(rtt, int | float) else "")))
    return out


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
        out += [f"  {format_recommendation(lane)}", f"    {_short_facts(lane)}"]
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
             f"Finished {_when(m.finished_at)}; {report.records_count or 0} requests recorded. "
             "Plots: `report.html`.", "", "## Recommendations", ""]
    for lane in report.lanes:
        headline, badge = _headline(lane)
        lines += [f"### {lane.lane}: {headline} ({badge})", ""]
        lines += [f"- **{label}**: {text}" for label, text in answer_facts(lane)]
        lines += [f"- note: {n}" for n in _extra_notes(lane)]
        lines += ["", f"`{format_recommendation(lane)}`", ""]
    if not report.lanes:
        lines += ["No lanes.", ""]
    lines += ["## Policy", "", f"The limits the verdicts used (from {report.policy_source}); times in ms.", ""]
    lines += _md_table(("setting", "value", "meaning"), policy_rows(report), ":---")
    workload = workload_lines(m)
    if workload:
        lines += ["", "## Workload", ""] + [f"- {line}" for line in workload]
    lines += ["", "## Run", ""] + [f"- {k}: {v if k != 'command' else f'`{v}`'}" for k, v in _run_lines(report)]
    for lane in report.lanes:
        lines += ["", f"## Results: lane {lane.lane}", ""]
        if lane_gpus(lane):
            lines += [lane_gpus(lane), ""]
        if not lane.steps:
            lines.append("(no steps)")
            continue
        lines += ["### Rungs", "", *_md_table(*lane_table(lane)), "", "### Latency (ms)", "",
                  *_md_table(*latency_table(lane))]
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
    headline, badge = _headline(lane)
    rows = []
    for label, text in answer_facts(lane):
        key = ' data-binding="1"' if label == "binding constraint" else ""
        rows.append(f"<dt>{_esc(label)}</dt><dd{key}>{_esc(text)}</dd>")
    notes = _extra_notes(lane)
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
    m = report.manifest
    parts = [
        f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>satbench run "
        f"{_esc(report.run_id)}</title><style>{_CSS}</style></head><body>",
        f"<h1>satbench run {_esc(report.run_id)}</h1>",
        f'<p class="sub">finished {_esc(_when(m.finished_at))}; {report.records_count or 0} requests recorded; '
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
    meta = _html_table(("", ""), _run_lines(report), "meta")
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
    parts.append(
        "<h2>Limitations</h2><ul>"
        + "".join(f"<li>{_esc(x)}</li>" for x in limitations(report))
        + "</ul><p>Raw data: manifest.json, records.jsonl, steps.json, recommendations.json; flat tables: "
          "steps.csv, records.csv.</p></body></html>\n"
    )
    return "\n".join(parts)


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
