"""How close the rate answer comes to the engine's truth: the session's rate search replayed on the simulator's
virtual-time engine, against the truth from long runs of the same engine.

For each profile (``dense``, ``moe``), arrival process (Poisson, gamma of the given shapes) and seed:

- truth: ``testkit.open_truth.true_max_rate`` (600 s of virtual time per seed, three seeds pooled, below the
  engine's capacity; never the load generator's windows, statistics or search);
- measured: the closed ladder's capacity (virtual closed loops at the slot count and twice it), then the
  rate search as a session walks it (``loadgen.rates.next_rate`` and ``judge``), each rung's window looked at
  as ``loadgen.open_step`` looks (``testkit.open_truth.measured_rung``), and the recommender's answer
  (``answer.rate_analysis.rate_answer``).

It prints each answer's error against the truth, the virtual seconds of windows the search measured, and the
worst error per lane. No wire: what the wire adds is the client's schedule lag (``bench/arrivals.py``).

    .venv/bin/python bench/rate_accuracy.py                         # dense and moe, Poisson and gamma 0.5
    .venv/bin/python bench/rate_accuracy.py --max-window 60 --lanes moe
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from satbench.answer.policy import Policy, objectives_of
from satbench.answer.rate_analysis import rate_answer
from satbench.loadgen.config import ArrivalConfig
from satbench.loadgen.rates import RateOutcome, judge, next_rate
from satbench.simulator.profile import load_profile
from testkit.open_truth import closed_ladder, measured_answer, true_max_rate


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lanes", default="dense,moe")
    parser.add_argument("--shapes", default="1.0,0.5", help="gamma shapes; 1.0 is Poisson")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--max-window", type=float, default=ArrivalConfig().max_window_s)
    args = parser.parse_args()
    policy = Policy()
    objectives = objectives_of(policy)
    worst: dict[str, float] = {}
    for name in args.lanes.split(","):
        profile = load_profile(name)
        ladder = closed_ladder(profile, objectives)
        capacity, bound, warmup = ladder.capacity_rps, ladder.bound_rps, ladder.warmup_s
        for shape in (float(x) for x in args.shapes.split(",")):
            process = "poisson" if shape == 1.0 else "gamma"
            t0 = time.perf_counter()
            truth = true_max_rate(profile, process, objectives=objectives, target=policy.attainment_target,
                                  shape=shape)
            took = time.perf_counter() - t0
            arrival = ArrivalConfig(process=process, burstiness=None if process == "poisson" else shape)
            for seed in range(1, args.seeds + 1):
                steps = measured_answer(
                    profile, process, seed, objectives=objectives, shape=shape, capacity_rps=capacity,
                    capacity_high=bound, warmup_s=warmup, max_window_s=args.max_window,
                    target=policy.attainment_target,
                    judge=lambda f, hi, arrival=arrival: judge(f, arrival, hi).passed,
                    next_rate=lambda done, cap, arrival=arrival: next_rate(
                        [RateOutcome(r, p) for r, p in done], arrival, cap))
                answer = rate_answer(steps, policy, capacity_rps=capacity)
                got = None if answer is None else answer.max_rate_rps
                error = None if got is None else got / truth - 1
                if error is not None:
                    worst[name] = max(worst.get(name, 0.0), abs(error))
                windows = sum(s.window_s for s in steps)
                print(f"{name:6} {process:7} shape {shape:<4g} seed {seed}: truth {truth:6.3f} req/s (truth "
                      f"{took:.0f} s), answer {got if got is None else round(got, 3)} "
                      f"({'' if answer is None else answer.status}), error "
                      f"{'n/a' if error is None else f'{error:+.1%}'}; {len(steps)} rungs, {windows:.0f} s of "
                      "windows", flush=True)
    for name, err in worst.items():
        print(f"worst |error| {name}: {err:.1%} (goal: within 10 %)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
