"""Plots of one lane for the self-contained report: inline SVG strings from matplotlib (Agg, no pyplot).

One figure per lane, six panels against concurrency (log2 axis, a tick at every rung), each threshold on
the axis it bounds, and the recommended and saturation rungs marked on every panel:

- throughput: output tokens/s with its interval, input and total tokens/s where known, invalid rungs
  crossed out, the knee;
- latency in ms (the tables' unit): p50/p95 of e2e and TTFT, with the policy's TTFT/e2e p95 objectives
  where they fall inside the panel (else named in the title);
- occupancy, with queue depth on a second axis coloured like its line;
- decode pauses in ms: each rung's pause p99, how much of it another request's prefill held beyond the decode
  step (the decode-starvation figure, p99) against the stall limit (the policy's objective, or its ratio to
  the lane's step at the lowest rung), and the ITL p95;
- prefill admission in ms: the worst wait against its own FIFO bound times the policy's ratio, rung by rung;
- fairness: Jain's index (with the policy's ``jain_min`` where set) on the left, the worst user's wait
  ratio and the slowest user's pace ratio with their limits on a second axis coloured like them.

Figures are built on ``matplotlib.figure.Figure`` directly so no global pyplot state is touched, and
written as SVG with text kept as text and a fixed hash salt, so the same run gives the same bytes.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from typing import Literal

import matplotlib

matplotlib.use("Agg")

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from satbench.answer.judges import stall_limit
from satbench.answer.policy import Policy
from satbench.core.figures import FIGURES, StepFigures
from satbench.report.data import LaneReport

__all__ = ["figure_svg", "lane_figure_svg"]

_FONT = 8


def _values(steps: Sequence[StepFigures], getter: str) -> list[float]:
    """The figure ``getter`` names (``ttft_s.p95``) of each step, NaN where unknown; a figure whose declared
    unit is seconds (``core.figures.FIGURES``) in ms, as the plots' axes show it."""
    scale = 1000.0 if FIGURES[getter.partition(".")[0]].unit == "s" else 1.0
    out = []
    for step in steps:
        obj: object = step
        for part in getter.split("."):
            obj = getattr(obj, part, None)
        out.append(float(obj) * scale if isinstance(obj, int | float) else math.nan)
    return out


def _known(values: Sequence[float]) -> list[float]:
    return [v for v in values if not math.isnan(v)]


def _setup_axis(ax: Axes, conc: list[int], title: str, ylabel: str) -> None:
    ax.set_title(title)
    ax.set_xlabel("concurrency (virtual users)")
    ax.set_ylabel(ylabel)
    if conc:
        if min(conc) > 0 and len(conc) > 1:
            ax.set_xscale("log", base=2)
        ax.set_xticks(conc)
        ax.set_xticklabels([str(c) for c in conc])
        ax.minorticks_off()
    ax.grid(True, alpha=0.3)


def _colour_axis(ax: Axes, colour: str, side: str) -> None:
    """A second axis reads as its line's: label, ticks and spine in the line's colour."""
    ax.yaxis.label.set_color(colour)
    ax.tick_params(axis="y", colors=colour)
    ax.spines[side].set_color(colour)


def _mark_rungs(ax: Axes, lane: LaneReport, labelled: bool) -> None:
    if lane.recommended is not None:
        word = "at least" if lane.status == "unsaturated" else "recommended"
        ax.axvline(lane.recommended, color="tab:green", linestyle="--", linewidth=1.5,
                   label=f"{word} c={lane.recommended}" if labelled else "_nolegend_")
    if lane.saturation is not None:
        ax.axvline(lane.saturation, color="tab:red", linestyle=":", linewidth=1.5,
                   label=f"saturation c={lane.saturation}" if labelled else "_nolegend_")


def _threshold(ax: Axes, value: float | None, data: Sequence[float], colour: str, label: str,
               title: str) -> str:
    """A horizontal limit drawn on ``ax`` where it lies within 4x the data's top (else the panel would be
    all headroom): returns the words to add to the title when it is left off."""
    if value is None:
        return ""
    top = max(_known(data), default=0.0)
    if top > 0 and value > 4 * top:
        return f"{title} above the panel"
    ax.axhline(value, color=colour, linestyle="-.", linewidth=1.2, alpha=0.8, label=label)
    return ""


def _legend(ax: Axes, *others: Axes, loc: Literal["best", "upper left", "lower left"] = "best") -> None:
    lines = [line for a in (ax, *others) for line in a.get_lines() if not str(line.get_label()).startswith("_")]
    if lines:
        ax.legend(lines, [str(line.get_label()) for line in lines], loc=loc, fontsize=_FONT - 1)


