"""The agent answer's accuracy: the load generator's walk on the simulator, over loopback HTTP in real time, against
the engine's truth (``simulator.agent_truth.capacity``: the most session trees the same profile holds at the tier
over long runs in virtual time), on cases drawn at random from a declared space.

The space (each case drawn by its seed): the profile (``dense`` or ``moe``), its slots (2, 4 or 8), the lane's
context per session (8k or 32k tokens: short and long sessions), sub-agents (none, or 15 % of turns spawning two),
the tier (a p95 TTFT ceiling of 1, 2 or 4 s; a p25 speed floor of 15, 30 or 50 tok/s), the session stream's seed.
The simulator runs ``--time-scale`` times its profile's step costs (default 0.1: ten times faster) and the tier
and the tool delays are scaled with it (the tier's figures are at scale 1), so a case is the
scale-1 case with time compressed, and the truth is computed on the same scaled profile and delays. The goal: the
walk's answer within 10 % of the truth (issue 42), over the cases; the bench prints each case and the share met.

    .venv/bin/python bench/agent_walk_accuracy.py --cases 6             # the walks (minutes a case)
    .venv/bin/python bench/agent_walk_accuracy.py --cases 6 --truth-only  # the truths only (seconds)
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import random
import re
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from satbench.answer.agent_analysis import agents_model
from satbench.core.agents import AgentTier, SyntheticAgents
from satbench.loadgen.agent_walk import context_limit
from satbench.loadgen.config import AgentsConfig, LoadgenConfig
from satbench.loadgen.runner import run_ladder
from satbench.simulator.agent_truth import TierResult, capacity
from satbench.simulator.profile import Profile, load_profile
from testkit.sim import SimulatorProcess

FAR = 0.10  # a case whose truth is at least this clear of the tier's boundary on both sides
PROFILES = Path(__file__).resolve().parents[1] / "satbench" / "simulator" / "profiles"


@dataclass(frozen=True)
class Case:
    seed: int
    profile: str
    slots: int
    context: int
    spawn_share: float
    ttft_s: float
    speed_tok_s: float

    def describe(self) -> str:
        return (f"{self.profile:5} {self.slots:>2} slots ctx {self.context // 1024:>2}k spawns {self.spawn_share:.2f} "
                f"tier {self.ttft_s:g} s {self.speed_tok_s:g} tok/s seed {self.seed:>2}")


def draw(seed: int) -> Case:
    """One case of the declared space (module docstring)."""
    rng = random.Random(seed)
    return Case(seed, rng.choice(["dense", "moe"]), rng.choice([2, 4, 8]), rng.choice([8192, 32768]),
                rng.choice([0.0, 0.15]), rng.choice([1.0, 2.0, 4.0]), rng.choice([15.0, 30.0, 50.0]))


def agents_config(case: Case, scale: float, window_s: float, max_sessions: int) -> AgentsConfig:
    return AgentsConfig(ttft_s=case.ttft_s * scale, speed_tok_s=case.speed_tok_s / scale, max_sessions=max_sessions,
                        warmup_s=max(2.0, window_s / 5), window_s=window_s, drain_s=max(2.0, window_s / 4),
                        seed=case.seed, max_context_tokens=case.context, delay_median_s=0.3 * scale,
                        delay_cap_s=10.0 * scale, spawn_share=case.spawn_share)


def sim_profile(case: Case, scale: float) -> Profile:
    base = load_profile(case.profile)
    return base.with_overrides(slots=case.slots, ctx_tokens=case.slots * case.context, slot_ctx_tokens=case.context,
                               time_scale=scale)


def _load(r: TierResult | None, tier: AgentTier) -> float | None:
    """How loaded the tier is at a truth run: the larger of p95 TTFT over its ceiling and the floor over p25 speed
    (1: on the boundary; a run with no first token or no speed reads as infinitely past it)."""
    if r is None:
        return None
    if r.ttft_p95_s is None or not r.speed_p25_tok_s:
        return float("inf")
    return max(r.ttft_p95_s / tier.ttft_s, tier.speed_tok_s / r.speed_p25_tok_s)


def truth(case: Case, cfg: AgentsConfig, scale: float, turns: int) -> tuple[int, float]:
    """The engine's capacity and how far it lies from the decision boundary: the smaller of the headroom at it
    (1 - load) and the excess one session above it (load - 1); 0.1 means both sides are 10 % clear."""
    profile = sim_profile(case, scale)
    limit = context_limit(cfg, case.context)
    syn = SyntheticAgents(max_context_tokens=limit, spawn_share=cfg.spawn_share, delay_median_s=cfg.delay_median_s,
                          delay_cap_s=cfg.delay_cap_s, system_tokens=cfg.system_tokens)
    tier = AgentTier(cfg.ttft_s, cfg.speed_tok_s)
    best, tried = capacity(profile, functools.partial(syn.stream, case.seed), tier, turns=turns)
    by_n = {r.n: r for r in tried}
    at, above = _load(by_n.get(best), tier), _load(by_n.get(best + 1), tier)
    margins = [m for m in ((None if at is None else 1 - at), (None if above is None else above - 1)) if m is not None]
    return best, min(margins, default=float("inf"))


def profile_file(case: Case, scale: float, folder: Path) -> Path:
    """The case's profile as the simulator process reads it: the base profile's file, its context and speed set."""
    profile = sim_profile(case, scale)
    text = (PROFILES / f"{case.profile}.toml").read_text()
    server = profile.server
    for key, value in (("slots", case.slots), ("ctx_tokens", server.ctx_tokens),
                       ("slot_ctx_tokens", server.slot_ctx_tokens), ("time_scale", scale)):
        text, n = re.subn(rf"(?m)^{key} = [^#\n]*", f"{key} = {value} ", text, count=1)
        assert n == 1, key
    path = folder / f"{case.profile}-case.toml"
    path.write_text(text)
    return path


def walk(case: Case, cfg: AgentsConfig, scale: float, out: Path) -> dict[str, Any]:
    """The load generator's agent walk on the case's simulator; the document's agent answer."""
    with SimulatorProcess(str(profile_file(case, scale, out))) as sim:
        config = LoadgenConfig.model_validate({
            "lanes": [{"name": "lane", "url": sim.url, "api": "llamacpp"}],
            "ladder": {"concurrency": [1], "drift_reference": False}, "warmup_s": 0.5, "min_window_s": 1,
            "max_window_s": 2, "progress": False, "metrics_port": None, "max_loop_lag_s": 0.05,
            "workload": {"prompt_tokens": {"value": 16}, "output_tokens": {"value": 4}},
            "agents": cfg.model_dump()})
        manifest = asyncio.run(run_ladder(config, out / "run", progress=True))
    return agents_model(manifest.agents["lane"]).model_dump(mode="json")


