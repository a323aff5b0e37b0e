"""What a tune shows: a table per lane (console and README.md) and a hand-written SVG Pareto plot per lane.

The plot is plain SVG text (no plotting dependency, so the same tune gives the same bytes): throughput per
user (x) against throughput per node (y) of every feasible candidate, the Pareto-optimal ones filled and
joined by the front, the winner ringed, each point labelled with its candidate id.

Everything here reads the tune's models (``satbench.tune.models``) by attribute: a tune renders the
``TuneDocument`` it built, and a reader of an earlier tune folder the one ``read_tune`` validated.
"""

from __future__ import annotations

from html import escape
from typing import Any

from satbench.tune.models import TuneDocument, TuneLane

__all__ = ["facts", "lane_table", "pareto_svg", "readme", "report_html"]


def _num(value: Any, fmt: str = ".1f") -> str:
    return "-" if value is None else format(value, fmt)


def lane_table(name: str, lane: TuneLane) -> list[str]:
    """Markdown table lines of one lane's candidates, then its answer."""
    rows = [f"### {name} ({lane.runtime}: {lane.model})", "",
            "| candidate | state | answer c | binding | throughput tok/s | 95% interval | why |",
            "|---|---|---|---|---|---|---|"]
    winner = None if lane.winner is None else lane.winner.id
    for c in lane.candidates:
        ci = c.throughput_ci_tok_s
        why = c.reason if c.state != "measured" else (c.status or "")
        if c.dominated_by:
            why = f"dominated by {c.dominated_by}: {c.reason}"
        mark = " **winner**" if c.id == winner else ""
        rows.append(f"| {c.id}{mark} | {c.state} | {_num(c.recommended_concurrency, 'd')} | "
                    f"{c.binding_constraint or '-'} | {_num(c.throughput_tok_s)} | "
                    f"{'-' if ci is None else f'{ci[0]:.1f}-{ci[1]:.1f}'} | {(why or '').replace('|', '/')} |")
    rows.append("")
    rows.append(f"walked {lane.walked} of {lane.grid.size} candidates ({lane.pruned} pruned, "
                f"{lane.refused} refused, {lane.skipped} skipped, {lane.resumed} resumed)")
    rows += [f"- {line}" for line in facts(lane)]
    if lane.winner is None:
        rows.append(f"no answer: {lane.reason}")
        return rows
    w, m = lane.winner, lane.margin
    rows.append(f"winner {w.id}: c={lane.recommended_concurrency} at {_num(lane.throughput_tok_s)} tok/s; "
                f"flags `{lane.flags}`")
    if m is not None and lane.runner_up is not None:
        ratio = "" if m.ratio is None else f" ({m.ratio:+.1%})"
        rows.append(f"runner-up {lane.runner_up.id}: margin {m.tok_s:+.1f} tok/s{ratio} "
                    f"± {_num(m.uncertainty_tok_s)} (at the policy's confidence): "
                    f"{'significant' if m.significant else 'not significant'}")
    return rows


def facts(lane: TuneLane) -> list[str]:
    """What the lane's answer rests on, one line each: the context, the memory, the decision, the findings."""
    out = []
    context = lane.context
    if context is not None:
        out.append(f"context per slot {context.ctx_per_slot}: {context.detail}")
    model, budget = lane.memory.model, lane.memory.budget
    if model is not None:
        kv = model.kv_arithmetic or f"KV bytes not modelled ({model.why})"
        out.append(f"memory from the {model.source}: {kv}; weights {_num(model.weights_bytes, ',')} B"
                   + ("" if budget is None else f"; budget {budget.usable_bytes:,} B usable ({budget.source})"))
    if lane.decision is not None:
        out.append(f"decision: {lane.decision.said}")
    out += [f"finding: {f}" for f in lane.findings]
    return out


def _pareto_table(lane: TuneLane) -> list[str]:
    rows = ["| candidate | c | per node tok/s | per user tok/s | Pareto-optimal |", "|---|---|---|---|---|"]
    for p in lane.pareto:
        rows.append(f"| {p.candidate} | {p.recommended_concurrency} | {p.throughput_per_node_tok_s:.1f} | "
                    f"{p.throughput_per_user_tok_s:.1f} | {'yes' if p.pareto_optimal else ''} |")
    return rows


