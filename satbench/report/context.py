"""What the report says around the answers: the policy the verdicts used, the workload, the run's facts and the
limitations a reader must know."""

from __future__ import annotations

import time
from typing import Any

from satbench.answer.checks import REGISTRY
from satbench.answer.policy import SLO, Policy
from satbench.core.manifest import RunManifest
from satbench.report.data import RunReport
from satbench.report.tables import (
    NONE,
    bytes_text,
)

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
    # each latency objective the registry declares (its reading's setting names its SLO field: the registry test)
    objectives = [(e.reading.figure, getattr(p.slo, e.reading.setting.removeprefix("policy.slo."), None))
                  for e in REGISTRY if e.kind == "slo"]
    for label, value in [*objectives, ("pause p99", p.slo.tbt_p99_s)]:
        if value is not None:
            parts.append(f"{label} <= {value * 1000:g} ms")
    parts.append(f"errors <= {p.max_error_ratio:.0%}")
    if p.jain_min is not None:
        parts.append(f"Jain >= {p.jain_min:g}")
    parts.append(f"queued wait <= {p.max_admission_wait_ratio:g}x the FIFO bound "
                 f"(or {p.min_admission_overrun_s * 1000:g} ms past it)")
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


def when(ts: float | None) -> str:
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


def run_lines(report: RunReport) -> list[tuple[str, str]]:
    m = report.manifest
    out = [
        ("run", report.run_id),
        ("command", " ".join(m.command) or NONE),
        ("started", when(m.created_at)),
        ("finished", when(m.finished_at)),
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
