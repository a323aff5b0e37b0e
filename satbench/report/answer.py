"""The answer block of each lane: its state (settled, open, none), the binding constraint with its measured
figure and bound, the one-line recommendation and the facts beside it."""

from __future__ import annotations

from satbench.answer.energy import EnergyModel
from satbench.report.data import LaneReport
from satbench.report.judgments import Finding
from satbench.report.tables import (
    measure,
)

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


def answer_headline(lane: LaneReport) -> tuple[str, str]:
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
    if lane.energy is not None:
        facts.append(("energy there", energy_fact(lane.energy)))
    if lane.rate:  # the open-loop answer beside it (satbench.report.rates)
        from satbench.report.rates import rate_facts

        facts += rate_facts(lane.rate)[:2]
        if lane.rate.energy is not None:
            facts.append(("energy at the rate", energy_fact(lane.rate.energy)))
    if lane.trace:  # the recorded traffic's answer beside it (satbench.report.traces)
        from satbench.report.traces import trace_fact

        facts.append(("recorded traffic", trace_fact(lane.trace)))
    if lane.prefill:  # the peak prefill answer beside it (satbench.report.prefill)
        from satbench.report.prefill import prefill_fact

        facts.append(("peak prefill", prefill_fact(lane.prefill)))
    if lane.agents:  # the agent answer beside it (satbench.report.agents)
        from satbench.report.agents import agents_fact

        facts.append(("concurrent agents", agents_fact(lane.agents)))
    return facts


def energy_fact(e: EnergyModel) -> str:
    """An answer's energy and cost in words (``answer.energy``): the draw and what it covers, joules per output
    token, tokens/s per kW, and the cost of a million output tokens where the policy has a price."""
    if e.joules_per_token is None or e.watts is None:
        return f"not measured: {e.reason or 'no reading'}"
    what = "GPUs" if e.scope == "gpu" else "CPU package"
    how = f"{what}, {e.source}" + (", modelled by the simulator" if e.simulated else "")
    said = f"{e.watts:.0f} W ({how}), {e.joules_per_token:.3g} J per output token"
    if e.tok_s_per_kw is not None:
        said += f", {e.tok_s_per_kw:.4g} tok/s per kW"
    if e.cost_per_million_tokens is not None:
        said += (f"; {e.cost_per_million_tokens:.3g} {e.currency} per million output tokens at "
                 f"{e.price_per_hour:g} {e.currency}/h")
    return said


def short_facts(lane: LaneReport) -> str:
    """Slots, knee and saturation in one line (the terminal's second line of each answer)."""
    facts = dict(answer_facts(lane))
    return "; ".join(f"{k}: {facts[k]}" for k in ("slots", "knee", "saturation", "peak prefill") if k in facts)


def extra_notes(lane: LaneReport) -> list[str]:
    """The recommender's notes the block does not already say."""
    said = {lane.reason or "", lane.binding.detail if lane.binding else ""}
    return [n for n in lane.notes if n not in said]