def readme(doc: TuneDocument) -> str:
    lines = [f"# satbench tune {doc.tune_id}", "", f"command: `{' '.join(doc.command)}`", ""]
    for name, lane in doc.lanes.items():
        lines += [*lane_table(name, lane), "", f"fingerprint `{lane.fingerprint}`", ""]
        if lane.pareto:
            lines += ["Pareto front (throughput per node vs per user):", "", *_pareto_table(lane)]
            lines += ["", f"![Pareto plot](pareto-{name}.svg)", ""]
    lines += ["Evidence per candidate: `candidates/<lane key>/<candidate>/` (command.txt, manifest.json, records.jsonl,"
              " steps.json, recommendations.json).", ""]
    return "\n".join(lines)


def pareto_svg(name: str, lane: TuneLane, width: int = 560, height: int = 380) -> str:
    """The lane's Pareto plot as SVG text."""
    points = lane.pareto
    left, right, top, bottom = 70, 20, 30, 50
    xs = [p.throughput_per_user_tok_s for p in points] or [1.0]
    ys = [p.throughput_per_node_tok_s for p in points] or [1.0]
    x_hi, y_hi = max(xs) * 1.1 or 1.0, max(ys) * 1.1 or 1.0

    def sx(v: float) -> float:
        return left + (width - left - right) * v / x_hi

    def sy(v: float) -> float:
        return height - bottom - (height - top - bottom) * v / y_hi

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{width / 2:.0f}" y="18" text-anchor="middle" font-size="13">'
           f'{escape(name)}: throughput per node vs per user</text>',
           f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}" stroke="black"/>',
           f'<line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" stroke="black"/>']
    for i in range(5):
        xv, yv = x_hi * i / 4, y_hi * i / 4
        out.append(f'<text x="{sx(xv):.1f}" y="{height - bottom + 15}" text-anchor="middle">{xv:.0f}</text>')
        out.append(f'<text x="{left - 6}" y="{sy(yv) + 4:.1f}" text-anchor="end">{yv:.0f}</text>')
    out.append(f'<text x="{(left + width - right) / 2:.0f}" y="{height - 12}" text-anchor="middle">'
               'throughput per user (tok/s) = throughput / concurrency</text>')
    out.append(f'<text x="16" y="{(top + height - bottom) / 2:.0f}" text-anchor="middle" '
               f'transform="rotate(-90 16 {(top + height - bottom) / 2:.0f})">throughput per node (tok/s)</text>')
    front = sorted((p for p in points if p.pareto_optimal), key=lambda p: p.throughput_per_user_tok_s)
    if len(front) > 1:
        path = " ".join(f"{sx(p.throughput_per_user_tok_s):.1f},{sy(p.throughput_per_node_tok_s):.1f}" for p in front)
        out.append(f'<polyline points="{path}" fill="none" stroke="#1f77b4" stroke-dasharray="4 3"/>')
    winner = None if lane.winner is None else lane.winner.id
    for p in points:
        x, y = sx(p.throughput_per_user_tok_s), sy(p.throughput_per_node_tok_s)
        fill = "#1f77b4" if p.pareto_optimal else "white"
        out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{fill}" stroke="#1f77b4"/>')
        if p.candidate == winner:
            out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="8" fill="none" stroke="#d62728" stroke-width="2"/>')
        out.append(f'<text x="{x + 7:.1f}" y="{y - 6:.1f}">{escape(p.candidate)} c={p.recommended_concurrency}'
                   '</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


_STYLE = ("body{font-family:sans-serif;margin:2em;max-width:70em}table{border-collapse:collapse;margin:1em 0}"
          "td,th{border:1px solid #ccc;padding:.25em .5em;text-align:left}th{background:#f4f4f4}"
          "code{background:#f4f4f4;padding:0 .25em}.winner{font-weight:bold;background:#eef6ee}")


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.1f}"
    if isinstance(value, (list, tuple)):
        return "-".join(f"{v:.1f}" if isinstance(v, float) else str(v) for v in value)
    return escape(str(value))