def decided_bracket(said: dict[str, Any]) -> tuple[int, int | None]:
    """What the walk's significant rungs say: the most sessions that held significantly (0: none) and the fewest
    that failed significantly (None: none did); the truth lies in [low, high)."""
    rungs = [r for r in said["rungs"] if r["decided"] and r["valid"]]
    low = max((r["sessions"] for r in rungs if r["holds"]), default=0)
    high = min((r["sessions"] for r in rungs if not r["holds"] and r["sessions"] > low), default=None)
    return low, high


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", type=int, default=6)
    parser.add_argument("--first-seed", type=int, default=1)
    parser.add_argument("--time-scale", type=float, default=0.1)
    parser.add_argument("--window-s", type=float, default=20.0)
    parser.add_argument("--max-sessions", type=int, default=128)
    parser.add_argument("--truth-turns", type=int, default=3000)
    parser.add_argument("--truth-only", action="store_true")
    args = parser.parse_args()
    met = covered = far = far_met = 0
    for seed in range(args.first_seed, args.first_seed + args.cases):
        case = draw(seed)
        cfg = agents_config(case, args.time_scale, args.window_s, args.max_sessions)
        t0 = time.perf_counter()
        best, margin = truth(case, cfg, args.time_scale, args.truth_turns)
        line = f"{case.describe()}: truth {best:>3} margin {margin:+.0%} ({time.perf_counter() - t0:.0f} s)"
        if args.truth_only:
            print(line, flush=True)
            continue
        with tempfile.TemporaryDirectory() as tmp:
            said = walk(case, cfg, args.time_scale, Path(tmp))
        got = said["max_sessions"] or 0
        assert isinstance(got, int)
        ok = got == best if best == 0 else abs(got / best - 1) <= 0.10
        bracket = decided_bracket(said)
        inside = bracket[0] <= best and (bracket[1] is None or best < bracket[1])
        met, covered = met + ok, covered + inside
        if margin >= FAR:
            far, far_met = far + 1, far_met + ok
        print(f"{line}; walk {got} ({said['status']}, {bracket}) {'within 10 %' if ok else 'OFF'}"
              f"; significant rungs bracket [{bracket[0]}, {bracket[1]}){' around the truth' if inside else ''}",
              flush=True)
    if not args.truth_only:
        print(f"within 10 % of the truth: {met} of {args.cases}; the truth inside the significant rungs' bracket: "
              f"{covered} of {args.cases}; cases at least {FAR:.0%} clear of the boundary: {far_met} of {far} within "
              "10 %")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
