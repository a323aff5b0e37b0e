"""What pruning saves: a 12-candidate tune on the simulator, pruned against the full grid.

Tunes one simulator lane (``--profile``, default dense) over parallel {2, 4, 8, 16} x ubatch {128, 256, 512}
(batch = ubatch) twice, in-process and over real HTTP: once with the search's pruning (``satbench.tune.search``)
and once walking the whole grid (``[tune] prune = false``), and prints for each the wall time, the candidates
walked and the answer, then the ratio of walks (goal: at most half) and whether the answers agree (goal: the
same candidate; where they differ, whether the full grid's winner is significantly better than the pruned
one's, which is what "the same answer" can mean on measured, noisy throughputs).

Usage: ``python bench/tune_cost.py [--profile dense] [--warmup 1.0] [--window 3.0] [--max-window 6.0]
[--short] [--out DIR]``; ``--short`` is warm-up 0.3 s and windows of 2-4 s (about 3 minutes instead of about
6). Benchmarks report, tests assert: it exits 0 either way.
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from pathlib import Path

from satbench.tune.config import load_tune_config
from satbench.tune.models import TuneCandidate, TuneLane
from satbench.tune.run import run_tune


def _tune(args: argparse.Namespace, out: Path, prune: bool) -> tuple[float, TuneLane]:
    overrides = {
        "lanes": [{"name": "lane", "profile": args.profile}],
        "loadgen.warmup_s": args.warmup, "loadgen.min_window_s": args.window,
        "loadgen.max_window_s": max(args.max_window, args.window), "loadgen.drain_timeout_s": 1.0,
        "loadgen.min_requests": 10,
        "loadgen.workload.prompt_tokens": {"kind": "fixed", "value": 128},
        "loadgen.workload.output_tokens": {"kind": "uniform", "low": 24, "high": 40},
        "loadgen.workload.prefill_probe_share": 0.1, "loadgen.workload.prefill_probe_tokens": 1024,
        "tune.parallel": [2, 4, 8, 16], "tune.ubatch": [128, 256, 512], "tune.prune": prune,
    }
    setup = load_tune_config(None, overrides)
    started = time.monotonic()
    result = run_tune(setup, command=["bench/tune_cost.py"], out_dir=out, say=lambda _: None)
    (lane,) = result.document.lanes.values()  # the one lane tuned
    return time.monotonic() - started, lane


def _line(what: str, wall: float, lane: TuneLane) -> str:
    return (f"{what:<10} wall {wall:6.1f} s  walked {lane.walked:2d} of {lane.grid.size}  "
            f"winner {'-' if lane.winner is None else lane.winner.id} c={lane.recommended_concurrency} "
            f"{(lane.throughput_tok_s or 0):.1f} tok/s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="dense")
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--window", type=float, default=3.0)
    parser.add_argument("--max-window", type=float, default=6.0)
    parser.add_argument("--short", action="store_true", help="warm-up 0.3 s, windows 2-4 s")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.short:
        args.warmup, args.window, args.max_window = 0.3, 2.0, 4.0
    out = args.out or Path(tempfile.mkdtemp(prefix="tune-cost-"))
    pruned_wall, pruned = _tune(args, out, prune=True)
    print(_line("pruned", pruned_wall, pruned), flush=True)
    full_wall, full = _tune(args, out, prune=False)
    print(_line("full grid", full_wall, full))
    print(f"walks: {pruned.walked}/{full.walked} = {pruned.walked / max(full.walked, 1):.2f} "
          f"(goal <= 0.50); wall: {pruned_wall / full_wall:.2f} of the full grid's")
    a, b = pruned.winner, full.winner
    if a is None or b is None:
        print("same answer: no (a search found no feasible candidate)")
        return 0
    same = a.id == b.id
    full_entry = next(c for c in full.candidates if c.id == a.id)
    detail = ""
    if not same and full_entry.throughput_tok_s is not None and b.throughput_tok_s is not None:
        def half(c: TuneCandidate) -> float:
            ci = c.throughput_ci_tok_s
            return 0.0 if ci is None else (ci[1] - ci[0]) / 2

        margin = b.throughput_tok_s - full_entry.throughput_tok_s
        unc = math.hypot(half(b), half(full_entry))
        detail = (f" (the full grid measured the pruned winner at {full_entry.throughput_tok_s:.1f} tok/s, "
                  f"{margin:+.1f} ± {unc:.1f} below its own winner: "
                  f"{'significant' if abs(margin) > unc else 'not significant'})")
    print(f"same answer: {'yes' if same else 'no'}{detail}")
    print(f"tune folders: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
