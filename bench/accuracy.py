"""The accuracy datasheet: satbench's answers measured over seeded draws from a declared space of conditions.

For each draw (``testkit.accuracy.space``: the server, the requests, the objectives, the arrivals, the trace),
the truth of each answer from the engine's construction and long virtual-time runs (``testkit.accuracy.truth``)
beside satbench's own answer path run on the same engine (``testkit.accuracy.answers``: the session's
configuration, ladder, stop rule, looks, searches, verdicts and answers). It prints, per answer, the error
distribution, the share of settled answers on target, the settled answers far off, how far the unsettled ones
are, each stated interval's coverage of its truth and the seconds a draw took, and writes every draw as JSON
for inspection. ``docs/accuracy.md`` states the table and what it means.

    .venv/bin/python bench/accuracy.py                                   # 200 draws, seed 1, all answers
    .venv/bin/python bench/accuracy.py --draws 20 --answers rate --jobs 2 --out runs/accuracy.json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from testkit.accuracy.datasheet import ANSWERS, measure_draw, render, render_buckets, table
from testkit.accuracy.space import Space, sample


def _one(job: tuple[int, int, tuple[str, ...]]) -> dict[str, Any]:
    seed, index, asked = job
    try:
        return measure_draw(sample(Space(), seed, index), asked)
    except Exception as exc:  # a draw the harness cannot run is reported, never silently dropped
        return {"draw": f"{seed}:{index}", "index": index, "error": f"{type(exc).__name__}: {exc}"[:300]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--draws", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--first", type=int, default=0, help="index of the first draw")
    parser.add_argument("--answers", default=",".join(ANSWERS), help="comma-separated: concurrency,rate,trace")
    parser.add_argument("--jobs", type=int, default=1, help="processes")
    parser.add_argument("--out", type=Path, default=Path("runs/accuracy.json"))
    parser.add_argument("--table", type=Path, default=None, metavar="JSON",
                        help="print the tables of a file an earlier run wrote (--out), running nothing")
    args = parser.parse_args(argv)
    if args.table is not None:
        try:
            written = json.loads(args.table.read_text(encoding="utf-8"))["draws"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            parser.error(f"--table: cannot read {args.table} as a datasheet file ({type(exc).__name__}: {exc})")
        ran = [d for d in written if "error" not in d]
        print(render(table(ran)))
        print()
        print(render_buckets(ran))
        return 0
    asked = tuple(a.strip() for a in args.answers.split(",") if a.strip())
    unknown = sorted(set(asked) - set(ANSWERS))
    if unknown or not asked:
        parser.error(f"--answers: unknown {', '.join(unknown) or '(none given)'}; choose from {', '.join(ANSWERS)}")
    if args.draws < 1 or args.jobs < 1:
        parser.error("--draws and --jobs must be at least 1")
    jobs = [(args.seed, i, asked) for i in range(args.first, args.first + args.draws)]
    t0 = time.perf_counter()
    draws: list[dict[str, Any]] = []
    with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
        for n, draw in enumerate(pool.imap_unordered(_one, jobs), 1):
            draws.append(draw)
            said = "; ".join(f"{k} truth {draw[k]['truth']:.4g} answer {draw[k]['answer']} ({draw[k]['status']})"
                             for k in asked if k in draw) or draw.get("error", "")
            print(f"[{n}/{len(jobs)}] draw {draw['draw']}: {said}", flush=True)
    draws.sort(key=lambda d: d["index"])
    wall = time.perf_counter() - t0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"seed": args.seed, "first": args.first, "draws": draws,
                                    "space": Space().model_dump(mode="json")}, indent=1, default=str) + "\n",
                        encoding="utf-8")
    failed = [d for d in draws if "error" in d]
    print()
    ran = [d for d in draws if "error" not in d]
    print(render(table(ran)))
    print()
    print(render_buckets(ran))
    print(f"\n{len(draws)} draws (seed {args.seed}) in {wall:.0f} s with {args.jobs} process(es); "
          f"{len(failed)} failed to run; every draw in {args.out}")
    for d in failed:
        print(f"  draw {d['draw']}: {d['error']}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
