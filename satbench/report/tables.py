"""The two results tables of a lane and their cells, one function each, which the terminal, the Markdown and
the HTML all print: ``lane_table`` (per rung: validity or its reason, output/input/total throughput, queue
wait, occupancy, memory, Jain's index, the pause p99, the prompt-cache hit share and speculative acceptance
where some rung measured them, and the document's verdicts) and ``latency_table``
(mean, p50, p95 and p99 of TTFT, ITL, TPOT and e2e). Units are fixed per column and stated in the header,
never in a cell: times in ms, throughput in tok/s, memory in MiB or GiB as the column's largest value suits.
``text_table`` lays either out for the terminal (long headers wrapped, groups over their columns)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from satbench.core.figures import StepFigures
from satbench.report.data import LaneReport
from satbench.report.judgments import verdict_label

__all__ = ["LATENCY_FIGURES", "NONE", "bytes_text", "lane_gpus", "lane_table", "latency_table", "measure",
           "text_table"]

LATENCY_FIGURES = (("TTFT", "ttft_s"), ("ITL", "itl_s"), ("TPOT", "tpot_s"), ("e2e", "latency_s"))
_STATS = ("mean", "p50", "p95", "p99")
NONE = "-"


def _ms_cells(values: Sequence[float | None]) -> list[str]:
    """Seconds as ms, with the decimals the column's largest value needs (2 under 10 ms, 1 under 1 s)."""
    known = [abs(v) * 1000 for v in values if v is not None]
    top = max(known, default=0.0)
    decimals = 2 if top < 10 else 1 if top < 1000 else 0
    return [NONE if v is None else f"{v * 1000:.{decimals}f}" for v in values]


def _memory_unit(values: Iterable[float | None], default: str = "MiB") -> tuple[str, float]:
    top = max((v for v in values if v is not None), default=None)
    if top is None:
        return default, 2.0**30 if default == "GiB" else 2.0**20
    return ("GiB", 2.0**30) if top >= 2**30 else ("MiB", 2.0**20)


def _scaled(value: float | None, scale: float) -> str:
    if value is None:
        return NONE
    return f"{value / scale:.2f}" if scale >= 2**30 else f"{value / scale:.1f}"


def _number(value: float | None, fmt: str) -> str:
    return NONE if value is None else format(value, fmt)


def bytes_text(value: float | None) -> str:
    """One size with its unit, for prose (hardware lines), never in a table column."""
    if value is None:
        return NONE
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= scale:
            return f"{value / scale:.1f} {unit}"
    return f"{value:.0f} B"


def _duration(seconds: float) -> str:
    ms = seconds * 1000
    return f"{ms:.1f} ms" if abs(ms) < 10 else f"{ms:.0f} ms"


def measure(value: float | None, unit: str) -> str:
    """A measured figure or a bound in the unit its ``Finding`` states."""
    if value is None:
        return "?"
    if unit == "s":
        return _duration(value)
    if unit == "share":
        return f"{value:.1%}"
    if unit == "gain":
        return f"{value:+.1%} per doubling"
    if unit == "ratio":
        return f"{value:.2f}x"
    if unit == "index":
        return f"{value:.3f}"
    return f"{value:.4g}"


# ---- the two tables --------------------------------------------------------------------------------------

def lane_gpus(lane: LaneReport) -> str:
    """``GPUs: 8 x <name> (modelled)`` from the lane's step figures, or empty where none was seen."""
    for step in lane.steps:
        mem = step.memory_bytes
        if mem.gpu_names:
            count = f"{mem.gpu_count} x " if mem.gpu_count else ""
            return f"GPUs: {count}{mem.gpu_names}" + (" (modelled by the simulator)" if mem.gpu_simulated else "")
    return ""