def _throughput(ax: Axes, lane: LaneReport, steps: list[StepFigures], conc: list[int]) -> None:
    _setup_axis(ax, conc, "Throughput", "tokens / s")
    output = _values(steps, "throughput_tok_s")
    ax.plot(conc, output, marker="o", color="tab:blue", label="output tok/s")
    # clamped: a figure read from another source than its interval (a store still filling) may lie outside it
    lows = [max(0.0, s.throughput_tok_s - s.throughput_ci_tok_s[0]) if s.throughput_ci_tok_s else 0.0 for s in steps]
    highs = [max(0.0, s.throughput_ci_tok_s[1] - s.throughput_tok_s) if s.throughput_ci_tok_s else 0.0 for s in steps]
    if any(lows) or any(highs):
        ax.errorbar(conc, output, yerr=[lows, highs], fmt="none", ecolor="tab:blue", capsize=3, linewidth=1)
    total = [math.nan if s.total_throughput_tok_s is None else s.total_throughput_tok_s for s in steps]
    if _known(total):
        ax.plot(conc, total, "--s", color="tab:cyan", markersize=4, label="total tok/s")
        ax.plot(conc, _values(steps, "input_throughput_tok_s"), ":^", color="tab:gray", markersize=4,
                label="input tok/s")
    invalid = [s for s in steps if not s.valid]
    if invalid:
        ax.plot([s.concurrency for s in invalid], [s.throughput_tok_s for s in invalid], "x", color="black",
                markersize=9, markeredgewidth=2, label="invalid rung")
    if lane.knee is not None and lane.knee in conc:
        y = steps[conc.index(lane.knee)].throughput_tok_s
        ax.plot([lane.knee], [y], "D", color="tab:olive", markersize=7, label=f"knee c={lane.knee}")
    _mark_rungs(ax, lane, labelled=True)
    ax.set_ylim(bottom=0)
    _legend(ax)


def _latency(ax: Axes, lane: LaneReport, steps: list[StepFigures], conc: list[int], policy: Policy) -> None:
    series = [
        ("latency_s.p50", "e2e p50", "-o", "tab:blue"),
        ("latency_s.p95", "e2e p95", "--o", "tab:blue"),
        ("ttft_s.p50", "TTFT p50", "-s", "tab:orange"),
        ("ttft_s.p95", "TTFT p95", "--s", "tab:orange"),
    ]
    values = {label: _values(steps, getter) for getter, label, _, _ in series}
    everything = [v for vs in values.values() for v in vs]
    _setup_axis(ax, conc, "Latency", "ms")
    for _, label, style, colour in series:
        ax.plot(conc, values[label], style, color=colour, label=label, markersize=4)
    off = []
    for value, label, colour in ((policy.slo.ttft_p95_s, "TTFT p95", "tab:orange"),
                                 (policy.slo.e2e_p95_s, "e2e p95", "tab:blue")):
        if value is not None:
            text = f"{label} objective {value * 1000:g} ms"
            off.append(_threshold(ax, value * 1000, everything, colour, text, text))
    off = [o for o in off if o]
    if off:
        ax.set_title("Latency; " + "; ".join(off), fontsize=_FONT + 1)
    _mark_rungs(ax, lane, labelled=False)
    ax.set_ylim(bottom=0)
    _legend(ax)


def _occupancy(ax: Axes, lane: LaneReport, steps: list[StepFigures], conc: list[int]) -> None:
    _setup_axis(ax, conc, "Occupancy and queue depth", "busy slots / total slots")
    ax.plot(conc, _values(steps, "occupancy_ratio"), "-o", color="tab:purple", label="occupancy (left)")
    ax.set_ylim(0, 1.05)
    _colour_axis(ax, "tab:purple", "left")
    ax_q = ax.twinx()
    ax_q.plot(conc, _values(steps, "queue_depth_avg"), "--^", color="tab:orange", label="queue depth (right)")
    ax_q.set_ylabel("requests waiting (avg)")
    ax_q.set_ylim(bottom=0)
    _colour_axis(ax_q, "tab:orange", "right")
    _mark_rungs(ax, lane, labelled=False)
    _legend(ax, ax_q, loc="upper left")


def _pauses(ax: Axes, lane: LaneReport, steps: list[StepFigures], conc: list[int], policy: Policy) -> None:
    _setup_axis(ax, conc, "Decode pauses (decode starvation)", "ms")
    pauses = _values(steps, "pause_s.p99")
    held = _values(steps, "pause_excess_s.p99")
    itl = _values(steps, "itl_s.p95")
    ax.plot(conc, pauses, "-d", color="tab:red", label="longest pause per request, p99")
    ax.plot(conc, held, "-s", color="tab:purple", label="held by a prefill beyond the step, p99")
    ax.plot(conc, itl, "--.", color="tab:brown", label="ITL p95")
    lowest = next((s for s in steps if s.decode_step_s is not None), None)
    limit = stall_limit(policy, None if lowest is None else lowest.decode_step_s)
    title = ""
    if limit is not None:
        text = f"stall limit {limit * 1000:.0f} ms"
        title = _threshold(ax, limit * 1000, pauses + held + itl, "tab:purple", text, text)
    if title:
        ax.set_title(f"Decode pauses; {title}", fontsize=_FONT + 1)
    _mark_rungs(ax, lane, labelled=False)
    ax.set_ylim(bottom=0)
    _legend(ax, loc="upper left")


