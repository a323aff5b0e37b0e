"""The power of each verdict's test at the sizes a session has: the smallest effect it finds, and how often.

1. Decode starvation (a p99 objective judged by a count, ``core.statistics.exceedance_p_value`` at 0.05):
   for n requests in a rung, how many must be held for a flag, and the share held at which it flags in 80 % of
   rungs.
2. Fairness among users' waits (the permutation log-rank test of ``core.survival``): exponential waits, a
   quarter of the users waiting ``factor`` times longer; how often it is found at 0.001 (the default
   ``fairness_alpha``) and 0.01, and how often when nobody is favoured (the false-flag rate).
3. Admission against its FIFO bound, end to end on ``testkit.scenario``'s engine (4 slots, EOS-like lognormal
   lengths): how often each admission policy is flagged (prefill starvation, fairness) per window length.

    .venv/bin/python bench/verdict_power.py [--reps 200] [--seeds 10]
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from satbench.answer.policy import Policy
from satbench.answer.verdicts import check_step
from satbench.core.statistics import exceedance_p_value
from satbench.core.step_figures import compute_step_figures
from satbench.core.survival import Wait, logrank_p_value
from testkit.scenario import Engine, Scenario, lognormal, run


def count_test(alpha: float = 0.05) -> None:
    from scipy import stats

    print("1. decode starvation, p99 objective by count (alpha 0.05)")
    for n in (10, 20, 50, 100, 200, 500):
        k = next(k for k in range(1, n + 1) if exceedance_p_value(k, n, 0.99) < alpha)
        share = next(p / 1000 for p in range(1, 1001) if stats.binom.sf(k - 1, n, p / 1000) >= 0.8)
        print(f"   n={n:4d}: flagged with {k} held or more; 80 % power at {share:.1%} of requests held")


def logrank(reps: int) -> None:
    print("2. users' waits, permutation log-rank (a quarter of users waiting `factor` x longer)")
    for users, sizes in ((8, (3, 4, 5)), (16, (3, 4, 5)), (16, (8, 10, 12)), (32, (1, 2, 3))):
        cells = []
        for factor in (1.0, 2.0, 3.0, 5.0):
            found = {0.001: 0, 0.01: 0}
            rng = random.Random(f"{users}:{sizes}:{factor}")
            for rep in range(reps):
                groups = [[Wait(rng.expovariate(1.0) * (factor if u < users // 4 else 1.0))
                           for _ in range(rng.choice(sizes))] for u in range(users)]
                p = logrank_p_value(groups, seed=rep) or 1.0
                for alpha in found:
                    found[alpha] += p < alpha
            cells.append(f"x{factor:g}: {found[0.001] / reps:4.0%} / {found[0.01] / reps:4.0%}")
        print(f"   {users:2d} users, {sizes} waits: " + "  ".join(cells) + "   (at 0.001 / 0.01)")


def admission(seeds: int) -> None:
    print("3. admission on the scenario engine, 4 slots, lognormal lengths: windows flagged "
          "(prefill starvation / fairness)")
    for window in (8.0, 16.0):
        for users in (8, 16):
            cells = []
            for policy in ("fifo", "random", "lifo", "lowest_user"):
                prefill = fair = 0
                for seed in range(seeds):
                    res = run(Scenario(Engine(slots=4, admission=policy), users=users,
                                       output=lognormal(64, 0.8, 8, 512), window_s=window), seed)
                    checks = check_step(compute_step_figures(res.records, res.window), Policy()).checks
                    prefill += checks["prefill_starvation"].status == "flagged"
                    fair += checks["fairness"].status == "flagged"
                cells.append(f"{policy}: {prefill}/{fair}")
            print(f"   window {window:g} s, c={users:2d}, of {seeds}: " + "  ".join(cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--seeds", type=int, default=10)
    args = parser.parse_args()
    count_test()
    logrank(args.reps)
    admission(args.seeds)


if __name__ == "__main__":
    main()
