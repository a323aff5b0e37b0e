"""Plots of one lane for the self-contained report: inline SVG strings from matplotlib (Agg, no pyplot).

One figure per lane, four panels against concurrency (log2 axis, a tick at every rung): aggregate throughput
with the recommended and saturation rungs marked; p50/p95 end-to-end latency and TTFT; occupancy with queue
depth on a second axis; fairness (Jain's index) with the decode-stall ratio on a second axis and the policy's
limit. Figures are built on ``matplotlib.figure.Figure`` directly so no global pyplot state is touched, and
written as SVG with text kept as text and a fixed hash salt, so the same run gives the same bytes.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from core.figures import StepFigures
from satbench.report.data import LaneReport

__all__ = ["lane_figure_svg"]


def _values(steps: Sequence[StepFigures], getter: str) -> list[float]:
    out = []
    for step in steps:
        obj: object = step
        for part in getter.split("."):
            obj = getattr(obj, part, None)
        out.append(float(obj) if isinstance(obj, int | float) else math.nan)
    return out


def _setup_axis(ax: Axes, conc: list[int], title: str, ylabel: str) -> None:
    ax.set_title(title)
    ax.set_xlabel("concurrency (virtual users)")
    ax.set_ylabel(ylabel)
    if conc:
        if min(conc) > 0 and len(conc) > 1:
            ax.set_xscale("log", base=2)
        ax.set_xticks(conc)
        ax.set_xticklabels([str(c) for c in conc])
    ax.grid(True, alpha=0.3)


def _mark_rungs(ax: Axes, lane: LaneReport) -> None:
    if lane.recommended is not None:
        ax.axvline(
            lane.recommended,
            color="tab:green",
            linestyle="--",
            linewidth=1.5,
            label=f"recommended c={lane.recommended}",
        )
    if lane.saturation is not None:
        ax.axvline(
            lane.saturation,
            color="tab:red",
            linestyle=":",
            linewidth=1.5,
            label=f"saturation c={lane.saturation}",
        )


def lane_figure_svg(lane: LaneReport, pause_objective_s: float | None) -> str:
    """The lane's four-panel figure as an ``<svg>`` string (no XML prolog), ready to inline in HTML."""
    steps = list(lane.steps)
    conc = [s.concurrency for s in steps]
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "satbench", "font.size": 9.0}):
        fig = Figure(figsize=(11, 7.2), layout="constrained")
        (ax_tp, ax_lat), (ax_occ, ax_fair) = fig.subplots(2, 2)

        _setup_axis(ax_tp, conc, "Aggregate throughput", "output tokens / s")
        ax_tp.plot(conc, _values(steps, "throughput_tok_s"), marker="o", color="tab:blue", label="tokens/s")
        invalid = [s for s in steps if not s.valid]
        if invalid:
            ax_tp.scatter(
                [s.concurrency for s in invalid],
                [s.throughput_tok_s for s in invalid],
                marker="x",
                color="black",
                s=60,
                zorder=5,
                label="invalid step",
            )
        _mark_rungs(ax_tp, lane)
        ax_tp.set_ylim(bottom=0)
        ax_tp.legend(loc="best", fontsize=8)

        _setup_axis(ax_lat, conc, "Latency", "seconds")
        for getter, label, style in (
            ("latency_s.p50", "e2e p50", "-o"),
            ("latency_s.p95", "e2e p95", "--o"),
            ("ttft_s.p50", "TTFT p50", "-s"),
            ("ttft_s.p95", "TTFT p95", "--s"),
        ):
            ax_lat.plot(conc, _values(steps, getter), style, label=label, markersize=4)
        _mark_rungs(ax_lat, lane)
        ax_lat.set_ylim(bottom=0)
        ax_lat.legend(loc="best", fontsize=8)

        _setup_axis(ax_occ, conc, "Occupancy and queue depth", "busy slots / total slots")
        ax_occ.plot(conc, _values(steps, "occupancy_ratio"), "-o", color="tab:purple", label="occupancy")
        ax_occ.set_ylim(0, 1.05)
        ax_q = ax_occ.twinx()
        ax_q.plot(
            conc, _values(steps, "queue_depth_avg"), "--^", color="tab:orange", label="queue depth (avg)"
        )
        ax_q.set_ylabel("requests waiting")
        ax_q.set_ylim(bottom=0)
        lines = ax_occ.get_lines() + ax_q.get_lines()
        ax_occ.legend(lines, [str(line.get_label()) for line in lines], loc="upper left", fontsize=8)

        _setup_axis(ax_fair, conc, "Fairness and decode starvation", "Jain's index")
        ax_fair.plot(conc, _values(steps, "jain"), "-o", color="tab:green", label="Jain's index")
        ax_fair.set_ylim(0, 1.05)
        ax_s = ax_fair.twinx()
        pauses = [v * 1000 for v in _values(steps, "pause_s.p99")]
        ax_s.plot(conc, pauses, "--d", color="tab:red", label="pause p99 (ms)")
        if pause_objective_s is not None:
            ax_s.axhline(pause_objective_s * 1000, color="tab:red", alpha=0.4, linewidth=1,
                         label=f"objective {pause_objective_s * 1000:.0f} ms")
        ax_s.set_ylabel("longest pause per request, p99 (ms)")
        ax_s.set_ylim(bottom=0)
        lines = ax_fair.get_lines() + ax_s.get_lines()
        ax_fair.legend(lines, [str(line.get_label()) for line in lines], loc="lower left", fontsize=8)

        fig.suptitle(f"lane {lane.lane}", fontsize=12, fontweight="bold")
        buf = io.StringIO()
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    svg = buf.getvalue()
    start = svg.find("<svg")
    return svg[start:] if start >= 0 else svg
