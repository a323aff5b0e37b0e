"""The open-loop part of a lane's report: its rate answer, each rate rung, and the plot of attainment and
latency against the offered rate, with the difference to the closed loop explained.

A closed loop's users wait for their answers, so when the server stalls its users stop sending: the requests
that open traffic would have sent during the stall are never sent, and the closed loop's latency reads
better than what open traffic sees at the same throughput (coordinated omission, Tene 2013). An open-loop rung
times every request from when it was *meant* to be sent, so the wait a stall causes lands on every request
scheduled during it. ``co_sentence`` sets the two side by side for a lane: the closed loop's TTFT p95 at the
concurrency answer and the open loop's at the rate answer, both from the records.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from satbench.answer.models import RateModel
from satbench.core.figures import StepFigures

__all__ = ["co_sentence", "rate_facts", "rate_figure_svg", "rate_table"]

RATE_HEADERS = ("rate asked (req/s)", "offered (req/s)", "window (s)", "requests", "attainment",
                "goodput (req/s)", "TTFT p95 from intended (ms)", "e2e p95 from intended (ms)",
                "schedule lag p99 (ms)", "verdict")


def _ms(value: float | None) -> str:
    return "" if value is None else f"{value * 1000:.0f}"


class JudgedPoint(Protocol):
    """What a rung's row shows of the answer's point for it (a rate or a trace curve's point)."""

    @property
    def attainment_interval(self) -> Sequence[float] | None: ...
    @property
    def passed(self) -> bool | None: ...
    @property
    def reason(self) -> str | None: ...


def judged_cells(step: StepFigures, point: JudgedPoint | None) -> tuple[str, str]:
    """A rung's attainment with its interval, and the verdict the answer used (rate and trace tables)."""
    interval = None if point is None else point.attainment_interval
    share = "" if step.attainment is None else f"{step.attainment:.1%}"
    if share and interval:
        share += f" [{interval[0]:.1%}, {interval[1]:.1%}]"
    passed = None if point is None else point.passed
    verdict = ("invalid: " + (step.reason or "")) if not step.valid else (
        "pass" if passed else "fail" if passed is False else "undecided")
    if point is not None and point.reason and step.valid:
        verdict += f" ({point.reason})"
    return share, verdict


def rate_table(steps: Sequence[StepFigures], rate: RateModel | None) -> tuple[tuple[str, ...], list[list[str]]]:
    """One row per rate rung: what was asked and offered, the attainment with its interval, goodput, the
    latency from the intended send time, the client's schedule lag and the verdict the answer used."""
    verdicts = {round(p.rate_rps, 6): p for p in (rate.curve if rate is not None else [])}
    rows = []
    for s in sorted(steps, key=lambda s: s.rate_rps or 0.0):
        share, verdict = judged_cells(s, verdicts.get(round(s.rate_rps or 0.0, 6)))
        rows.append([f"{s.rate_rps:g}", "" if s.offered_rps is None else f"{s.offered_rps:.3g}", f"{s.window_s:.0f}",
                     str(s.judged_requests or s.requests), share,
                     "" if s.goodput_rps is None else f"{s.goodput_rps:.3g}", _ms(s.ttft_intended_s.p95),
                     _ms(s.latency_intended_s.p95), _ms(s.schedule_lag_s.p99), verdict])
    return RATE_HEADERS, rows


def rate_facts(rate: RateModel | None) -> list[tuple[str, str]]:
    """The rate answer as label/text pairs for the lane's answer box."""
    if rate is None:
        return []
    if rate.max_rate_rps is None:
        said = "undecided" if rate.status == "undecided" else "none"
        return [("rate answer", f"{said}: {rate.reason or rate.status}")]
    interval = rate.interval
    said = f"{rate.max_rate_rps:.3g} requests/s ({rate.max_rate_rpm} rpm), {rate.status}"
    if interval and interval[0] is not None:
        high = "no bound above" if interval[1] is None else f"{interval[1]:.3g}"
        said += f", between {interval[0]:.3g} and {high}"
    facts = [("rate answer", said)]
    if rate.binding_objective:
        facts.append(("rate bound by", rate.binding_objective))
    if rate.goodput_rps is not None:
        facts.append(("goodput there", f"{rate.goodput_rps:.3g} req/s at {rate.attainment or 0:.1%} "
                                       f"attainment (target {rate.attainment_target:.0%})"))
    law = rate.littles_law or {}
    if law.get("note"):
        facts.append(("Little's law", str(law["note"])))
    return facts


def co_sentence(closed: Sequence[StepFigures], recommended: int | None, rates: Sequence[StepFigures],
                answer: float | None) -> str | None:
    """The closed loop's TTFT p95 at the concurrency answer beside the open loop's at the rate answer
    (``answer``, requests/s), and why they differ (module docstring); ``None`` where either is missing."""
    at_c = next((s for s in closed if s.concurrency == recommended), None)
    if at_c is None or answer is None or not rates:
        return None
    near = min(rates, key=lambda s: abs((s.offered_rps or s.rate_rps or 0.0) - answer))
    closed_p95, open_p95 = at_c.ttft_s.p95, near.ttft_intended_s.p95
    if closed_p95 is None or open_p95 is None:
        return None
    return (f"Closed loop at c={recommended}: TTFT p95 {closed_p95 * 1000:.0f} ms at {at_c.requests_per_s:.3g} "
            f"req/s; open loop at {near.rate_rps:g} req/s (the rung nearest the rate answer): TTFT p95 "
            f"{open_p95 * 1000:.0f} ms from each request's intended send. A closed loop's users wait for their "
            "answers, so a slow server slows its own load and its latency reads better than open traffic sees at "
            "the same throughput (coordinated omission); the open loop times every request from its schedule, "
            "so a stall's wait lands on every request scheduled during it.")


def rate_figure_svg(lane: str, steps: Sequence[StepFigures], rate: RateModel | None, target: float,
                    ttft_objective_s: float | None) -> str:
    """Attainment (left) and TTFT p95 / e2e p95 from the intended send (right) against the offered rate, the
    target and the answer marked, as an inline ``<svg>``."""
    import matplotlib
    from matplotlib.figure import Figure

    from satbench.report.plots import figure_svg  # matplotlib (Agg) loads only when a report is drawn

    pts = sorted(steps, key=lambda s: s.offered_rps or s.rate_rps or 0.0)
    xs = [s.offered_rps or s.rate_rps or 0.0 for s in pts]
    answer = None if rate is None else rate.max_rate_rps
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "satbench", "font.size": 9.0}):
        fig = Figure(figsize=(11, 3.6), layout="constrained")
        ax_att, ax_lat = fig.subplots(1, 2)
        ax_att.plot(xs, [s.attainment if s.attainment is not None else float("nan") for s in pts], "o-",
                    color="#2e7d32", label="attainment")
        ax_att.axhline(target, color="#2e7d32", linestyle="--", linewidth=0.8, label=f"target {target:.0%}")
        ax_att.set_ylim(-0.02, 1.02)
        ax_att.set_ylabel("share of requests meeting every objective")
        ax_lat.plot(xs, [(s.ttft_intended_s.p95 or float("nan")) * 1000 for s in pts], "o-", color="#1f77b4",
                    label="TTFT p95 (from intended)")
        ax_lat.plot(xs, [(s.latency_intended_s.p95 or float("nan")) * 1000 for s in pts], "s-", color="#9467bd",
                    label="e2e p95 (from intended)")
        if ttft_objective_s is not None:
            ax_lat.axhline(ttft_objective_s * 1000, color="#1f77b4", linestyle="--", linewidth=0.8,
                           label="TTFT objective")
        ax_lat.set_ylabel("ms")
        ax_lat.set_yscale("log")
        for ax in (ax_att, ax_lat):
            ax.set_xlabel("offered rate (requests/s)")
            if answer is not None:
                ax.axvline(answer, color="#b26a00", linewidth=1.2, label=f"rate answer {answer:.3g}/s")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7, loc="best")
        fig.suptitle(f"lane {lane}: open-loop rates", fontsize=11, fontweight="bold")
        return figure_svg(fig)
