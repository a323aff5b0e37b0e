"""The run report: ``report.html`` (self-contained, plots inline) and ``README.md`` for one run folder.

Both are rebuilt from the raw files alone (manifest.json, steps.json, recommendations.json, records.jsonl)
through ``satbench.report.data.load_run``, so ``satbench report RUN_DIR`` on a copied folder gives the same
report as the session that wrote it. The HTML has no external reference at all (no CDN, no web font, no
script): plots are inline SVG from ``satbench.report.plots``, styles are inline, so it opens offline.

``lane_table`` is the one results table (per rung: throughput, p50/p95 latency, TTFT, queue time, occupancy,
memory, Jain's index, starvation verdict); the terminal output of ``satbench run``, the Markdown and the
HTML all print it.
"""

from __future__ import annotations

import html
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from core.figures import StepFigures
from core.manifest import RunManifest
from satbench.report.data import LaneReport, RunReport, load_run, verdict_label
from satbench.report.plots import lane_figure_svg

__all__ = [
    "TABLE_HEADERS",
    "format_recommendation",
    "lane_gpus",
    "lane_table",
    "limitations",
    "render_html",
    "render_markdown",
    "text_table",
    "workload_lines",
    "write_report",
]

TABLE_HEADERS = (
    "c",
    "valid",
    "tok/s",
    "tok/s 95% CI",
    "req/s",
    "e2e p50",
    "e2e p95",
    "TTFT p50",
    "TTFT p95",
    "queue p95",
    "occupancy",
    "queue depth",
    "GPU mem (fullest; all)",
    "host RSS",
    "Jain",
    "pause p99",
    "verdicts",
)


def _s(value: float | None, unit: str = "s") -> str:
    if value is None:
        return "-"
    if unit == "s":
        return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"
    return f"{value:.2f}"


def _bytes(value: float | None) -> str:
    if value is None:
        return "-"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= scale:
            return f"{value / scale:.1f} {unit}"
    return f"{value:.0f} B"


def lane_gpus(lane: LaneReport) -> str:
    """``GPUs: 8 x <name> (modelled)`` from the lane's step figures, or empty where none was seen."""
    for step in lane.steps:
        mem = step.memory_bytes
        if mem.gpu_names:
            count = f"{mem.gpu_count} x " if mem.gpu_count else ""
            return f"GPUs: {count}{mem.gpu_names}" + (" (modelled by the simulator)" if mem.gpu_simulated else "")
    return ""


def _gpu(step: StepFigures) -> str:
    """The fullest GPU's peak; with several GPUs, the lane's sum over them too; ``modelled`` for the
    simulator's figures, which are no reading of a device."""
    mem = step.memory_bytes
    if mem.gpu_max is None:
        return "-"
    text = _bytes(mem.gpu_max)
    if mem.gpu_count is not None and mem.gpu_count > 1 and mem.gpu_sum_max is not None:
        text += f"; {_bytes(mem.gpu_sum_max)} on {mem.gpu_count}"
    return text + (" (modelled)" if mem.gpu_simulated else "")


def _row(step: StepFigures, checks: dict[str, str] | None) -> list[str]:
    return [
        str(step.concurrency),
        "yes" if step.valid else "no",
        f"{step.throughput_tok_s:.1f}",
        "-" if step.throughput_ci_tok_s is None
        else f"{step.throughput_ci_tok_s[0]:.1f}..{step.throughput_ci_tok_s[1]:.1f}",
        f"{step.requests_per_s:.2f}",
        _s(step.latency_s.p50),
        _s(step.latency_s.p95),
        _s(step.ttft_s.p50),
        _s(step.ttft_s.p95),
        _s(step.queue_s.p95),
        "-" if step.occupancy_ratio is None else f"{step.occupancy_ratio:.2f}",
        "-" if step.queue_depth_avg is None else f"{step.queue_depth_avg:.2f}",
        _gpu(step),
        _bytes(step.memory_bytes.host_rss_max),
        "-" if step.jain is None else f"{step.jain:.3f}",
        _s(step.pause_s.p99),
        verdict_label(checks),
    ]


def lane_table(lane: LaneReport) -> tuple[tuple[str, ...], list[list[str]]]:
    """The results table of one lane; ``verdicts`` are the document's checks of each rung."""
    return TABLE_HEADERS, [_row(s, lane.checks.get(s.concurrency)) for s in lane.steps]


