"""The run folder's CSV exports: ``steps.csv`` (one row per lane and rung, every figure, units in the column
names: seconds as ms, the checks per rung from the document) and ``records.csv`` (one row per request of
``records.jsonl``; ITL as count, mean and max in ms), written by ``write_csv`` in a fixed column order
(``STEPS_COLUMNS``, ``RECORDS_COLUMNS``; the step figures' columns, names, order and scale, read from their
declarations in ``core.figures``). Cells are text: empty for unknown, ``true``/``false`` for booleans,
floats with ten significant digits, so the same run gives the same bytes.

A text cell is escaped against spreadsheet formula injection (OWASP, "CSV Injection"): one that begins with
``=``, ``+``, ``-``, ``@``, a tab or a carriage return gets a leading ``'``, so a runtime's error text such as
``=HYPERLINK(...)`` opens as text, never as a formula. Only text is escaped: ``_cell`` marks the cells it
formats from a number (``NumberCell``), and ``write_csv`` writes those as they are, so ``-0.05`` stays a
number; every other cell, including one a future column adds without ``_cell``, is text and escaped. A cell
holding a comma, a quote or a line break (a carriage return too) is quoted, RFC 4180's way."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from satbench.core.figures import FIGURES
from satbench.core.records import OUTCOMES, read_records
from satbench.report.data import RunReport
from satbench.report.judgments import CHECK_NAMES, RungJudgment, verdict_label

__all__ = ["FORMULA_LEADS", "RECORDS_COLUMNS", "STEPS_COLUMNS", "NumberCell", "escape_text", "records_rows",
           "steps_rows", "write_csv"]


_STATS = ("mean", "p50", "p95", "p99")
_ERROR_OUTCOMES = tuple(o for o in OUTCOMES if o != "ok")


def _figure_columns() -> tuple[tuple[str, str, str | None, float], ...]:
    """The figure columns, read from ``StepFigures``' declarations (``core.figures.Figure``) in their
    ``column`` order: (column, attribute, statistic or None, scale). A figure in seconds becomes ms (scale
    1000, ``_s`` in its name read ``_ms``); ratios, shares, counts and the rest stay as they are. A quantile
    gives one column per statistic, ``{csv}_ms_{stat}``, its ``csv`` name its field's without ``_s``."""
    out: list[tuple[str, str, str | None, float]] = []
    for name in sorted((n for n, f in FIGURES.items() if f.column is not None), key=lambda n: FIGURES[n].column or 0):
        fig = FIGURES[name]
        seconds = fig.unit == "s"
        scale = 1000.0 if seconds else 1.0
        if fig.kind == "quantile":
            short = fig.csv or name.removesuffix("_s")
            out.extend((f"{short}_ms_{stat}", name, stat, scale) for stat in _STATS)
        else:
            out.append((fig.csv or (name.removesuffix("_s") + "_ms" if seconds else name), name, None, scale))
    return tuple(out)


_FIGURE_COLUMNS = _figure_columns()
_MEMORY_COLUMNS = (("gpu_mem_max_bytes", "gpu_max"), ("gpu_mem_total_bytes", "gpu_total"),
                   ("gpu_mem_sum_max_bytes", "gpu_sum_max"), ("gpu_mem_sum_total_bytes", "gpu_sum_total"),
                   ("gpu_count", "gpu_count"), ("gpu_names", "gpu_names"), ("gpu_simulated", "gpu_simulated"),
                   ("host_rss_max_bytes", "host_rss_max"))
_ENERGY_COLUMNS = (("energy_scope", "scope"), ("gpu_energy_source", "gpu_source"), ("gpu_joules", "gpu_joules"),
                   ("gpu_watts", "gpu_watts"), ("cpu_joules", "cpu_joules"), ("cpu_watts", "cpu_watts"),
                   ("joules_per_token", "joules_per_token"), ("tokens_per_joule", "tokens_per_joule"))

