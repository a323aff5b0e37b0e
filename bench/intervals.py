"""Coverage and width of the throughput interval (``core.statistics.batch_mean_estimate``) under autocorrelation,
beside the rule it replaced (batches merged until their lag-1 correlation looks insignificant, then the plain
Student interval) and the plain Student interval of the batches: the floor any honest interval is measured
against, since at no correlation it is exact.

Batch rates are AR(1) around 100: ``direct`` at the batch level, ``ticks`` averaged from 8 fine ticks per batch
(the shape of a token stream cut into batches). Coverage is the share of windows whose nominal 95 % interval
holds the mean; width the median half-width, and its ratio to the plain interval's.

    .venv/bin/python bench/intervals.py [--windows 4000] [--batches 32]
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from satbench.core.statistics import autocorrelated_batch_ci, batch_means_ci, lag1_autocorrelation


def merged_ci(rates: Sequence[float], min_batches: int = 5) -> tuple[float, float] | None:
    """The rule this replaced (Fishman's LBATCH, merging pairwise until r1 < 2/sqrt(k))."""
    batches = list(rates)
    while len(batches) >= max(2, min_batches):
        r1 = lag1_autocorrelation(batches)
        if r1 is None or r1 < 2.0 / math.sqrt(len(batches)):
            return batch_means_ci(batches)
        batches = [(a + b) / 2 for a, b in zip(batches[::2], batches[1::2], strict=False)]
    return None


def ar1(rng: random.Random, k: int, rho: float, ticks: int) -> list[float]:
    phi = rho if rho < 0 else rho ** (1 / ticks)
    x = rng.gauss(0, 1)
    out = []
    for _ in range(k):
        total = 0.0
        for _ in range(ticks):
            x = phi * x + rng.gauss(0, math.sqrt(1 - phi * phi))
            total += x
        out.append(100 + total / ticks)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=4000)
    parser.add_argument("--batches", type=int, default=32)
    args = parser.parse_args()
    methods = {"autocorrelated": autocorrelated_batch_ci, "merged (old)": merged_ci, "plain": batch_means_ci}
    print(f"{args.windows} windows of {args.batches} batches; nominal 95 %")
    print(f"{'shape':7s} {'r':>5s}  " + "  ".join(f"{m:>26s}" for m in methods))
    for ticks, shape in ((1, "direct"), (8, "ticks")):
        for rho in (-0.5, 0.0, 0.5, 0.8, 0.9, 0.95):
            rng = random.Random(f"{shape}:{rho}")
            hits = dict.fromkeys(methods, 0)
            seen = dict.fromkeys(methods, 0)
            widths: dict[str, list[float]] = {m: [] for m in methods}
            for _ in range(args.windows):
                rates = ar1(rng, args.batches, rho, ticks)
                for name, method in methods.items():
                    ci = method(rates)
                    if ci is None:
                        continue
                    seen[name] += 1
                    hits[name] += ci[0] <= 100 <= ci[1]
                    widths[name].append((ci[1] - ci[0]) / 2)
            floor = statistics.median(widths["plain"])
            cells = []
            for name in methods:
                cover = hits[name] / max(1, seen[name])
                width = statistics.median(widths[name]) if widths[name] else math.nan
                cells.append(f"{cover:6.1%} hw {width:6.3f} ({width / floor:4.2f}x)")
            print(f"{shape:7s} {rho:5.2f}  " + "  ".join(f"{c:>26s}" for c in cells))


if __name__ == "__main__":
    main()
