"""Step figures from a run folder's raw records: the offline source, exact where Prometheus is binned.

Reads ``records.jsonl`` once (cutting, and saying in the notes, what is not a whole record: ``core.records``),
groups the records by rung (lane, concurrency, rate) and hands each step window to
``core.step_figures.compute_step_figures``, the very function the load generator uses for
``steps.json``: quantiles are exact order statistics, not bucket interpolations. Server-side figures
(occupancy, queue depth, memory) are not in the records and stay ``None``.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from satbench.core.figures import StepFigures
from satbench.core.manifest import RunManifest, StepWindow
from satbench.core.objectives import Objectives
from satbench.core.records import RequestRecord, read_records_file
from satbench.core.step_figures import compute_step_figures
from satbench.recommender.errors import RecordsUnavailable

__all__ = ["RECORDS_FILE", "figures_from_records", "load_records", "unusable_window_figures"]

RECORDS_FILE = "records.jsonl"


def unusable_window_figures(window: StepWindow, reason: str) -> StepFigures:
    return StepFigures(lane=window.lane, concurrency=window.concurrency, window_s=max(0.0, window.duration_s),
                       requests=0, errors=0, throughput_tok_s=0.0, requests_per_s=0.0, valid=False,
                       reason=reason, rate_rps=window.rate_rps)


def load_records(run_dir: Path, notes: list[str] | None = None) -> list[RequestRecord]:
    """Every whole record of the run folder; what was cut (a torn last line: ``core.records``) is said in
    ``notes``."""
    path = run_dir / RECORDS_FILE
    try:
        read = read_records_file(path)
    except OSError as exc:
        raise RecordsUnavailable(f"cannot read {path.name} in the run folder: {exc.strerror or exc}") from exc
    said = read.said(path.name)
    if said is not None and notes is not None:
        notes.append(f"{said}: cut at its last whole line")
    return read.records


def figures_from_records(manifest: RunManifest, records: list[RequestRecord], objectives: Objectives | None = None
                         ) -> dict[str, list[StepFigures]]:
    """Exact figures of every step window of the manifest, per lane (goodput where ``objectives`` are given)."""
    groups: dict[tuple[str, int, float | None], list[RequestRecord]] = defaultdict(list)
    for rec in records:
        if rec.run_id in ("", manifest.run_id):
            groups[(rec.lane, rec.concurrency, rec.rate_rps)].append(rec)
    out: dict[str, list[StepFigures]] = {lane: [] for lane in manifest.lane_names()}
    for window in manifest.steps:
        if window.end <= window.start:
            fig = unusable_window_figures(window, "empty step window (end <= start)")
        else:
            fig = compute_step_figures(groups.get((window.lane, window.concurrency, window.rate_rps), []), window,
                                       objectives=objectives)
        out.setdefault(window.lane, []).append(fig)
    return out
