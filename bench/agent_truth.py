"""The engine's truth for the agent answer: how many concurrent agent sessions each profile holds at an SLO tier,
for short and long contexts, with and without sub-agents, in long virtual-time runs (``simulator.agent_truth``).

Each case plays the same seeded session stream (``core.agents.SyntheticAgents``, the published figures it cites)
at 1, 2, 4 ... sessions until the tier fails, then bisects to the integer; it prints, per case, the capacity, the
tier's figures at it and one above, the turns measured and the prompt-cache hit share. With ``--walk-seeds``, each
case is also walked as the agent answer walks it (``answer.agent_analysis``: rungs of ``--walk-turns`` turns,
the first tenth of each left out, on session streams of their own seeds), and the answers are scored against
the truth: exact, off and said undecided, settled and off (the goal: none).

    .venv/bin/python bench/agent_truth.py                       # the dense and moe profiles, tier 2 s / 30 tok/s
    .venv/bin/python bench/agent_truth.py --turns 3000 --walk-seeds 2,3 --walk-turns 400

It prints figures and exits 0 (benchmarks report, tests assert).
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from satbench.answer.agent_analysis import AgentAnswer, AgentRung, AgentVerdict, agent_answer, judge_rung, next_sessions
from satbench.core.agents import AgentTier, SyntheticAgents
from satbench.simulator.agent_truth import capacity, play
from satbench.simulator.profile import Profile, load_profile

CASES = {  # name: (max context per session, sub-agent share of turns)
    "short context": (8192, 0.0),
    "short context, sub-agents": (8192, 0.15),
    "long context": (32768, 0.0),
    "long context, sub-agents": (32768, 0.15),
}


def walk(profile: Profile, syn: SyntheticAgents, tier: AgentTier, seed: int, turns: int) -> AgentAnswer:
    """The agent answer's walk on the engine: each rung a short run of its own session stream."""
    verdicts: list[AgentVerdict] = []
    n = next_sessions(verdicts, 256)
    while n is not None:
        played = sorted(play(profile, syn.stream(seed * 1000 + n), n, turns=turns), key=lambda p: p.sent)
        kept = played[len(played) // 10:]
        verdicts.append(judge_rung(AgentRung(n, tuple((p.sent, p.ttft_s, p.speed_tok_s) for p in kept)), tier))
        n = next_sessions(verdicts, 256)
    return agent_answer(verdicts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--profiles", default="dense,moe")
    parser.add_argument("--turns", type=int, default=2000, help="turns per run (the first tenth left out)")
    parser.add_argument("--ttft-s", type=float, default=2.0, help="the tier's p95 TTFT ceiling")
    parser.add_argument("--speed", type=float, default=30.0, help="the tier's p25 output speed floor, tokens/s")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--walk-seeds", default="", help="comma list: walk each case with these seeds and score it")
    parser.add_argument("--walk-turns", type=int, default=400, help="turns a walked rung (default 400)")
    args = parser.parse_args()
    seeds = [int(x) for x in args.walk_seeds.split(",") if x.strip()]
    score = {"exact": 0, "off, undecided": 0, "settled and off": 0}
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
            best, tried = capacity(profile, functools.partial(syn.stream, args.seed), tier, turns=args.turns)
            by_n = {r.n: r for r in tried}
            at, above = by_n.get(best), by_n.get(best + 1)
            played = play(profile, syn.stream(args.seed), max(best, 1), turns=args.turns)
            hit = sum(p.cached_tokens for p in played) / max(1, sum(p.prompt_tokens for p in played))

            def f(x: float | None, fmt: str) -> str:
                return "-" if x is None else format(x, fmt)

            at_ttft, at_speed = (None, None) if at is None else (at.ttft_p95_s, at.speed_p25_tok_s)
            up_ttft, up_speed = (None, None) if above is None else (above.ttft_p95_s, above.speed_p25_tok_s)
            one_more = f(up_ttft, ".2f") + ", " + f(up_speed, ".1f")
            print(f"{name:8} {case:28} {best:>8} {f(at_ttft, '.3f'):>10} {f(at_speed, '.1f'):>9} {one_more:>22} "
                  f"{hit:>9.1%} {time.perf_counter() - t0:>5.1f}")
            for seed in seeds:
                said = walk(profile, syn, tier, seed, args.walk_turns)
                got = said.max_sessions or 0
                kind = "exact" if got == best else "settled and off" if said.status in ("settled", "none") \
                    else "off, undecided"
                score[kind] += 1
                print(f"{'':8} {'walk, seed ' + str(seed):28} {got:>8} {said.status} {said.bracket}: {kind}")
    if seeds:
        print("walks: " + ", ".join(f"{k} {v}" for k, v in score.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
