"""Drift detection's power and false-alarm rate (``core.drift``, ``answer.analysis``), and whether a
drift the floor lets pass moves the answer.

An engine of 128 slots, decode step 20 ms + 1 ms a decoding slot (true gains per doubling 91/83/71/56/38/24/
13/0 %, so the steady answer under the default 10 % is 128), walked rung after rung on a session clock (29 s a
rung) with its step multiplied by a slowdown schedule; each rung's throughput carries seeded noise (32 batches,
``--noise`` relative), its standard error from ``core.statistics.batch_mean_estimate``. The lowest rung is
re-measured after the ladder, and then the rung the walk stopped at (``core.drift.knee_rung``), as the load
generator does. Per scenario, over ``--seeds`` walks: the share called drifted, the share answered
``ok``/``undecided``/``unsaturated`` with no word of a drift (the failure the check exists for, where the node
really changed), the share whose answer differs from the steady walk's with the same noise, and the share
settled (``ok``) on an answer that differs (an undecided answer says it may be off).

    .venv/bin/python bench/drift_power.py [--seeds 400] [--noise 0.03]
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from satbench.answer.analysis import analyze_lane
from satbench.answer.policy import SLO, Policy
from satbench.core.drift import knee_rung
from satbench.core.figures import StepFigures
from satbench.core.statistics import batch_mean_estimate

POLICY = Policy(slo=SLO(ttft_p95_s=None, itl_p95_s=None, tbt_p99_s=None))
LADDER = (1, 2, 4, 8, 16, 32, 64, 128, 256)
SLOTS, A, B, RUNG_S = 128, 0.020, 0.001, 29.0
SESSION_S = (len(LADDER) + 2) * RUNG_S


def walk(slow: Callable[[float], float], seed: int, noise: float) -> list[StepFigures]:
    rng = random.Random(seed)
    out: list[StepFigures] = []

    def measure(i: int, c: int, again: bool) -> StepFigures:
        n = min(c, SLOTS)
        step = (A + B * n) * slow(i * RUNG_S + RUNG_S / 2)
        est = batch_mean_estimate([n / step * (1 + rng.gauss(0, noise)) for _ in range(32)])
        assert est is not None
        return StepFigures(lane="x", concurrency=c, window_s=20.0, requests=400, errors=0,
                           throughput_tok_s=est.mean, requests_per_s=1.0, throughput_ci_tok_s=est.interval(0.95),
                           throughput_se_tok_s=est.se, throughput_dof=est.dof, decode_step_s=step,
                           queued_requests=max(0, c - SLOTS), drift_reference=1 if again else None)

    for i, c in enumerate(LADDER):
        out.append(measure(i, c, False))
    out.append(measure(len(LADDER), 1, True))
    knee = knee_rung(out, POLICY.min_gain_per_doubling)
    if knee not in (None, 1):
        out.append(measure(len(LADDER) + 1, knee, True))
    return out


def step_at(factor: float, rng: random.Random) -> Callable[[float], float]:
    at = rng.randrange(1, len(LADDER)) * RUNG_S  # a co-tenant arrives between two rungs, anywhere in the walk
    return lambda t: factor if t >= at else 1.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=400)
    parser.add_argument("--noise", type=float, default=0.03)
    args = parser.parse_args()
    scenarios: dict[str, Callable[[random.Random], Callable[[float], float]]] = {
        "steady": lambda rng: lambda t: 1.0,
        "20 % linear over the session": lambda rng: lambda t: 1.0 + 0.2 * t / SESSION_S,
        "20 % step, at a random rung": lambda rng: step_at(1.2, rng),
        "1.4x step, at a random rung": lambda rng: step_at(1.4, rng),
        "1.5x step, at a random rung": lambda rng: step_at(1.5, rng),
        "2x step, at a random rung": lambda rng: step_at(2.0, rng),
    }
    print(f"{args.seeds} walks a scenario, noise {args.noise:.0%} a batch, floor {POLICY.drift_floor:.0%}, "
          f"on_drift {POLICY.on_drift}")
    print(f"{'scenario':32s} {'drifted':>8s} {'silent answer':>14s} {'answer moved':>13s} {'settled, moved':>15s}")
    for name, schedule in scenarios.items():
        drifted = silent = moved = settled_moved = 0
        for seed in range(args.seeds):
            calm = analyze_lane("x", walk(lambda t: 1.0, seed, args.noise), POLICY)
            lane = analyze_lane("x", walk(schedule(random.Random(seed + 10**6)), seed, args.noise), POLICY)
            called = lane.drift is not None and lane.drift.drifted
            drifted += called
            silent += (not called and lane.recommended_concurrency is not None)
            moved += lane.recommended_concurrency != calm.recommended_concurrency
            settled_moved += lane.status == "ok" and lane.recommended_concurrency != calm.recommended_concurrency
        n = args.seeds
        print(f"{name:32s} {drifted / n:8.1%} {silent / n:14.1%} {moved / n:13.1%} {settled_moved / n:15.1%}")


if __name__ == "__main__":
    main()