STEPS_COLUMNS: tuple[str, ...] = (
    "run_id", "lane", "concurrency", "slots", "valid", "reason", "usable", "unusable_reason", "recommended",
    "saturation", "lane_status", "window_s", "requests", "errors", "error_ratio",
    *(f"errors_{o}" for o in _ERROR_OUTCOMES),
    "output_tok_s", "output_tok_s_ci_lo", "output_tok_s_ci_hi", "input_tok_s", "total_tok_s", "requests_per_s",
    *(name for name, _, _, _ in _FIGURE_COLUMNS),
    *(name for name, _ in _MEMORY_COLUMNS),
    *(name for name, _ in _ENERGY_COLUMNS),
    "gain_per_doubling", "gain_per_doubling_lo", "gain_per_doubling_hi", "verdicts", "violations",
    *(f"{check}_{part}" for check in CHECK_NAMES for part in ("status", "measured", "limit", "detail")),
)

RECORDS_COLUMNS: tuple[str, ...] = (
    "run_id", "lane", "concurrency", "user", "request_id", "phase", "sent_at_unix_s", "outcome", "status",
    "error", "retried", "prompt_tokens", "output_tokens", "ttft_ms", "e2e_ms", "queue_ms", "tpot_ms",
    "itl_count", "itl_mean_ms", "itl_max_ms", "cached_prompt_tokens", "draft_tokens", "draft_accepted_tokens",
)


_NEEDS_QUOTES = (",", '"', "\n", "\r")
FORMULA_LEADS = ("=", "+", "-", "@", "\t", "\r")  # what a spreadsheet may read as the start of a formula


class NumberCell(str):
    """A cell formatted from a number: written as it is (a negative number stays a number)."""

    __slots__ = ()


def escape_text(text: str) -> str:
    """A text cell a spreadsheet opens as text: a leading ``'`` where it begins with one of ``FORMULA_LEADS``."""
    return "'" + text if text.startswith(FORMULA_LEADS) else text


