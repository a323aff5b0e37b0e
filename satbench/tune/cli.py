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
Each candidate (slots -np, batch -b, micro-batch -ub, context -c, KV layout) gets a ladder walk judged by the
same verdicts as satbench run. The answer per lane is found pairwise from the cheapest candidate (fewest
slots, the larger batch, split KV): a challenger replaces the holder only where its throughput is
significantly higher and, with more slots, by the policy's min_gain_per_doubling per doubling measured from
that holder. Where that comparison is not significant, the contenders are walked again with longer windows
(tune.evidence_walks) before the cheaper candidate stands by default, and the tune says so.

Before the grid: each slot's context from the server's own count of the longest request (+ output +
tune.ctx_margin), and the model's memory (KV bytes a token from the GGUF, weights) against tune.memory_bytes
or the GPUs seen: a candidate that cannot fit is skipped before a start. After each start the server's
/props and log are read back; another slot count, context or KV layout, or layers left on the CPU, refuse it.
A lane's server_args may not set what the tune sets (-np, -c, -b, -ub, -kvu, --fit).

The default grid is parallel 2,4,8,16 x ubatch 128,256,512 with batch = ubatch (llama-server runs one batch
of -b tokens per decode, so -b sets the decode pause); [tune] batch lists batch values apart (>= ubatch).

The search does not walk the grid blindly. Each walk starts at c = 1, 2 and doubles only while a rung still
pays by the policy, up to 2 x the slots. Batches are walked from largest to smallest, slots ascending, and a
candidate a measured one dominates is skipped (and recorded with its dominator), on significant evidence only:
  - slots past the knee buy nothing: an answer below the slot count on a plateau its interval shows (or a
    latency objective broken where every user had a slot) skips more slots at the same batch;
  - a decode pause grows with the batch: a batch that held every constraint, its pauses shown bounded,
    skips the smaller batches at its slots; a pause flag whose count stands at the grid's level (Bonferroni)
    skips as large a batch with as many or more slots.
[tune] prune = false walks the whole grid. --resume re-reads only candidates whose fingerprint matches."""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = DESCRIPTION
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--config", type=Path, default=None,
                        help="session config (TOML) with a [tune] table (see docs/tune.md)")
    parser.add_argument("--out", type=Path, default=None, help="folder for tune folders (default: runs)")
    parser.add_argument("--resume", type=Path, default=None, metavar="RUN_DIR",
                        help="an earlier tune folder: candidates whose fingerprint matches are re-read, not walked")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config value by dotted path, value as TOML (e.g. tune.parallel=[2,4])")


def main(args: argparse.Namespace) -> int:
    from satbench.loadgen.cli import parse_overrides
    from satbench.loadgen.inputs import load_inputs
    from satbench.tune.config import TuneConfigError, load_tune_config
    from satbench.tune.run import run_tune

    try:
        overrides: dict[str, Any] = parse_overrides(args.set)
        setup = load_tune_config(args.config, overrides)
        load_inputs(setup.session.loadgen)  # a bad trace or dataset file is refused before any runtime starts
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
