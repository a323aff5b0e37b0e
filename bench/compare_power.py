"""The power and false-alarm rate of ``satbench compare``'s tail test at the rung sizes a session has.

Each repetition draws two rungs of ``n`` per-request latencies (lognormal, sigma 0.4 and 1.0: a tight and a
wide TTFT), B's scaled by ``factor`` (1.0: the same deployment; the truth is the factor, set here), and judges
them as compare does at four tests a lane (``alpha = 0.05 / 4``): B's TTFT p95 worse beyond the 10 % floor and
significant. Three readings of the same draws:

- ``records``: every value kept (a run folder's records.jsonl): the exact counts;
- ``document``: only what a document keeps (16 values and p50/p95/p99 a rung), the counts' bounds honoured;
- ``old``: the document's 16 values read as exact counts (before: the "at least" flag dropped);

and the normal approximation ``compare.tails.tail_power`` of the power to see B's p95 at A's p90 (the figure a
verdict prints), beside the simulated power for that very shift (B's share above A's p95 doubled).

    .venv/bin/python bench/compare_power.py [--reps 400]
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from satbench.compare.tails import TailSide, exceedance_test, tail_power
from satbench.core.figures import Tail
from satbench.core.statistics import exceedances_differ, quantiles

ALPHA = 0.05 / 4
FLOOR = 0.10
SIZES = (60, 120, 200, 320, 400, 800)


def _sides(values: list[float]) -> dict[str, TailSide]:
    q = quantiles(values)
    return {"records": TailSide(tuple(sorted(values, reverse=True))),
            "document": TailSide(None, ((Tail.of(values), q),))}


def _fails(a: list[float], b: list[float], reading: str) -> bool:
    qa, qb = quantiles(a).p95, quantiles(b).p95
    if qa is None or qb is None or qb / qa - 1 <= FLOOR:
        return False
    if reading == "old":
        ta, tb = Tail.of(a), Tail.of(b)
        return exceedances_differ(ta.above(qa)[0], ta.n, tb.above(qa)[0], tb.n) < ALPHA
    tested = exceedance_test(_sides(a)[reading], _sides(b)[reading])
    return tested is not None and tested[0] < ALPHA


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=400)
    reps = parser.parse_args().reps
    print(f"TTFT p95 judged at alpha {ALPHA:.4f} (4 tests a lane) beyond a {FLOOR:.0%} floor; {reps} pairs a cell")
    print("share of pairs that FAIL: records / document / old (16-value tail as exact)")
    for sigma in (0.4, 1.0):
        print(f"lognormal sigma {sigma}:")
        for n in SIZES:
            cells = []
            for factor in (1.0, 1.2, 1.5, 2.0):
                hits = {"records": 0, "document": 0, "old": 0}
                rng = random.Random(f"{sigma}:{n}:{factor}")
                for _ in range(reps):
                    a = [rng.lognormvariate(math.log(0.04), sigma) for _ in range(n)]
                    b = [rng.lognormvariate(math.log(0.04), sigma) * factor for _ in range(n)]
                    for reading in hits:
                        hits[reading] += _fails(a, b, reading)
                cells.append(f"x{factor:g}: " + "/".join(f"{hits[r] / reps:4.0%}" for r in hits))
            print(f"   n={n:4d}  " + "   ".join(cells))
    print("power to see B's p95 at A's p90 (B's share above A's p95 5 % -> 10 %): normal approximation / simulated")
    z90, z95 = 1.2816, 1.6449
    for n in SIZES:
        rng = random.Random(f"p90:{n}")
        hits = 0
        for _ in range(reps):
            a = [rng.gauss(0.0, 1.0) for _ in range(n)]
            b = [rng.gauss(z95 - z90, 1.0) for _ in range(n)]  # B's p95 at A's p90
            tested = exceedance_test(TailSide(tuple(sorted(a, reverse=True))), TailSide(tuple(sorted(b, reverse=True))))
            hits += tested is not None and tested[0] < ALPHA
        print(f"   n={n:4d}: {tail_power(n, n, ALPHA):.2f} / {hits / reps:.2f}")


if __name__ == "__main__":
    main()
