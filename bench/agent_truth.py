"""The engine's truth for the agent answer: how many concurrent agent sessions each profile holds at an SLO tier,
for short and long contexts, with and without sub-agents, in long virtual-time runs (``simulator.agent_truth``).

Each case plays the same seeded session stream (``core.agents.SyntheticAgents``, the published figures it cites)
at 1, 2, 4 ... sessions until the tier fails, then bisects to the integer; it prints, per case, the capacity, the
tier's figures at it and one above, the turns measured and the prompt-cache hit share. The agent answer of a walk
on the simulator is to land within 10 % of these figures (issue: agents and energy).

    .venv/bin/python bench/agent_truth.py                       # the dense and moe profiles, tier 2 s / 30 tok/s
    .venv/bin/python bench/agent_truth.py --turns 4000 --ttft-s 5 --speed 20 --profiles dense

It prints figures and exits 0 (benchmarks report, tests assert).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from satbench.core.agents import AgentTier, SyntheticAgents
from satbench.simulator.agent_truth import capacity, play
from satbench.simulator.profile import load_profile

CASES = {  # name: (max context per session, sub-agent share of turns)
    "short context": (8192, 0.0),
    "short context, sub-agents": (8192, 0.15),
    "long context": (32768, 0.0),
    "long context, sub-agents": (32768, 0.15),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--profiles", default="dense,moe")
    parser.add_argument("--turns", type=int, default=2000, help="turns per run (the first tenth left out)")
    parser.add_argument("--ttft-s", type=float, default=2.0, help="the tier's p95 TTFT ceiling")
    parser.add_argument("--speed", type=float, default=30.0, help="the tier's p25 output speed floor, tokens/s")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    tier = AgentTier(args.ttft_s, args.speed)
    print(f"tier: p95 TTFT <= {tier.ttft_s:g} s, p25 output speed >= {tier.speed_tok_s:g} tok/s; "
          f"{args.turns} turns a run, the first tenth left out")
    print(f"{'profile':8} {'case':28} {'capacity':>8} {'TTFT p95 s':>10} {'speed p25':>9} "
          f"{'one more: TTFT, speed':>22} {'cache hit':>9} {'s':>5}")
    for name in args.profiles.split(","):
        base = load_profile(name)
        for case, (context, share) in CASES.items():
            slots = base.server.slots
            profile = base.with_overrides(ctx_tokens=slots * context, slot_ctx_tokens=context)
            syn = SyntheticAgents(max_context_tokens=context, spawn_share=share)
            t0 = time.perf_counter()
            best, tried = capacity(profile, lambda syn=syn: syn.stream(args.seed), tier, turns=args.turns)
            by_n = {r.n: r for r in tried}
            at, above = by_n.get(best), by_n.get(best + 1)
            played = play(profile, syn.stream(args.seed), max(best, 1), turns=args.turns)
            hit = sum(p.cached_tokens for p in played) / max(1, sum(p.prompt_tokens for p in played))

            def f(x: float | None, fmt: str) -> str:
                return "-" if x is None else format(x, fmt)

            print(f"{name:8} {case:28} {best:>8} {f(at and at.ttft_p95_s, '.3f'):>10} "
                  f"{f(at and at.speed_p25_tok_s, '.1f'):>9} "
                  f"{f(above and above.ttft_p95_s, '.2f') + ', ' + f(above and above.speed_p25_tok_s, '.1f'):>22} "
                  f"{hit:>9.1%} {time.perf_counter() - t0:>5.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
