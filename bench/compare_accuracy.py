"""``satbench compare``'s accuracy on runs whose truth is set by the scenario: how often it finds a regression
that is there, and how often it fails a deployment that did not change.

The runs are ``testkit.compare_runs``'s known deployment (8 slots, ladder 1..16, 20 s windows: its answer
rung c=8 holds ~430 requests; lognormal jitter 0.25 on each prefill and token gap; each run's machine speed
drawn with 1 % spread), each seed its own noise. The truth of each scenario is what the scenario changed:

1. the same deployment twice (two seeds): any FAIL is false. Disjoint pairs, and every pair of the runs;
2. every prefill 1.5x longer (TTFT p95 x1.5 at every rung within the slots, the runtime build b5100): found
   where the verdict FAILs naming TTFT p95;
3. decode 2 % slower (a real move under every floor: throughput -2 %, pause excess and e2e +2 %, the runs'
   own speed spread on top): PASS;
4. another workload (4x the prompt tokens) or another policy (min gain 60 %): refused naming it.

Each pair is judged twice: with every record (a run folder's ``records.jsonl``) and from the documents alone
(the tails bounded). Prints the rates with their Wilson intervals.

    .venv/bin/python bench/compare_accuracy.py [--runs 30] [--workers 2]
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from satbench.answer.policy import Policy
from satbench.compare.comparable import NotComparable
from satbench.compare.judge import Comparison, Run, compare_runs
from satbench.core.statistics import wilson_interval
from testkit.compare_runs import simulate


def _run(kwargs: dict[str, Any]) -> Run:
    policy = kwargs.pop("min_gain", None)
    if policy is not None:
        kwargs["policy"] = Policy(min_gain_per_doubling=policy)
    return simulate(**kwargs).run


def _runs(pool: ProcessPoolExecutor, seeds: Sequence[int], **kwargs: Any) -> list[Run]:
    return list(pool.map(_run, [{"seed": s, **kwargs} for s in seeds]))


def _document_only(run: Run) -> Run:
    return Run(run.document)


def _rate(hits: int, n: int) -> str:
    ci = wilson_interval(hits, n) or (0.0, 1.0)
    return f"{hits}/{n} = {hits / max(n, 1):.1%} [{ci[0]:.1%}, {ci[1]:.1%}]"


def _judge(pairs: Sequence[tuple[Run, Run]], hit: Callable[[Comparison], bool]) -> tuple[str, str]:
    out = []
    for reading in (lambda r: r, _document_only):
        hits = sum(hit(compare_runs([reading(a)], [reading(b)])) for a, b in pairs)
        out.append(_rate(hits, len(pairs)))
    return out[0], out[1]


def _ttft_named(comparison: Comparison) -> bool:
    return comparison.verdict == "FAIL" and any(": TTFT p95 at c=" in line for line in comparison.regressions())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=30, help="runs of each deployment")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    n = args.runs
    with ProcessPoolExecutor(args.workers) as pool:
        same = _runs(pool, range(1000, 1000 + 2 * n))
        slower = _runs(pool, range(3000, 3000 + n), prefill_scale=1.5, build="b5100")
        small = _runs(pool, range(5000, 5000 + n), decode_scale=1.02)
        other = {"workload": _runs(pool, range(7000, 7003), prompt_tokens=256),
                 "policy": _runs(pool, range(7100, 7103), min_gain=0.6)}
    print(f"the known deployment, {len(same)} runs of it; answers: "
          f"{sorted({r.document.lanes['n1/dense'].recommended_concurrency for r in same}, key=str)}")
    print("rates: with every record (run folders) | from the documents alone")
    disjoint = list(zip(same[0::2], same[1::2], strict=True))
    every = list(itertools.combinations(same[:40], 2))
    for label, pairs in (("disjoint pairs", disjoint), (f"every pair of {min(len(same), 40)} runs (not independent)",
                                                         every)):
        rec, doc = _judge(pairs, lambda c: c.verdict == "FAIL")
        print(f"1. same deployment twice, false FAIL, {label}: {rec} | {doc}")
        rec, doc = _judge(pairs, lambda c: c.verdict == "INCONCLUSIVE")
        print(f"   ... INCONCLUSIVE: {rec} | {doc}")
    rec, doc = _judge(list(zip(same[:n], slower, strict=True)), _ttft_named)
    print(f"2. TTFT p95 x1.5 (prefill 1.5x), found (FAIL naming TTFT p95): {rec} | {doc}")
    example = compare_runs([same[0]], [slower[0]])
    print(f"   e.g. {example.headline()}")
    rec, doc = _judge(list(zip(same[:len(small)], small, strict=True)), lambda c: c.verdict == "PASS")
    print(f"3. decode 2 % slower (under every floor), PASS: {rec} | {doc}")
    for name, runs in other.items():
        refused = 0
        for a, b in zip(same, runs, strict=False):
            try:
                compare_runs([a], [b])
            except NotComparable as exc:
                refused += f"differ in {name}" in str(exc)
        print(f"4. another {name}: refused naming it in {refused}/{len(runs)}")


if __name__ == "__main__":
    main()
