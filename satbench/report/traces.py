"""The recorded-traffic part of a lane's report: the trace answer ("this node takes N x the recorded traffic of
FILE"), each trace rung by its speed factor, the plot of attainment against the factor with the answer marked,
and the evidence of which traffic it is for.

A trace rung replays a window of a recorded trace (``loadgen.trace_step``) at a speed factor: its requests keep
the trace's lengths and prefix sharing, its arrivals the trace's gaps over the factor. The answer
(``answer.trace_analysis``, the document's ``lanes.<key>.trace``) is the rate answer over those rungs read
in factors, so the table and the figure here are ``satbench.report.rates``' with the factor on the x axis. The
evidence is the manifest's (file sha256 and size, the window, the factors walked, what was synthesised, the
prompt-cache share the trace's block ids imply): an answer is only for the traffic it was measured on.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import PurePath

from satbench.answer.models import TraceEvidenceModel, TraceModel
from satbench.core.figures import StepFigures
from satbench.loadgen.rates import factor_label
from satbench.report.rates import judged_cells

__all__ = ["trace_evidence", "trace_fact", "trace_figure_svg", "trace_sentence", "trace_table"]

TRACE_HEADERS = ("speed factor", "rate asked (req/s)", "offered (req/s)", "window (s)", "requests", "attainment",
                 "goodput (req/s)", "TTFT p95 from intended (ms)", "e2e p95 from intended (ms)", "verdict")


def _ms(value: float | None) -> str:
    return "" if value is None else f"{value * 1000:.0f}"


def _window(evidence: TraceEvidenceModel, *, named: bool = True) -> str:
    window = evidence.window
    if window is None or window.offset_s is None or window.length_s is None:
        return "window unknown" if named else "unknown"
    said = f"{window.offset_s:g}-{window.offset_s + window.length_s:g} s"
    said = f"window {said}" if named else said
    return said if window.requests is None else f"{said}, {window.requests} requests"


def _file(evidence: TraceEvidenceModel) -> str:
    return "the trace" if not evidence.path else PurePath(evidence.path).name


def trace_sentence(trace: TraceModel) -> str:
    """The answer in one sentence, naming the file and the window: "this node takes N x the recorded traffic
    of FILE (window ...)"."""
    evidence = trace.trace
    where = f"{_file(evidence)} ({_window(evidence)}, recorded at {trace.recorded_rate_rps:.3g} requests/s)"
    if trace.max_factor is None:
        return f"this node takes none of the recorded traffic of {where} within its objectives: {trace.reason}"
    bound = "at least " if trace.status == "unsaturated" else ""
    said = (f"this node takes {bound}{trace.max_factor:.3g} x the recorded traffic of {where}: "
            f"{trace.max_rate_rps or 0:.3g} requests/s with {trace.attainment_target:.0%} of them within every "
            "objective")
    if trace.interval and trace.interval[0] is not None:
        high = "no bound above" if trace.interval[1] is None else f"{trace.interval[1]:.3g}x"
        said += f" (the crossing lies between {trace.interval[0]:.3g}x and {high})"
    if trace.status == "undecided" and trace.reason:
        said += f"; undecided: {trace.reason}"
    if trace.binding_objective:
        said += f"; what failed first above it: {trace.binding_objective}"
    return said


def trace_fact(trace: TraceModel) -> str:
    """The answer in a few words, for the lane's answer box: "4.44 x the recorded traffic of FILE (settled)"."""
    if trace.max_factor is None:
        return f"none of {_file(trace.trace)} within the objectives"
    bound = "at least " if trace.status == "unsaturated" else ""
    return f"{bound}{trace.max_factor:.3g} x the recorded traffic of {_file(trace.trace)} ({trace.status})"


