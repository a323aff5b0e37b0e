"""How the TPOT objective (``slo.tpot_p95_s``, check ``slo_tpot``) judges rungs drawn at random: how often it
flags a rung whose requests keep the objective (at most 5 % slower than it in the long run), and how often it
flags one that breaks it, by the share that breaks it and the rung's size.

Each draw is one rung from a declared space: 30-300 requests (log-uniform); output lengths lognormal (median
4-256 tokens, sigma 0.3-1.5, so some answers have one token and no TPOT); 0-10 % of requests failed; each
request's pace lognormal around 0.2-0.7 of the objective (sigma 0.1-0.4, a tail of its own) or, for a
share of 0-20 % of the requests, 1.1-4 of it. The truth is the long-run share of answered requests slower
than the objective, from 100,000 requests of the same draw (never from satbench); the rung is what the load
generator records and the judge sees: ``core.step_figures.compute_step_figures`` from the records, then
``answer.verdicts.check_step``.

    .venv/bin/python bench/tpot_accuracy.py                   # 400 draws, seed 1
    .venv/bin/python bench/tpot_accuracy.py --draws 500 --seed 2

It prints figures and exits 0 (benchmarks report, tests assert).
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from satbench.answer.policy import SLO, Policy, objectives_of
from satbench.answer.verdicts import check_step
from satbench.core.manifest import StepWindow
from satbench.core.records import RequestRecord
from satbench.core.step_figures import compute_step_figures

LIMIT = 0.1
POLICY = Policy(slo=SLO(ttft_p95_s=None, itl_p95_s=None, tbt_p99_s=None, tpot_p95_s=LIMIT))


def _draw(rng: random.Random) -> dict[str, float]:
    return {"n": round(math.exp(rng.uniform(math.log(30), math.log(300)))),
            "median_out": math.exp(rng.uniform(math.log(4), math.log(256))), "sigma_out": rng.uniform(0.3, 1.5),
            "failed": rng.uniform(0.0, 0.1), "fast": rng.uniform(0.2, 0.7), "sigma": rng.uniform(0.1, 0.4),
            "slow_share": rng.uniform(0.0, 0.2), "slow_lo": 1.1, "slow_hi": 4.0}


def _request(d: dict[str, float], rng: random.Random) -> tuple[int, float, bool]:
    """(output tokens, pace s/token, answered) of one request of draw ``d``."""
    tokens = max(1, round(rng.lognormvariate(math.log(d["median_out"]), d["sigma_out"])))
    if rng.random() < d["slow_share"]:
        pace = LIMIT * rng.uniform(d["slow_lo"], d["slow_hi"])
    else:
        pace = LIMIT * d["fast"] * rng.lognormvariate(0.0, d["sigma"])
    return tokens, pace, rng.random() >= d["failed"]


def truth(d: dict[str, float], seed: int) -> float:
    """The long-run share of answered requests with a TPOT (two tokens or more) slower than the objective."""
    rng = random.Random(seed)
    slow = paced = 0
    for _ in range(100_000):
        tokens, pace, ok = _request(d, rng)
        if ok and tokens >= 2:
            paced += 1
            slow += pace > LIMIT
    return slow / paced if paced else 0.0


def judged(d: dict[str, float], seed: int) -> bool:
    """Whether the check flags one rung of ``d``'s requests, as the load generator records them."""
    rng = random.Random(seed)
    records = []
    for i in range(int(d["n"])):
        tokens, pace, ok = _request(d, rng)
        gaps = (pace,) * (tokens - 1)
        records.append(RequestRecord(
            run_id="tpot", lane="dense", concurrency=8, user=i % 8, request_id=f"r{i}", phase="window",
            sent_at=1.0 + 0.05 * i, ttft_s=0.1, e2e_s=0.1 + sum(gaps), queue_s=0.0, itl_s=gaps if ok else (),
            prompt_tokens=64, output_tokens=tokens if ok else 0, outcome="ok" if ok else "error",
            error=None if ok else "failed"))
    window = StepWindow(lane="dense", concurrency=8, start=0.0, end=2.0 + 0.05 * d["n"])
    step = compute_step_figures(records, window, objectives=objectives_of(POLICY))
    return any(v.constraint == "slo_tpot" for v in check_step(step, POLICY).violations)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--draws", type=int, default=400)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    rows = []
    for i in range(args.draws):
        d = _draw(rng)
        rows.append((truth(d, args.seed * 1_000_003 + i), judged(d, args.seed * 7_919 + i), d["n"]))
    print(f"{args.draws} draws (seed {args.seed}); objective {LIMIT} s, alpha {1 - POLICY.confidence:g}")
    print("| long-run share slower | draws | flagged |")
    print("|---|---|---|")
    bands = [(0.0, 0.03), (0.03, 0.05), (0.05, 0.0625), (0.0625, 0.075), (0.075, 0.10), (0.10, 0.15), (0.15, 1.0)]
    for lo, hi in bands:
        inside = [(t, f, n) for t, f, n in rows if lo <= t < hi]
        flagged = sum(f for _, f, _ in inside)
        share = f"{flagged / len(inside):.1%}" if inside else "-"
        print(f"| {lo:.1%}-{hi:.1%} | {len(inside)} | {flagged} ({share}) |")
    kept = [f for t, f, _ in rows if t <= 0.05]
    print(f"false flags (truth within the objective, share <= 5 %): {sum(kept)} of {len(kept)} "
          f"({sum(kept) / max(1, len(kept)):.1%}; the test's level is {1 - POLICY.confidence:.0%})")
    for lo, hi in ((30, 100), (100, 300)):
        far = [f for t, f, n in rows if t >= 0.10 and lo <= n < hi + 1]
        print(f"flagged where 10 % or more are slower, {lo}-{hi} requests: {sum(far)} of {len(far)} "
              f"({sum(far) / max(1, len(far)):.1%})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