def _admission(ax: Axes, lane: LaneReport, steps: list[StepFigures], conc: list[int], policy: Policy) -> None:
    _setup_axis(ax, conc, "Prefill admission (prefill starvation)", "ms")
    waits = _values(steps, "admission_wait_max_s")
    limits = [math.nan if s.admission_wait_bound_s is None
              else max(s.admission_wait_bound_s * policy.max_admission_wait_ratio,
                       s.admission_wait_bound_s + policy.min_admission_overrun_s) * 1000 for s in steps]
    ax.plot(conc, _values(steps, "queue_s.p95"), "--.", color="tab:gray", label="queue wait p95")
    ax.plot(conc, waits, "-o", color="tab:blue", label="wait most over its FIFO bound")
    ax.plot(conc, limits, "-.", marker="_", markersize=14, markeredgewidth=2, color="tab:red", linewidth=1.2,
            label=f"its limit: FIFO bound x {policy.max_admission_wait_ratio:g}, "
                  f"+{policy.min_admission_overrun_s * 1000:g} ms at least")
    if not _known(waits):
        slots = "" if lane.slots is None else f" (c <= {lane.slots} slots)"
        ax.text(0.5, 0.5, f"no rung queued requests{slots}", transform=ax.transAxes, ha="center",
                va="center", color="#555")
    _mark_rungs(ax, lane, labelled=False)
    ax.set_ylim(bottom=0)
    _legend(ax, loc="upper left")


def _fairness(ax: Axes, lane: LaneReport, steps: list[StepFigures], conc: list[int], policy: Policy) -> None:
    _setup_axis(ax, conc, "Fairness", "Jain's index over users' tokens")
    ax.plot(conc, _values(steps, "jain"), "-o", color="tab:green", label="Jain's index (left)")
    if policy.jain_min is not None:
        ax.axhline(policy.jain_min, color="tab:green", linestyle="-.", linewidth=1.2,
                   label=f"Jain limit {policy.jain_min:g} (jain_min)")
    ax.set_ylim(0, 1.05)
    _colour_axis(ax, "tab:green", "left")
    ax_r = ax.twinx()
    colour = "tab:brown"
    ax_r.plot(conc, _values(steps, "user_wait_ratio"), "--s", color=colour, markersize=4,
              label="worst user's wait / lane's (right)")
    ax_r.plot(conc, _values(steps, "user_itl_ratio"), ":^", color=colour, markersize=4,
              label="slowest user's pace / fastest's (right)")
    ax_r.axhline(policy.max_user_wait_ratio, color=colour, linestyle="-.", linewidth=1.0, alpha=0.8,
                 label=f"ratio limit {policy.max_user_wait_ratio:g}x (right)")
    if policy.max_user_itl_ratio != policy.max_user_wait_ratio:
        ax_r.axhline(policy.max_user_itl_ratio, color=colour, linestyle=(0, (1, 3)), linewidth=1.0,
                     label=f"pace limit {policy.max_user_itl_ratio:g}x (right)")
    ratios = _known(_values(steps, "user_wait_ratio") + _values(steps, "user_itl_ratio"))
    ax_r.set_ylim(0, max([*ratios, policy.max_user_wait_ratio, policy.max_user_itl_ratio]) * 1.15)
    ax_r.set_ylabel("ratio (x)")
    _colour_axis(ax_r, colour, "right")
    _mark_rungs(ax, lane, labelled=False)
    _legend(ax, ax_r, loc="lower left")


def lane_figure_svg(lane: LaneReport, policy: Policy) -> str:
    """The lane's six-panel figure as an ``<svg>`` string (no XML prolog), ready to inline in HTML;
    ``policy`` gives the thresholds drawn (the one the verdicts used)."""
    steps = list(lane.steps)
    conc = [s.concurrency for s in steps]
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "satbench", "font.size": 9.0}):
        fig = Figure(figsize=(11, 10.5), layout="constrained")
        (ax_tp, ax_lat), (ax_occ, ax_pause), (ax_adm, ax_fair) = fig.subplots(3, 2)
        _throughput(ax_tp, lane, steps, conc)
        _latency(ax_lat, lane, steps, conc, policy)
        _occupancy(ax_occ, lane, steps, conc)
        _pauses(ax_pause, lane, steps, conc, policy)
        _admission(ax_adm, lane, steps, conc, policy)
        _fairness(ax_fair, lane, steps, conc, policy)
        fig.suptitle(f"lane {lane.lane}", fontsize=12, fontweight="bold")
        return figure_svg(fig)


def figure_svg(fig: Figure) -> str:
    """``fig`` as an inline ``<svg>`` string (no XML prolog), the same bytes for the same figure (no date, no
    creator; the hash salt is the caller's ``rc_context``)."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    svg = buf.getvalue()
    start = svg.find("<svg")
    return svg[start:] if start >= 0 else svg
