"""A side of a comparison read from where it lives: a run folder, a recommendations document, a recommender.

A run folder holds more than its document: ``records.jsonl`` has every request, so the latency tails are
counted exactly (``core.step_figures.compute_step_figures`` with every value kept, the very figures the
document's rung was computed from, not the 16 largest the document keeps). A document file or a recommender's
URL has only the document: its tails are bounded (``satbench.compare.tails``). A folder whose records or
manifest cannot be read is compared from its document, and the run says so (``Loaded.note``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from satbench.answer.models import RecommendationsDocument
from satbench.compare.judge import Run, RungTails

__all__ = ["Loaded", "full_tails", "load_document", "load_run"]


@dataclass(frozen=True, slots=True)
class Loaded:
    run: Run
    note: str | None = None


def load_document(where: str) -> RecommendationsDocument:
    """The document at ``where`` (module docstring), validated (a v1 one said in v2); ``ValueError`` in one
    line naming it."""
    from satbench.answer.document import read_document

    if where.startswith(("http://", "https://")):
        from satbench.fleet.remeasure import read_document as fetch_document

        try:
            return read_document(fetch_document(where))
        except ValueError as exc:
            raise ValueError(str(exc).replace("--remeasure", "compare", 1)) from None
    path = Path(where)
    if path.is_dir():
        path = path / "recommendations.json"
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{where}: no recommendations document there (a run folder's recommendations.json, a "
                         "document file, or a recommender's URL)") from None
    except (OSError, ValueError) as exc:
        raise ValueError(f"{where}: cannot read {path}: {exc}") from None
    try:
        return read_document(body)
    except ValueError as exc:
        raise ValueError(f"{where}: {path}: {exc}") from None


def full_tails(folder: Path) -> dict[str, dict[int, RungTails]]:
    """Every closed-loop rung's tails with every value, from the folder's manifest and records; ``OSError`` or
    ``ValueError`` where either cannot be read."""
    from satbench.core.manifest import read_manifest
    from satbench.core.records import RequestRecord, read_records
    from satbench.core.step_figures import compute_step_figures

    manifest = read_manifest(folder / "manifest.json")
    groups: dict[tuple[str, int], list[RequestRecord]] = {}
    for rec in read_records(folder / "records.jsonl"):
        if rec.rate_rps is None and rec.run_id in ("", manifest.run_id):
            groups.setdefault((rec.lane, rec.concurrency), []).append(rec)
    out: dict[str, dict[int, RungTails]] = {}
    for window in manifest.steps:
        if window.rate_rps is not None or window.end <= window.start:
            continue
        fig = compute_step_figures(groups.get((window.lane, window.concurrency), []), window, tail_size=None)
        out.setdefault(window.lane, {})[window.concurrency] = RungTails(fig.ttft_tail, fig.latency_tail,
                                                                        fig.pause_excess_tail)
    return out


def load_run(where: str) -> Loaded:
    """One run of a side: its document, and its full tails where ``where`` is a run folder with records."""
    document = load_document(where)
    folder = Path(where)
    if where.startswith(("http://", "https://")) or not folder.is_dir():
        return Loaded(Run(document))
    if not (folder / "records.jsonl").is_file():
        return Loaded(Run(document), f"{where}: no records.jsonl, tails bounded from the document")
    try:
        return Loaded(Run(document, full_tails(folder)))
    except (OSError, ValueError) as exc:
        return Loaded(Run(document), f"{where}: records not read ({str(exc).splitlines()[0][:160]}), tails "
                                     "bounded from the document")
