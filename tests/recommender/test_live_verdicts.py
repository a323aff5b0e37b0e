"""The verdict matrix on live simulator lanes (load generator -> records -> recommender over real HTTP).

Each case's truth comes from the engine's model, not from the analysis, and each runs with two workload
seeds, so a verdict that holds one run in ten fails:

* decode starvation: ``dense`` with ``--batch 8192`` (a whole prompt is one step) and a share of 6000-token
  prompts stalls every running decode for ~600 ms per long prompt: flagged at every c >= 2. The same lane
  chunked (``--batch 256 --ubatch 256``) pauses a decode for one 256-token chunk, ~30 ms: flagged at none.
* admission: ``starving`` (lowest user first, newest first within a user) chunked, against ``dense`` FIFO
  with lognormal output lengths: at c=8 on 4 slots the unfair lane is flagged (fairness or prefill
  starvation), at c=2 (every user has a slot) it is not; FIFO never is.
* saturation: ``dense`` (4 slots) on the ladder 1, 2 with ``ladder.extend`` doubles to 8, finds the plateau and
  recommends 4, its slot count, while its first two rungs alone (the ladder 1, 2) are ``unsaturated``
  (``ladder_top``); with 8 slots, the ladder 2, 4 extends to 16 and recommends 8.

Short windows full of 600 ms prefills make throughput noisy, so the policy does not ask for stable
throughput (``max_throughput_ci_ratio``): the verdicts are the point.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from satbench.answer.analysis import analyze_lane
from satbench.answer.policy import Policy
from satbench.core.figures import StepFigures
from testkit.live import PROBES, VARIED, flagged, run_lane

POLICY = Policy(max_throughput_ci_ratio=10.0)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def figures(lane: dict[str, Any]) -> list[tuple[Any, ...]]:
    """What a failure shows: per rung, the pause p99, the users' wait/TPOT tests, the admission bound."""
    return [(s["concurrency"], s["pause_s"]["p99"], s["user_wait_p_value"], s["user_wait_ratio"],
             s["user_itl_ratio"], s["admission_wait_max_s"], s["admission_wait_bound_s"],
             {k: v["status"] for k, v in s["checks"].items()}) for s in lane["steps"]]


@pytest.mark.parametrize("seed", [3, 4])
def test_whole_prompt_prefill_starves_decodes_and_chunked_prefill_does_not(tmp_path: Path, seed: int) -> None:
    # 8 s windows: at c=2 a 5 s window holds ~20 requests and the 1 % exceedance test needs 2 of them held
    # (p < 0.05); with a fifth of them probes that is a coin's toss (seed 3 held 1: insufficient_data, honestly)
    starving = run_lane("dense", tmp_path / "whole", ladder=[2, 4], seed=seed, policy=POLICY, workload=PROBES,
                        batch=8192, window_s=8.0)
    chunked = run_lane("dense", tmp_path / "chunked", ladder=[2, 4], seed=seed, policy=POLICY, workload=PROBES,
                       batch=256, ubatch=256)
    assert flagged(starving, "decode_starvation") == [2, 4], figures(starving)
    assert starving["starvation"]["decode_flagged_at"] == [2, 4]
    assert (starving["recommended_concurrency"], starving["binding_constraint"]) == (None, "decode_starvation")
    assert flagged(chunked, "decode_starvation") == [], figures(chunked)
    assert chunked["recommended_concurrency"] is not None, figures(chunked)


@pytest.mark.parametrize("seed", [3, 4])
def test_unfair_admission_is_flagged_past_the_slots_and_fifo_never(tmp_path: Path, seed: int) -> None:
    # 8 s windows: the starved users are the ones with the fewest finished requests, so the test of their waits
    # needs enough of them; in 5 s windows on a loaded machine it fell to p ~ 0.1 (at a 5x wait ratio)
    unfair = run_lane("starving", tmp_path / "unfair", ladder=[2, 8], seed=seed, policy=POLICY, workload=VARIED,
                      batch=256, ubatch=256, window_s=8.0)
    fifo = run_lane("dense", tmp_path / "fifo", ladder=[2, 8], seed=seed, policy=POLICY, workload=VARIED)
    assert flagged(unfair, "fairness", "prefill_starvation") == [8], figures(unfair)
    assert flagged(fifo, "fairness", "prefill_starvation") == [], figures(fifo)
    assert fifo["fairness"]["ok"] and fifo["starvation"]["prefill_ok"], figures(fifo)


def test_a_ladder_below_the_slots_is_unsaturated_and_extension_finds_the_knee(tmp_path: Path) -> None:
    extended = run_lane("dense", tmp_path / "extended", ladder=[1, 2], seed=3, policy=POLICY, extend=True)
    assert [s["concurrency"] for s in extended["steps"]] == [1, 2, 4, 8]
    assert (extended["status"], extended["recommended_concurrency"], extended["binding_constraint"]) == (
        "ok", 4, "throughput_plateau"), figures(extended)
    # the ladder 1, 2 without the extension is that walk's first two rungs (the extension only adds rungs after
    # them): judged alone, its top still gains, so the answer is a lower bound
    short = analyze_lane("lane", [StepFigures.from_dict(s) for s in extended["steps"] if s["concurrency"] <= 2],
                         POLICY)
    assert (short.status, short.binding_constraint, short.saturation_concurrency) == (
        "unsaturated", "ladder_top", None), figures(extended)


def test_eight_slots_extended_past_the_ladder_recommend_eight(tmp_path: Path) -> None:
    lane = run_lane("dense", tmp_path / "eight", ladder=[2, 4], seed=4, policy=POLICY, extend=True, slots=8)
    assert [s["concurrency"] for s in lane["steps"]] == [2, 4, 8, 16], figures(lane)
    answer = (lane["status"], lane["recommended_concurrency"], lane["binding_constraint"],
              lane["saturation_concurrency"])
    # on a loaded machine (three workers and more) the 8 -> 16 doubling's interval straddled the policy's gain
    # once: the walk then says it is undecided, one doubling high at most; never a settled answer past 8
    assert answer == ("ok", 8, "throughput_plateau", 8) or (
        answer[0] == "undecided" and answer[1] in (8, 16)), (answer, figures(lane))