def text_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A fixed-width table for the terminal."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def format_recommendation(lane: LaneReport) -> str:
    """One line: the lane's answer, or why there is none."""
    if lane.recommended is None:
        why = lane.reason or (f"status {lane.status}" if lane.status else "no answer")
        return f"{lane.lane}: no recommendation ({why})"
    if lane.status == "unsaturated":  # the top rung, a lower bound: say so first
        parts = [f"{lane.lane}: at least concurrency {lane.recommended} (saturation not reached within the ladder)"]
    else:
        parts = [f"{lane.lane}: recommended concurrency {lane.recommended}"]
    if lane.saturation is not None:
        parts.append(f"saturation at {lane.saturation}")
    if lane.binding_constraint:
        parts.append(f"bound by {lane.binding_constraint}")
    if lane.throughput_at_recommended is not None:
        parts.append(f"{lane.throughput_at_recommended:.1f} tok/s there")
    text = ", ".join(parts) + f" [{lane.status}]"
    return text + (f" ({lane.reason})" if lane.reason else "")


def limitations(report: RunReport) -> list[str]:
    out = []
    runtimes = {str(v.get("runtime", "")) for v in report.manifest.lanes.values() if isinstance(v, dict)}
    if "simulator" in runtimes:
        out.append(
            "Simulator lanes model a llama.cpp batcher; their figures describe the simulator's profile, "
            "not a real GPU. Their GPU memory column is the simulator's model (weights, compute buffers and "
            "KV cache in use: the fullest of its modelled GPUs, and the sum over them where there are several), "
            "marked modelled, never a reading of a device."
        )
    if runtimes - {"simulator"} and not report.manifest.hardware.get("gpu"):
        reason = report.manifest.hardware.get("gpu_reason") or "no GPU evidence"
        out.append(f"No GPU memory figures for the other lanes: {reason}.")
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
    return "-" if not ts else time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))


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
    lines = [
        f"prompt tokens: {_length_text(work.get('prompt_tokens'))}",
        f"output tokens: {_length_text(work.get('output_tokens'))}"
        f"{', EOS ignored' if work.get('ignore_eos') else ''}, temperature {work.get('temperature', '?')}",
        f"prefill probes: {share:.0%} of requests with {work.get('prefill_probe_tokens', '?')} prompt tokens"
        if share else "prefill probes: none",
        f"seed {work.get('seed', '?')}; closed-loop users, ladder "
        + "/".join(str(c) for c in ladder.get("concurrency") or []) + "; "
        f"warm-up {loadgen.get('warmup_s', '?')} s, window {loadgen.get('min_window_s', '?')}.."
        f"{loadgen.get('max_window_s', '?')} s",
    ]
    return lines


def render_markdown(report: RunReport) -> str:
    m = report.manifest
    lines = [f"# satbench run {report.run_id}", ""]
    lines += [
        f"- command: `{' '.join(m.command) or '-'}`",
        f"- started: {_when(m.created_at)}, finished: {_when(m.finished_at)}",
        f"- satbench {m.versions.get('satbench', '?')}, commit {m.versions.get('git_commit') or 'unknown'}",
        f"- hardware: {m.hardware.get('cpu_model') or 'unknown CPU'}, "
        f"{m.hardware.get('cpu_cores_logical') or '?'} cores, RAM {_bytes(m.hardware.get('ram_bytes'))}, "
        f"GPU: {_gpu_text(m.hardware)}",
        f"- requests recorded: {report.records_count if report.records_count is not None else '-'}",
        "",
    ]
    workload = workload_lines(m)
    if workload:
        lines += ["## Workload", ""] + [f"- {line}" for line in workload] + [""]
    lines += ["## Lanes", ""]
    for name, info in m.lanes.items():
        info = info if isinstance(info, dict) else {}
        rtt = (
            (m.network.get(name) or {}).get("rtt_median_s") if isinstance(m.network.get(name), dict) else None
        )
        lines.append(
            f"- **{name}**: {info.get('runtime', '?')} at {info.get('url', '?')}"
            f"{f', RTT {rtt * 1000:.2f} ms' if isinstance(rtt, int | float) else ''}"
        )
    lines += ["", "## Recommendations", ""]
    lines += [f"- {format_recommendation(lane)}" for lane in report.lanes] or ["- none"]
    for lane in report.lanes:
        headers, rows = lane_table(lane)
        lines += [
            "",
            f"## Results: lane {lane.lane}",
            "",
            *([lane_gpus(lane), ""] if lane_gpus(lane) else []),
            "| " + " | ".join(headers) + " |",
            "|" + "---:|" * len(headers),
        ]
        lines += ["| " + " | ".join(r) + " |" for r in rows] or ["(no steps)"]
    lines += ["", "## Limitations", ""] + [f"- {item}" for item in limitations(report)]
    lines += [
        "",
        "Plots: `report.html`. Raw data: `manifest.json`, `records.jsonl`, `steps.json`, "
        "`recommendations.json`. Rebuild with `satbench report <this folder>`.",
        "",
    ]
    return "\n".join(lines)