def _cell(value: Any, scale: float = 1.0) -> str:
    """One CSV cell: empty for unknown, ``true``/``false``, integers as they are, floats to ten digits (those
    two as a ``NumberCell``), anything else as its text."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) and scale == 1.0:
        return NumberCell(value)
    if isinstance(value, int | float):
        scaled = float(value) * scale
        return "" if math.isnan(scaled) else NumberCell(format(scaled, ".10g"))
    return str(value)


def steps_rows(report: RunReport) -> Iterator[dict[str, str]]:
    """One row per lane and rung, ``STEPS_COLUMNS`` as keys: every figure of ``StepFigures`` flattened
    (seconds as ms), the lane's answer where it concerns the rung, and the document's judgments. The
    checks' ``measured`` and ``limit`` are the document's numbers (seconds for waits and pauses, else the
    ratio or share the check states in its ``detail``)."""
    for lane in report.lanes:
        for step in lane.steps:
            judged = lane.judgments.get(step.concurrency) or RungJudgment()
            ci = step.throughput_ci_tok_s
            gain = judged.gain_interval
            row: dict[str, str] = {
                "run_id": report.run_id, "lane": lane.lane, "concurrency": _cell(step.concurrency),
                "slots": _cell(lane.slots), "valid": _cell(step.valid), "reason": _cell(step.reason),
                "usable": _cell(judged.usable), "unusable_reason": _cell(judged.unusable_reason),
                "recommended": _cell(lane.recommended == step.concurrency),
                "saturation": _cell(lane.saturation == step.concurrency), "lane_status": lane.status,
                "window_s": _cell(step.window_s), "requests": _cell(step.requests), "errors": _cell(step.errors),
                "error_ratio": _cell(step.error_ratio),
                **{f"errors_{o}": _cell(step.errors_by_outcome.get(o, 0)) for o in _ERROR_OUTCOMES},
                "output_tok_s": _cell(step.throughput_tok_s),
                "output_tok_s_ci_lo": _cell(None if ci is None else ci[0]),
                "output_tok_s_ci_hi": _cell(None if ci is None else ci[1]),
                "input_tok_s": _cell(step.input_throughput_tok_s),
                "total_tok_s": _cell(step.total_throughput_tok_s),
                "requests_per_s": _cell(step.requests_per_s),
            }
            for column, attr, stat, scale in _FIGURE_COLUMNS:
                value = getattr(step, attr)
                row[column] = _cell(value if stat is None else getattr(value, stat), scale)
            row.update({name: _cell(getattr(step.memory_bytes, attr)) for name, attr in _MEMORY_COLUMNS})
            row.update({name: _cell(getattr(step.energy, attr)) for name, attr in _ENERGY_COLUMNS})
            row.update({
                "gain_per_doubling": _cell(judged.gain_per_doubling),
                "gain_per_doubling_lo": _cell(None if gain is None else gain[0]),
                "gain_per_doubling_hi": _cell(None if gain is None else gain[1]),
                "verdicts": verdict_label(lane.checks.get(step.concurrency)),
                "violations": " ".join(v.name for v in judged.violations),
            })
            for check in CHECK_NAMES:
                found = judged.checks.get(check)
                row.update({
                    f"{check}_status": "" if found is None else found.status,
                    f"{check}_measured": _cell(None if found is None else found.measured),
                    f"{check}_limit": _cell(None if found is None else found.limit),
                    f"{check}_detail": "" if found is None else found.detail,
                })
            yield row


def records_rows(path: Path) -> Iterator[dict[str, str]]:
    """One row per request of ``records.jsonl`` (in file order), ``RECORDS_COLUMNS`` as keys: times in ms,
    the inter-token gaps as their count, mean and maximum instead of the whole list."""
    for rec in read_records(path):
        gaps = rec.itl_s
        yield {
            "run_id": rec.run_id, "lane": rec.lane, "concurrency": _cell(rec.concurrency), "user": _cell(rec.user),
            "request_id": rec.request_id, "phase": rec.phase, "sent_at_unix_s": NumberCell(repr(float(rec.sent_at))),
            "outcome": rec.outcome, "status": _cell(rec.status), "error": _cell(rec.error),
            "retried": _cell(rec.retried), "prompt_tokens": _cell(rec.prompt_tokens),
            "output_tokens": _cell(rec.output_tokens), "ttft_ms": _cell(rec.ttft_s, 1000.0),
            "e2e_ms": _cell(rec.e2e_s, 1000.0), "queue_ms": _cell(rec.queue_s, 1000.0),
            "tpot_ms": _cell(rec.tpot_s, 1000.0), "itl_count": _cell(len(gaps)),
            "itl_mean_ms": _cell(sum(gaps) / len(gaps) if gaps else None, 1000.0),
            "itl_max_ms": _cell(max(gaps) if gaps else None, 1000.0),
            "cached_prompt_tokens": _cell(rec.cached_prompt_tokens), "draft_tokens": _cell(rec.draft_tokens),
            "draft_accepted_tokens": _cell(rec.draft_accepted_tokens),
        }


def _quoted(cell: str) -> str:
    """RFC 4180 quoting where a cell needs it: a comma, a quote, or a line break of either kind (the ``csv``
    module's writer, with ``\\n`` line ends, leaves a bare carriage return unquoted, and a reader then ends the
    row there)."""
    if any(c in cell for c in _NEEDS_QUOTES):
        return '"' + cell.replace('"', '""') + '"'
    return cell


def write_csv(path: Path, columns: Sequence[str], rows: Iterable[dict[str, str]]) -> Path:
    """Writes ``rows`` (dicts keyed by ``columns``) as CSV with a header line, in that column order, ``\\n``
    line ends; every cell but a ``NumberCell`` is text, escaped (``escape_text``)."""
    names = list(columns)
    known = set(names)
    with path.open("w", encoding="utf-8", newline="") as fh:
        fh.write(",".join(_quoted(name) for name in names) + "\n")
        for row in rows:
            if extra := row.keys() - known:
                raise ValueError(f"{path.name}: cells for no column: {sorted(extra)}")
            cells = (row.get(name, "") for name in names)
            fh.write(",".join(_quoted(c if isinstance(c, NumberCell) else escape_text(c)) for c in cells) + "\n")
    return path
