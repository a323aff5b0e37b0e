"""The peak prefill answer's accuracy: satbench's walk over seeded draws of engines against each engine's own
prefill capacity.

For each draw of ``testkit.accuracy.prefill.PrefillSpace`` (dense and MoE-like step costs, 1-16 slots, ``-b``
and ``-ub`` 128-8192, chunked and unchunked prompts of 256-16384 tokens, a client turnaround of 0.1-3 ms, step
noise of 1-3 %; the module says why each range), the truth is the engine's prefill capacity from its
construction: the most prompt tokens/s it attains with P-token prompts (its own step counts over long
noise-free runs at every concurrency up to twice the slots), beside the bound ``max over n <= min(-b, slots x
P) of n / step_seconds(n)`` that the slots may not reach (one slot's prompt a few tokens over ``-b`` runs as
a full step and a short one); the answer is satbench's walk
(``core.prefill`` figures, ``core.prefill_peak`` rule) on the simulator's engine in virtual time. It prints
the peak's error distribution, the share of settled answers within 10 %, the settled ones off by more than
20 % (findings, with their engines), the statuses and rungs walked, the same for the hand-run recipe (``P /
median TTFT`` of one user), and the coverage of the peak rung's interval against that rung's long-run rate
(every ``--coverage-every``-th draw, run ``--coverage-factor`` windows long). ``docs/accuracy.md`` states the
table. Deterministic for a seed.

    .venv/bin/python bench/prefill_accuracy.py                        # 200 draws, seed 1
    .venv/bin/python bench/prefill_accuracy.py --draws 40 --seed 2 --jobs 2 --out runs/prefill_accuracy.json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from testkit.accuracy.prefill import PrefillSpace, measure_draw, quantile, sample

SPACE = PrefillSpace()


def _one(job: tuple[int, int, float]) -> dict[str, Any]:
    seed, index, coverage = job
    t0 = time.perf_counter()
    try:
        out = measure_draw(sample(SPACE, seed, index), SPACE, coverage).summary()
    except Exception as exc:  # a draw the harness cannot run is reported, never silently dropped
        out = {"draw": f"{seed}:{index}", "index": index, "error": f"{type(exc).__name__}: {exc}"[:300]}
    out["seconds"] = time.perf_counter() - t0
    return out


def _dist(errors: list[float]) -> str:
    if not errors:
        return "-"
    return " / ".join(f"{quantile(errors, q):+.1%}" for q in (0.0, 0.05, 0.5, 0.95, 1.0))


def _share(n: int, of: int) -> str:
    return f"{n} of {of} ({n / of:.1%})" if of else "0 of 0"


def report(draws: list[dict[str, Any]]) -> list[str]:
    """The printed table (module docstring)."""
    lines = ["| answer | draws | error min / p5 / median / p95 / max | settled within 10 % | all within 10 % "
             "| settled off > 20 % | statuses | rungs walked, mean |", "|---|---|---|---|---|---|---|---|"]
    groups: list[tuple[str, list[dict[str, Any]]]] = [("all", draws)]
    for regime in sorted({d["regime"] for d in draws}):
        groups.append((regime, [d for d in draws if d["regime"] == regime]))
    groups += [("dense", [d for d in draws if not d["moe"]]), ("MoE-like", [d for d in draws if d["moe"]])]
    for name, group in groups:
        errors = [d["error"] for d in group if d["error"] is not None]
        settled = [d for d in group if d["status"] == "settled"]
        within = sum(abs(d["error"]) <= 0.10 for d in settled)
        statuses = ", ".join(f"{k} {v}" for k, v in sorted(Counter(d["status"] for d in group).items()))
        rungs = sum(len(d["rungs"]) for d in group) / len(group)
        lines.append(f"| peak, {name} | {len(group)} | {_dist(errors)} | {_share(within, len(settled))} | "
                     f"{_share(sum(abs(e) <= 0.10 for e in errors), len(group))} | "
                     f"{sum(abs(d['error']) > 0.20 for d in settled)} | {statuses} | {rungs:.1f} |")
    recipe = [d["recipe_error"] for d in draws if d["recipe_error"] is not None]
    lines.append(f"| hand-run recipe (P / median TTFT, one user) | {len(draws)} | {_dist(recipe)} | - | "
                 f"{_share(sum(abs(e) <= 0.10 for e in recipe), len(draws))} | - | - | 1 |")
    bound = [d["capacity_error"] for d in draws if d["capacity_error"] is not None]
    settled = [d for d in draws if d["status"] == "settled"]
    near = sum(abs(d["capacity_error"]) <= 0.10 for d in settled)
    lines.append(f"| peak against the construction's bound (max n / step(n), n <= min(-b, slots x P)) | "
                 f"{len(draws)} | {_dist(bound)} | {_share(near, len(settled))} | "
                 f"{_share(sum(abs(e) <= 0.10 for e in bound), len(draws))} | "
                 f"{sum(abs(d['capacity_error']) > 0.20 for d in settled)} | - | - |")
    unreachable = [d["truth"] / d["capacity"] - 1 for d in draws]
    lines.append(f"| the engine's attainable rate against that bound (truth, no answer) | {len(draws)} | "
                 f"{_dist(unreachable)} | - | {_share(sum(abs(e) <= 0.10 for e in unreachable), len(draws))} "
                 f"| - | - | - |")
    covered = [d["coverage"] for d in draws if d.get("coverage")]
    lines += ["", "| interval | rungs | holds the rung's long-run prompt tokens/s (nominal 95 %) |", "|---|---|---|",
              f"| the peak rung's (batch means, 95 %) | {len(covered)} | "
              f"{_share(sum(c['holds'] for c in covered), len(covered))} |"]
    return lines


def findings(draws: list[dict[str, Any]]) -> list[str]:
    out = []
    for d in draws:
        if d["status"] == "settled" and abs(d["error"]) > 0.20:
            rungs = ", ".join(f"c={r['c']} {r['tok_s']:.0f}" for r in d["rungs"])
            out.append(f"  draw {d['draw']} ({d['regime']}, {'MoE' if d['moe'] else 'dense'}): slots {d['slots']}, "
                       f"-b {d['batch']}, -ub {d['ubatch']}, P {d['prompt_tokens']}, cost {d['cost']}: truth "
                       f"{d['truth']:.0f} at c={d['truth_c']} (bound {d['capacity']:.0f}), peak {d['peak']:.0f} "
                       f"at c={d['concurrency']} ({d['error']:+.1%}); {rungs}")
    return out


def unreachable(draws: list[dict[str, Any]]) -> list[str]:
    """The engines whose attainable rate is more than 10 % under the construction's bound (the truth's
    definition matters there: module docstring)."""
    return [f"  draw {d['draw']}: slots {d['slots']}, -b {d['batch']}, -ub {d['ubatch']}, P {d['prompt_tokens']}: "
            f"attains {d['truth']:.0f} at c={d['truth_c']}, bound {d['capacity']:.0f} "
            f"({d['truth'] / d['capacity'] - 1:+.1%}); peak {d['peak'] or 0:.0f} ({d['status']})"
            for d in draws if d["truth"] < 0.9 * d["capacity"]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--draws", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=2, help="processes")
    parser.add_argument("--coverage-every", type=int, default=5,
                        help="every n-th draw runs its peak rung again, long, for the interval's coverage")
    parser.add_argument("--coverage-factor", type=float, default=20.0, help="that run's length, in windows")
    parser.add_argument("--out", type=Path, default=None, help="write every draw as JSON")
    args = parser.parse_args(argv)
    if args.draws < 1 or args.jobs < 1 or args.coverage_every < 1 or args.coverage_factor <= 0:
        parser.error("--draws, --jobs and --coverage-every must be at least 1, --coverage-factor above 0")
    jobs = [(args.seed, i, args.coverage_factor if i % args.coverage_every == 0 else 0.0) for i in range(args.draws)]
    t0 = time.perf_counter()
    if args.jobs == 1:
        draws = [_one(j) for j in jobs]
    else:
        with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
            draws = pool.map(_one, jobs, chunksize=1)
    wall = time.perf_counter() - t0
    failed = [d for d in draws if "error" in d and "truth" not in d]
    ran = [d for d in draws if "truth" in d]
    print("\n".join(report(ran)))
    found = findings(ran)
    print(f"\nsettled and off by more than 20 % (findings): {len(found)}")
    print("\n".join(found))
    below = unreachable(ran)
    print(f"\nengines attaining more than 10 % under the construction's bound: {len(below)}")
    print("\n".join(below))
    slow = max(ran, key=lambda d: d["seconds"]) if ran else None
    print(f"\n{len(draws)} draws (seed {args.seed}) in {wall:.0f} s with {args.jobs} process(es); "
          f"{len(failed)} failed to run" + (f"; slowest draw {slow['draw']} {slow['seconds']:.1f} s" if slow else ""))
    for d in failed:
        print(f"  draw {d['draw']}: {d['error']}")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"seed": args.seed, "draws": draws}, indent=1, default=str) + "\n",
                            encoding="utf-8")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
