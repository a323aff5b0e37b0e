"""``satbench report RUN_DIR``: rebuild report.html, README.md, steps.csv and records.csv from a run folder's
raw files."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = ["configure", "main"]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a runs/<run_id>/ folder")


def main(args: argparse.Namespace) -> int:
    from satbench.report.render import write_report

    run_dir: Path = args.run_dir
    if not run_dir.is_dir():
        print(f"satbench report: {run_dir} is not a folder", file=sys.stderr)
        return 2
    try:
        written = write_report(run_dir)
    except (ValueError, OSError) as exc:
        print(f"satbench report: {exc}", file=sys.stderr)
        return 1
    print("wrote " + ", ".join(str(p) for p in written))
    return 0