def _valid_cell(lane: LaneReport, step: StepFigures) -> str:
    """``yes``; ``no: <reason>`` for an invalid window; ``yes, not counted: <why>`` for a valid rung the
    recommender could not use (too few requests, unstable throughput)."""
    if not step.valid:
        return f"no: {step.reason or 'no reason given'}"
    judged = lane.judgments.get(step.concurrency)
    if judged is not None and judged.usable is False and judged.unusable_reason:
        return f"yes, not counted: {judged.unusable_reason}"
    return "yes"


def _energy_headers(steps: Sequence[StepFigures]) -> tuple[str, ...]:
    """The power and energy-per-token columns, where some rung measured them (``core.energy``), saying what the
    energy covers and whether the simulator modelled it."""
    scopes = {s.energy.scope for s in steps} - {None}
    if not scopes:
        return ()
    what = "GPU" if scopes == {"gpu"} else "CPU package" if scopes == {"cpu-package"} else "GPU or CPU"
    modelled = " modelled" if any(s.energy.scope == "gpu" and s.memory_bytes.gpu_simulated for s in steps) else ""
    return (f"{what} power W{modelled}", "J/output token")


def lane_table(lane: LaneReport) -> tuple[tuple[str, ...], list[list[str]]]:
    """The rungs table of one lane: per rung its validity (or why not), throughput (output, input, total;
    the output's interval), queue wait, occupancy, queue depth, memory (one unit per column, in its
    header), Jain's index, the pause p99 and how much of it another request's prefill held beyond the decode
    step (``held``, what decode starvation judges), the cache hit share and spec acceptance (columns only where
    some rung measured them) and the verdicts (the document's checks of each rung)."""
    steps = lane.steps
    mems = [s.memory_bytes for s in steps]
    gpu_unit, gpu_scale = _memory_unit([m.gpu_max for m in mems] + [m.gpu_sum_max for m in mems], "GiB")
    rss_unit, rss_scale = _memory_unit([m.host_rss_max for m in mems], "MiB")
    several = max((m.gpu_count or 0 for m in mems if m.gpu_sum_max is not None), default=0)
    gpu_header = f"GPU mem {gpu_unit}" + (" modelled" if any(m.gpu_simulated for m in mems) else "")
    if several > 1:
        gpu_header += " (fullest; sum)"
    reuse = [(header, attr) for header, attr in (("cache hit share", "cache_hit_share"),
                                                 ("spec acceptance", "spec_acceptance_rate"))
             if any(getattr(s, attr) is not None for s in steps)]  # only where some rung measured it
    energy = _energy_headers(steps)
    headers = (
        "c", "valid", "output tok/s", "input tok/s", "total tok/s", "output tok/s 95% CI", "req/s",
        "queue p95 ms", "occupancy", "queue depth", gpu_header, f"host RSS {rss_unit}", "Jain", "pause p99 ms",
        "held p99 ms", *(header for header, _ in reuse), *energy, "verdicts",
    )
    queue = _ms_cells([s.queue_s.p95 for s in steps])
    pause = _ms_cells([s.pause_s.p99 for s in steps])
    held = _ms_cells([s.pause_excess_s.p99 for s in steps])
    rows = []
    for i, step in enumerate(steps):
        mem = step.memory_bytes
        gpu = _scaled(mem.gpu_max, gpu_scale)
        if mem.gpu_count is not None and mem.gpu_count > 1 and mem.gpu_sum_max is not None:
            gpu += f"; {_scaled(mem.gpu_sum_max, gpu_scale)}"
        ci = step.throughput_ci_tok_s
        rows.append([
            str(step.concurrency),
            _valid_cell(lane, step),
            f"{step.throughput_tok_s:.1f}",
            _number(step.input_throughput_tok_s, ".1f"),
            _number(step.total_throughput_tok_s, ".1f"),
            NONE if ci is None else f"{ci[0]:.1f}..{ci[1]:.1f}",
            f"{step.requests_per_s:.2f}",
            queue[i],
            _number(step.occupancy_ratio, ".2f"),
            _number(step.queue_depth_avg, ".2f"),
            gpu,
            _scaled(mem.host_rss_max, rss_scale),
            _number(step.jain, ".3f"),
            pause[i],
            held[i],
            *(_number(getattr(step, attr), ".2f") for _, attr in reuse),
            *((_number(step.energy.watts, ".0f"), _number(step.energy.joules_per_token, ".3g")) if energy else ()),
            verdict_label(lane.checks.get(step.concurrency)),
        ])
    return headers, rows


