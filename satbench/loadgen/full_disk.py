"""A walk whose evidence cannot be written (a full disk) ends, its run folder kept and marked partial.

A disk that fills mid-walk (``core.records.RecordsNotWritten``, or the manifest's own write failing:
``EvidenceNotWritten``) ends the walk: the rung in flight is left out of the manifest (its records are cut
short), the manifest says why (``cut_short``, ``finished_at`` null: a partial run, ``core.manifest``) and
``WalkCutShort`` says it in one line. A reserve of ``SPACE_RESERVE_BYTES`` held in the run folder while the
walk runs (``hold_reserve``) is given back first (``give_back_reserve``), so that last manifest can be written
on a disk with no byte left.
"""

from __future__ import annotations

import os
from pathlib import Path

from satbench.core.records import RecordsNotWritten, RecordsWriter

__all__ = ["SPACE_RESERVE_BYTES", "EvidenceNotWritten", "WalkCutShort", "check_written", "cut_short_cause",
           "give_back_reserve", "hold_reserve"]

SPACE_RESERVE_BYTES = 1 << 20  # a run's last manifest and steps.json, written when the disk is full
_RESERVE = ".space-reserve"


class WalkCutShort(RuntimeError):
    """The walk ended before its ladder did, its evidence could not be written (module docstring); the run
    folder holds every whole record and finished rung, marked partial."""


class EvidenceNotWritten(OSError):
    """``steps.json`` or ``manifest.json`` could not be written (a full disk)."""


def cut_short_cause(exc: BaseException) -> OSError | None:
    """The evidence write that failed inside ``exc`` (an exception group of parallel nodes too), or None."""
    if isinstance(exc, (RecordsNotWritten, EvidenceNotWritten)):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            if (found := cut_short_cause(inner)) is not None:
                return found
    return None


def check_written(writer: RecordsWriter) -> None:
    """Raises the records write that failed during the rung just run: the rung is not whole, so it ends the walk
    (its users swallowed the error as each one stopped)."""
    if writer.failed is not None:
        raise writer.failed


def hold_reserve(out_dir: Path) -> None:
    """Holds ``SPACE_RESERVE_BYTES`` of the run folder's disk (module docstring); a disk without them walks
    without a reserve."""
    path = out_dir / _RESERVE
    try:
        with path.open("wb") as fh:
            os.posix_fallocate(fh.fileno(), 0, SPACE_RESERVE_BYTES)
    except OSError:
        path.unlink(missing_ok=True)


def give_back_reserve(out_dir: Path) -> None:
    (out_dir / _RESERVE).unlink(missing_ok=True)