def trace_evidence(trace: TraceModel) -> list[tuple[str, str]]:
    """Which traffic the answer is for, as label/text pairs (module docstring)."""
    ev = trace.trace
    facts = [("file", f"{ev.path or 'unknown'} ({ev.format or 'format unknown'})"),
             ("sha256", ev.sha256 or "unknown"),
             ("size", "unknown" if ev.size_bytes is None else f"{ev.size_bytes} bytes"),
             ("window", _window(ev, named=False)),
             ("recorded rate", f"{trace.recorded_rate_rps:.3g} requests/s"),
             ("speed factors walked", ", ".join(factor_label(f) for f in ev.speed_factors) or "unknown")]
    if ev.implied_cache_share is not None:
        facts.append(("prompt cache share its block ids imply", f"{ev.implied_cache_share:.1%}"))
    if ev.synthesised:
        facts.append(("synthesised", ev.synthesised))
    if ev.skipped_rows:
        facts.append(("rows left out", str(ev.skipped_rows)))
    return facts


def trace_table(steps: Sequence[StepFigures], trace: TraceModel | None,
                factors: dict[float, float]) -> tuple[tuple[str, ...], list[list[str]]]:
    """One row per trace rung, by factor: the rate asked and offered, the attainment with its interval,
    goodput, the latency from the intended send time and the verdict the answer used. ``factors`` maps each
    rung's asked rate (rounded to 6 places) to its speed factor (the manifest's windows)."""
    points = {round(p.rate_rps, 6): p for p in (trace.curve if trace is not None else [])}
    rows = []
    for s in sorted(steps, key=lambda s: s.rate_rps or 0.0):
        key = round(s.rate_rps or 0.0, 6)
        point = points.get(key)
        factor = point.speed_factor if point is not None else factors.get(key)
        share, verdict = judged_cells(s, point)
        rows.append(["" if factor is None else factor_label(factor), f"{s.rate_rps:.3g}",
                     "" if s.offered_rps is None else f"{s.offered_rps:.3g}", f"{s.window_s:.0f}",
                     str(s.judged_requests or s.requests), share,
                     "" if s.goodput_rps is None else f"{s.goodput_rps:.3g}", _ms(s.ttft_intended_s.p95),
                     _ms(s.latency_intended_s.p95), verdict])
    return TRACE_HEADERS, rows


def trace_figure_svg(lane: str, trace: TraceModel) -> str:
    """Attainment (with its interval) against the speed factor, the target and the answer marked, as an inline
    ``<svg>``."""
    import matplotlib
    from matplotlib.figure import Figure

    from satbench.report.plots import figure_svg  # matplotlib (Agg) loads only when a report is drawn

    pts = sorted((p for p in trace.curve if p.attainment is not None), key=lambda p: p.speed_factor)
    xs = [p.speed_factor for p in pts]
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "satbench", "font.size": 9.0}):
        fig = Figure(figsize=(7, 3.4), layout="constrained")
        ax = fig.subplots()
        ax.plot(xs, [p.attainment or 0.0 for p in pts], "o-", color="#2e7d32", label="attainment")
        grew = [p for p in pts if p.sustained is False]
        if grew:  # no steady attainment to draw: the answer does not read it (answer.rate_analysis)
            ax.plot([p.speed_factor for p in grew], [p.attainment or 0.0 for p in grew], "x", color="#c62828",
                    markersize=9, label="not sustained (backlog grew)")
        spans = [(p.speed_factor, p.attainment_interval) for p in pts if p.attainment_interval]
        if spans:
            ax.vlines([x for x, _ in spans], [i[0] for _, i in spans], [i[1] for _, i in spans], color="#2e7d32",
                      linewidth=2.5, alpha=0.35, label="its interval")
        ax.axhline(trace.attainment_target, color="#2e7d32", linestyle="--", linewidth=0.8,
                   label=f"target {trace.attainment_target:.0%}")
        if trace.max_factor is not None:
            ax.axvline(trace.max_factor, color="#b26a00", linewidth=1.2,
                       label=f"answer {trace.max_factor:.3g}x the recorded traffic")
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("speed factor (x the recorded traffic)")
        ax.set_ylabel("share of requests meeting every objective")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
        fig.suptitle(f"lane {lane}: recorded traffic", fontsize=11, fontweight="bold")
        return figure_svg(fig)