def _gpu_text(hardware: dict) -> str:
    gpus = hardware.get("gpu")
    if not gpus:
        return f"none ({hardware.get('gpu_reason') or 'not reported'})"
    return ", ".join(
        f"{g.get('name')} ({_bytes(g.get('memory_total_bytes'))}, driver {g.get('driver')})"
        for g in gpus
        if isinstance(g, dict)
    )


_CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px;color:#222;max-width:1240px}
h1{font-size:22px}h2{font-size:18px;border-bottom:1px solid #ccc;padding-bottom:4px;margin-top:28px}
table{border-collapse:collapse;font-size:12px;margin:8px 0}
td,th{border:1px solid #ddd;padding:3px 7px;text-align:right}th{background:#f3f3f3}
.rec{font-size:15px;background:#eef7ee;border-left:4px solid #3a3;padding:6px 10px;margin:6px 0}
.norec{background:#fbeeee;border-left-color:#c33}.meta td{text-align:left}svg{max-width:100%;height:auto}
"""


def _html_table(headers: Sequence[str], rows: Sequence[Sequence[str]], cls: str = "") -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def render_html(report: RunReport) -> str:
    m = report.manifest
    esc = html.escape
    meta = [
        ("run", report.run_id),
        ("command", " ".join(m.command) or "-"),
        ("started", _when(m.created_at)),
        ("finished", _when(m.finished_at)),
        (
            "satbench",
            f"{m.versions.get('satbench', '?')} (commit {m.versions.get('git_commit') or 'unknown'})",
        ),
        ("CPU", f"{m.hardware.get('cpu_model') or '?'}, {m.hardware.get('cpu_cores_logical') or '?'} cores"),
        ("RAM", _bytes(m.hardware.get("ram_bytes"))),
        ("GPU", _gpu_text(m.hardware)),
        ("requests recorded", str(report.records_count if report.records_count is not None else "-")),
        *(("workload", line) for line in workload_lines(m)),
    ]
    parts = [
        f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>satbench run "
        f"{esc(report.run_id)}</title><style>{_CSS}</style></head><body>",
        f"<h1>satbench run {esc(report.run_id)}</h1>",
        _html_table(("", ""), meta, "meta").replace("<thead><tr><th></th><th></th></tr></thead>", ""),
        "<h2>Recommendations</h2>",
    ]
    for lane in report.lanes:
        cls = "rec" if lane.recommended is not None else "rec norec"
        parts.append(f'<div class="{cls}">{esc(format_recommendation(lane))}</div>')
    for lane in report.lanes:
        headers, rows = lane_table(lane)
        parts.append(f"<h2>Lane {esc(lane.lane)}</h2>")
        if lane_gpus(lane):
            parts.append(f"<p>{esc(lane_gpus(lane))}</p>")
        parts.append(lane_figure_svg(lane, report.pause_objective_s) if lane.steps else "<p>No steps.</p>")
        parts.append(_html_table(headers, rows))
    parts.append(
        "<h2>Limitations</h2><ul>"
        + "".join(f"<li>{esc(x)}</li>" for x in limitations(report))
        + "</ul></body></html>\n"
    )
    return "\n".join(parts)


def write_report(run_dir: Path) -> tuple[Path, Path]:
    """Rebuilds ``report.html`` and ``README.md`` in ``run_dir`` from its raw files; returns both paths."""
    report = load_run(run_dir)
    html_path, md_path = run_dir / "report.html", run_dir / "README.md"
    html_path.write_text(render_html(report), encoding="utf-8")
    md_path.write_text(render_markdown(report), encoding="utf-8")
    return html_path, md_path
