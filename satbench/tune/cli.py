"""``satbench tune --config FILE [--out DIR] [--resume RUN_DIR] [--set KEY=VALUE]``: find each lane's server
settings, not only its concurrency (see ``satbench.tune.run`` and docs/tune.md).

Exit status: 0 every tuned lane has a feasible candidate, 1 some lane has none (or a part failed), 2 bad input
(refused in one line naming the setting, before anything starts), 130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

__all__ = ["configure", "main"]

DESCRIPTION = """\
Each candidate (slots -np, batch -b, micro-batch -ub, context -c) gets a ladder walk judged by the same
verdicts as satbench run; the answer per lane is the candidate with the most throughput at its recommended
concurrency with every hard constraint held (fewer slots win unless the best beats them significantly and by
the policy's min_gain_per_doubling per doubling of slots), with the runner-up and the margin.

The default grid is parallel 2,4,8,16 x ubatch 128,256,512 with batch = ubatch (llama-server runs one batch
of -b tokens per decode, so -b sets the decode pause); [tune] batch lists batch values apart (>= ubatch).

The search does not walk the grid blindly. Each walk starts at c = 1, 2 and doubles only while a rung still
pays by the policy, up to 2 x the slots. Batches are walked from largest to smallest, slots ascending, and a
candidate a measured one dominates is skipped (and recorded with its dominator), assuming that
  - slots past the knee buy nothing: an answer below the slot count (not the slot cap) skips more slots at
    the same batch;
  - a decode pause grows with the batch: a batch that holds every constraint skips the smaller batches at
    its slots; a batch flagged for decode starvation or the ITL objective at c <= slots skips as large a
    batch with as many or more slots.
[tune] prune = false walks the whole grid."""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = DESCRIPTION
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--config", type=Path, default=None,
                        help="session config (TOML) with a [tune] table (see docs/tune.md)")
    parser.add_argument("--out", type=Path, default=None, help="folder for tune folders (default: runs)")
    parser.add_argument("--resume", type=Path, default=None, metavar="RUN_DIR",
                        help="an earlier tune folder: candidates with a recommendations.json are re-read, not walked")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config value by dotted path, value as TOML (e.g. tune.parallel=[2,4])")


def main(args: argparse.Namespace) -> int:
    from loadgen.cli import parse_overrides
    from satbench.tune.config import TuneConfigError, load_tune_config
    from satbench.tune.run import run_tune

    try:
        overrides: dict[str, Any] = parse_overrides(args.set)
        setup = load_tune_config(args.config, overrides)
        if args.resume is not None and not args.resume.is_dir():
            raise ValueError(f"--resume: {args.resume} is not a tune folder")
    except (TuneConfigError, ValueError) as exc:
        print(f"satbench tune: {exc}", file=sys.stderr)
        return 2
    command = [sys.executable, "-m", "satbench.cli", *sys.argv[1:]] if sys.argv else ["satbench", "tune"]
    try:
        result = run_tune(setup, command=command, out_dir=args.out, resume=args.resume,
                          say=lambda m: print(m, flush=True))
    except Exception as exc:  # every child is already stopped; say why in one line
        print(f"satbench tune: failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return result.exit_code