def latency_table(lane: LaneReport) -> tuple[tuple[str, ...], list[list[str]]]:
    """The latency table of one lane, every cell in ms: per rung the mean, p50, p95 and p99 of TTFT, ITL,
    TPOT and e2e (each column's decimals from its largest value)."""
    headers = ("c", *(f"{name} {stat} ms" for name, _ in LATENCY_FIGURES for stat in _STATS))
    columns = [
        _ms_cells([getattr(getattr(s, attr), stat) for s in lane.steps])
        for _, attr in LATENCY_FIGURES
        for stat in _STATS
    ]
    rows = [[str(s.concurrency), *(col[i] for col in columns)] for i, s in enumerate(lane.steps)]
    return headers, rows


def _wrap(header: str, width: int) -> list[str]:
    lines: list[str] = []
    for word in header.split(" "):
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines


def _groups(headers: Sequence[str]) -> list[tuple[int, int, str]]:
    """Runs of two or more adjacent headers ``<name> <stat> <unit>`` with the same name and unit:
    (first column, last column, ``<name> <unit>``)."""
    keys = [(w[0], w[-1]) if len(w := h.split(" ")) >= 3 else None for h in headers]
    out, i = [], 0
    while i < len(keys):
        j = i
        while keys[i] is not None and j + 1 < len(keys) and keys[j + 1] == keys[i]:
            j += 1
        key = keys[i]
        if j > i and key is not None:
            out.append((i, j, f"{key[0]} {key[1]}"))
        i = j + 1
    return out


def text_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A fixed-width table for the terminal. Adjacent headers ``<name> <stat> <unit>`` sharing name and unit
    (``TTFT p50 ms``, ``TTFT p95 ms``) print ``<name> <unit>`` once over their ``<stat>`` columns; a header
    wider than its column's cells wraps at spaces (to at least 9 characters a line), so units in headers do
    not widen the table."""
    groups = _groups(headers)
    grouped = {c: g for g in groups for c in range(g[0], g[1] + 1)}
    shown = [" ".join(h.split(" ")[1:-1]) if i in grouped else h for i, h in enumerate(headers)]
    widths = []
    for i, header in enumerate(shown):
        cells = max((len(r[i]) for r in rows), default=0)
        words = max(len(w) for w in header.split(" "))
        widths.append(max(cells, words, min(len(header), 9)))
    wrapped = [_wrap(h, w) for h, w in zip(shown, widths, strict=True)]
    widths = [max(w, *(len(line) for line in lines)) for w, lines in zip(widths, wrapped, strict=True)]
    for first, last, label in groups:  # a group's label must fit over its columns
        span = sum(widths[first:last + 1]) + 2 * (last - first)
        widths[last] += max(0, len(label) - span)
    depth = max([len(lines) for lines in wrapped] + [len(wrapped[g[0]]) + 1 for g in groups] + [1])
    grid = [[" " * w for w in widths] for _ in range(depth)]
    for i, lines in enumerate(wrapped):
        for k, line in enumerate(lines):
            grid[depth - len(lines) + k][i] = line.rjust(widths[i])
    out = ["  ".join(line) for line in grid]
    for first, last, label in groups:  # overwrite the group's line above its stats, centred over the span
        k = depth - len(wrapped[first]) - 1
        left = sum(widths[:first]) + 2 * first
        span = sum(widths[first:last + 1]) + 2 * (last - first)
        line = out[k].ljust(left + span)
        out[k] = line[:left] + label.center(span, "-" if span > len(label) + 2 else " ") + line[left + span:]
    out = [line.rstrip() for line in out]
    out.append("  ".join("-" * w for w in widths))
    out += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(out)