def report_html(doc: TuneDocument) -> str:
    """The tune's report: per lane the answer first (the winner's flags, the runner-up and the margin), the
    Pareto plot (inline SVG, the candidates marked), the Pareto table and every candidate's row."""
    parts = ["<!doctype html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>satbench tune {escape(doc.tune_id)}</title><style>{_STYLE}</style></head><body>",
             f"<h1>satbench tune {escape(doc.tune_id)}</h1>",
             f"<p>command: <code>{escape(' '.join(doc.command))}</code></p>"]
    for name, lane in doc.lanes.items():
        parts.append(f"<h2>{escape(name)} ({escape(lane.runtime)}: {escape(str(lane.model))})</h2>")
        if lane.winner is None:
            parts.append(f"<p><strong>no answer:</strong> {escape(str(lane.reason))}</p>")
        else:
            parts.append(f"<p><strong>{escape(lane.winner.id)}</strong>: recommended concurrency "
                         f"{lane.recommended_concurrency} at {_num(lane.throughput_tok_s)} tok/s; flags "
                         f"<code>{escape(str(lane.flags))}</code></p>")
            m, r = lane.margin, lane.runner_up
            if m is not None and r is not None:
                ratio = "" if m.ratio is None else f" ({m.ratio:+.1%})"
                parts.append(f"<p>runner-up {escape(r.id)}: margin {m.tok_s:+.1f} tok/s{ratio} &plusmn; "
                             f"{_num(m.uncertainty_tok_s)} (at the policy's confidence): "
                             f"{'significant' if m.significant else 'not significant'}</p>")
        parts.append(f"<p>walked {lane.walked} of {lane.grid.size} candidates ({lane.pruned} pruned, "
                     f"{lane.refused} refused, {lane.skipped} skipped, {lane.resumed} resumed); "
                     f"fingerprint <code>{escape(str(lane.fingerprint))}</code></p>")
        said = facts(lane)
        if said:
            parts.append("<ul>" + "".join(f"<li>{escape(line)}</li>" for line in said) + "</ul>")
        if lane.pareto:
            parts.append(pareto_svg(name, lane))
            parts.append("<table><tr><th>candidate</th><th>c</th><th>per node tok/s</th><th>per user tok/s</th>"
                         "<th>Pareto-optimal</th></tr>")
            for p in lane.pareto:
                parts.append(f"<tr><td>{escape(p.candidate)}</td><td>{p.recommended_concurrency}</td>"
                             f"<td>{p.throughput_per_node_tok_s:.1f}</td><td>{p.throughput_per_user_tok_s:.1f}"
                             f"</td><td>{'yes' if p.pareto_optimal else ''}</td></tr>")
            parts.append("</table>")
        parts.append("<table><tr><th>candidate</th><th>flags</th><th>state</th><th>answer c</th><th>binding</th>"
                     "<th>tok/s</th><th>95% interval</th><th>why</th></tr>")
        winner = None if lane.winner is None else lane.winner.id
        for c in lane.candidates:
            why = c.reason if c.state != "measured" else c.status
            if c.dominated_by:
                why = f"dominated by {c.dominated_by}: {c.reason}"
            cls = ' class="winner"' if c.id == winner else ""
            parts.append(f"<tr{cls}><td>{escape(c.id)}</td><td><code>{escape(str(c.flags))}</code></td>"
                         f"<td>{escape(c.state)}</td><td>{_cell(c.recommended_concurrency)}</td>"
                         f"<td>{_cell(c.binding_constraint)}</td><td>{_cell(c.throughput_tok_s)}</td>"
                         f"<td>{_cell(c.throughput_ci_tok_s)}</td><td>{_cell(why)}</td></tr>")
        parts.append("</table>")
    parts.append("<p>Evidence per candidate: <code>candidates/&lt;lane key&gt;/&lt;candidate&gt;/</code> (command.txt, "
                 "manifest.json, records.jsonl, steps.json, recommendations.json).</p></body></html>")
    return "\n".join(parts) + "\n"
