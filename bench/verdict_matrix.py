"""The verdict matrix, printed: per case, seed and rung, the figures the judgments read and the verdicts,
beside what the old rules (longest stalled gap over the rung's ITL p50 above 5; Jain's index below 0.9;
longest TTFT above 10 s) would have said of the same figures. The truth of each case is the simulator's
engine model (see ``tests/recommender/test_live_verdicts.py``); the test asserts it, this prints it.

    .venv/bin/python bench/verdict_matrix.py [--seeds 3 4] [--window 5]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from satbench.answer.models import LaneModel, StepModel
from satbench.answer.policy import Policy
from testkit.live import PROBES, VARIED, run_lane

POLICY = Policy(max_throughput_ci_ratio=10.0)
CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("whole-prompt prefill (starves decodes at c>=2)", "dense",
     {"ladder": [2, 4], "workload": PROBES, "batch": 8192}),
    ("chunked prefill (starves none)", "dense", {"ladder": [2, 4], "workload": PROBES, "batch": 256, "ubatch": 256}),
    ("unfair admission (unfair past 4 slots)", "starving",
     {"ladder": [2, 8], "workload": VARIED, "batch": 256, "ubatch": 256}),
    ("FIFO, varied lengths (never unfair)", "dense", {"ladder": [2, 8], "workload": VARIED}),
    ("4 slots, ladder 1/2 (unsaturated)", "dense", {"ladder": [1, 2]}),
    ("4 slots, ladder 1/2 extended (knee at 4)", "dense", {"ladder": [1, 2], "extend": True}),
    ("8 slots, ladder 2/4 extended (knee at 8)", "dense", {"ladder": [2, 4], "extend": True, "slots": 8}),
]


def old_verdicts(step: StepModel) -> str:
    out = []
    if (step.decode_stall_max_ratio or 0) > 5.0:
        out.append("decode starved")
    if step.jain is not None and step.jain < 0.9:
        out.append("unfair")
    if (step.prefill_wait_max_s or 0) > 10.0:
        out.append("prefill starved")
    return ", ".join(out) or "ok"


def new_verdicts(step: StepModel) -> str:
    marks = [f"{k}:{v.status}" for k, v in step.checks.items() if v.status not in ("ok", "not_applicable")]
    return ", ".join(marks) or "ok"


def pair(step: StepModel, name: str) -> str:
    ratio, p = getattr(step, f"{name}_ratio"), getattr(step, f"{name}_p_value")
    return "-" if ratio is None or p is None else f"{ratio:.2f} ({p:.0e})"


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.0f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[3, 4])
    parser.add_argument("--window", type=float, default=5.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for name, profile, spec in CASES:
            for seed in args.seeds:
                lane = LaneModel.model_validate(run_lane(profile, Path(tmp) / f"{len(name)}-{seed}-{profile}",
                                                         seed=seed, policy=POLICY, window_s=args.window, **spec))
                print(f"\n{name}, seed {seed}: {lane.status}, recommended {lane.recommended_concurrency}, "
                      f"bound by {lane.binding_constraint}")
                print("   c  pause p99 ms  stall/ITLp50  interference  wait ratio (p)   pace ratio (p)  "
                      "queued wait/bound s  Jain   old verdicts     new verdicts")
                for s in lane.steps:
                    wait, tpot = pair(s, "user_wait"), pair(s, "user_itl")
                    adm = ("-" if s.admission_wait_bound_s is None or s.admission_wait_max_s is None
                           else f"{s.admission_wait_max_s:.2f}/{s.admission_wait_bound_s:.2f}")
                    ratio = "-" if s.decode_stall_max_ratio is None else f"{s.decode_stall_max_ratio:.1f}"
                    share = "-" if s.interference_share is None else f"{s.interference_share:.1%}"
                    jain = "-" if s.jain is None else f"{s.jain:.3f}"
                    print(f"  {s.concurrency:>2}  {ms(s.pause_s.p99):>12}  {ratio:>12}  {share:>12}  "
                          f"{wait:>15}  {tpot:>15}  {adm:>19}  {jain:>5}  {old_verdicts(s):<15}  {new_verdicts(s)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
