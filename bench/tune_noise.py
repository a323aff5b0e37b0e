"""Pruning and the answer under noise: pruned search against the full grid on simulated noisy lanes.

Each lane is ``testkit.tune_grids``'s: a known curve walked with noise (throughput's relative standard
error ``--noise``, a chance pause flag with probability ``flip``, an error burst with ``blip``), every
candidate drawn once and seen by both searches. For each noise level it prints

- how many lanes' pruned and full-grid winners differ (goal at the audit's levels, +-3 % with 0-10 % flips
  and blips: at most 5 %), how many of those are more than 10 % slower by the curve (goal: none), and the
  worst such ratio;
- the walks the pruning needed, against the full grid's (the floor: the full grid is measured in the same
  run on the same lanes);
- the winners' true throughput over the best true throughput of the grid (the cost of falling back to the
  cheaper candidate where a comparison is not significant; a real tune measures longer there first).

Usage: ``python bench/tune_noise.py [--lanes 400] [--noise 0.03 0.05 0.08]``. Benchmarks report, tests
assert: it exits 0 either way.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from satbench.tune.answer import choose
from satbench.tune.grid import grid
from satbench.tune.search import search
from testkit.tune_grids import lane

CANDIDATES = grid([2, 4, 8, 16], [(2048, 2048), (512, 512), (256, 256), (128, 128)], 1024)


def level(lanes: int, noise: float, flip: float, blip: float) -> str:
    differ = slower = walked = 0
    worst, quality = 1.0, []
    for seed in range(lanes):
        one = lane(seed, noise=noise, flip=flip, blip=blip)
        pruned = search(CANDIDATES, one.measure)
        full = search(CANDIDATES, one.measure, prune=False)
        a, b = choose(pruned, 0.1).winner, choose(full, 0.1).winner
        walked += sum(o.state == "measured" for o in pruned)
        assert a is not None and b is not None
        best = max(one.true_throughput(c) for c in CANDIDATES)
        quality.append(one.true_throughput(a.candidate) / best)
        if a.candidate != b.candidate:
            differ += 1
            ratio = one.true_throughput(a.candidate) / one.true_throughput(b.candidate)
            worst = min(worst, ratio)
            slower += ratio < 1 / 1.1
    return (f"noise {noise:4.0%} flip {flip:3.0%} blip {blip:3.0%}: winners differ {differ:3d}/{lanes} "
            f"({differ / lanes:5.1%}), >10% slower {slower:2d}, worst ratio {worst:.3f}; walks "
            f"{walked / lanes:4.1f} of {len(CANDIDATES)} ({walked / lanes / len(CANDIDATES):.0%} of the full "
            f"grid); winner / best by the curve: mean {sum(quality) / lanes:.3f}, min {min(quality):.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lanes", type=int, default=400)
    parser.add_argument("--noise", type=float, nargs="+", default=[0.03, 0.05, 0.08])
    args = parser.parse_args()
    started = time.monotonic()
    for noise in args.noise:
        for flip, blip in ((0.0, 0.0), (0.1, 0.0), (0.0, 0.1), (0.1, 0.1)):
            print(level(args.lanes, noise, flip, blip), flush=True)
    print(f"{time.monotonic() - started:.1f} s")


if __name__ == "__main__":
    main()
