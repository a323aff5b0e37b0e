"""The pure parts of a tune: dominance on significant evidence only, the pruned search, Pareto, tuned_block.

The rules' cases are tables: each row a measured candidate with the evidence its walk published, a candidate
it may or may not dominate, and the rule that must fire (or none). The noisy grids are in
``test_pruning_noise.py``; the answer's own rule in ``test_choice.py``.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from satbench.answer.models import LaneModel, TunedModel
from satbench.tune.answer import choose, fingerprint, pareto
from satbench.tune.document import lane_entry, tuned_block
from satbench.tune.grid import Candidate, grid, rank
from satbench.tune.search import Outcome, PauseCount, PruneRules, dominator, outcome_from_lane, search

CTX = 1024
RULES = PruneRules(min_gain=0.10, confidence=0.95, family=16, min_pause_requests=10)


def measured(p: int, b: int, rec: int | None, binding: str | None, t: float | None, *, status: str = "ok",
             starved: tuple[int, ...] = (), hw: float = 2.0, plateau: tuple[float, float] | None = None,
             next_rung: int | None = None, counts: tuple[PauseCount, ...] = (), bounded: bool = True) -> Outcome:
    ci = None if t is None else (t - hw, t + hw)
    return Outcome(Candidate(p, b, b, CTX), "measured", status=status, recommended=rec, binding=binding,
                   throughput_tok_s=t, throughput_ci_tok_s=ci, starved_at=starved, plateau=plateau,
                   next_rung=next_rung, pause_counts=counts, pauses_bounded=bounded)


FLAT = (-0.05, 0.04)  # a doubling shown flat: its gain interval entirely below 10 %
STRADDLING = (-0.03, 0.14)  # neither shown to pay nor shown flat
MANY = (PauseCount(2, 14, 100),)  # 14 of 100 requests held: p = 2e-12
FEW = (PauseCount(2, 4, 100),)  # 4 of 100: flagged at 5 % (p = 0.018), chance in a grid of 16
NO_COUNT = (PauseCount(2),)


def test_the_grid_walks_batches_largest_first_and_slots_ascending_and_ranks_cheapest_first() -> None:
    ids = [c.id for c in grid([4, 2], [(256, 256), (512, 512)], CTX)]
    assert ids == ["np2-b512-ub512-c2048", "np4-b512-ub512-c4096", "np2-b256-ub256-c2048", "np4-b256-ub256-c4096"]
    assert Candidate(4, 256, 128, CTX).flags("llamacpp") == "-np 4 -b 256 -ub 128 -c 4096"
    unified = Candidate(4, 256, 256, CTX, kv_unified=True, pool=3072)
    assert unified.id == "np4-b256-ub256-c3072-kvu" and unified.flags("llamacpp").endswith("-c 3072 -kvu")
    assert unified.layout_args() == ["-kvu"] and Candidate(2, 256, 256, CTX).layout_args() == ["--no-kv-unified"]
    assert [c.id for c in rank([unified, *grid([4, 2], [(256, 256), (512, 512)], CTX)])] == [
        "np2-b512-ub512-c2048", "np2-b256-ub256-c2048", "np4-b512-ub512-c4096", "np4-b256-ub256-c4096",
        "np4-b256-ub256-c3072-kvu"]


@pytest.mark.parametrize(("outcome", "candidate", "rule"), [
    # 1. below the slots on a plateau shown by its interval: more slots at the same batch are dominated
    (measured(8, 512, 4, "throughput_plateau", 100.0, plateau=FLAT, next_rung=8), Candidate(16, 512, 512, CTX),
     "entirely below"),
    (measured(8, 512, 4, "throughput_plateau", 100.0, plateau=STRADDLING, next_rung=8),
     Candidate(16, 512, 512, CTX), None),  # not shown flat: no pruning
    (measured(8, 512, 4, "throughput_plateau", 100.0, next_rung=8), Candidate(16, 512, 512, CTX), None),  # no interval
    (measured(8, 512, 8, "throughput_plateau", 100.0, plateau=FLAT, next_rung=16), Candidate(16, 512, 512, CTX), None),
    (measured(8, 512, 4, "ladder_top", 100.0, status="unsaturated"), Candidate(16, 512, 512, CTX), None),
    (measured(8, 512, 4, "errors", 100.0, next_rung=8), Candidate(16, 512, 512, CTX), None),  # a blip never prunes
    (measured(8, 512, 4, "throughput_plateau", 100.0, plateau=FLAT, next_rung=8), Candidate(16, 256, 256, CTX), None),
    # 1. below the slots on a latency objective broken where every user had a slot
    (measured(8, 512, 4, "slo_itl", 100.0, next_rung=8), Candidate(16, 512, 512, CTX), "every user had a slot"),
    (measured(3, 512, 2, "slo_ttft", 100.0, next_rung=4), Candidate(8, 512, 512, CTX), None),  # c=4 queued on 3
    # 2a. a batch that held every constraint, its pauses shown bounded: smaller batches at its slots
    (measured(4, 512, 4, "throughput_plateau", 100.0), Candidate(4, 256, 256, CTX), "held every constraint"),
    (measured(4, 512, 4, "throughput_plateau", 100.0, bounded=False), Candidate(4, 256, 256, CTX), None),
    (measured(4, 512, 4, "throughput_plateau", 100.0), Candidate(8, 256, 256, CTX), None),
    (measured(4, 512, 2, "slo_ttft", 100.0), Candidate(4, 256, 256, CTX), None),
    (measured(4, 512, 2, "errors", 100.0), Candidate(4, 256, 256, CTX), None),
    # 2b. decode pauses flagged at c <= slots on a count that stands at the grid's level
    (measured(2, 512, 1, "decode_starvation", 50.0, starved=(2,), counts=MANY), Candidate(4, 2048, 2048, CTX),
     "14 of 100 requests held"),
    (measured(2, 512, 1, "decode_starvation", 50.0, starved=(2,), counts=MANY), Candidate(2, 2048, 2048, CTX),
     "paused"),
    (measured(2, 512, 1, "decode_starvation", 50.0, starved=(2,), counts=FEW), Candidate(4, 512, 512, CTX), None),
    (measured(2, 512, 1, "decode_starvation", 50.0, starved=(2,), counts=NO_COUNT), Candidate(4, 512, 512, CTX),
     None),
    (measured(2, 2048, 1, "decode_starvation", 50.0, starved=(2,), counts=MANY), Candidate(4, 256, 256, CTX), None),
    (measured(2, 2048, None, "decode_starvation", None, status="degraded", starved=(4,),
              counts=(PauseCount(4, 14, 100),)), Candidate(4, 2048, 2048, CTX), None),  # flagged past its slots
])
def test_dominance_acts_only_on_significant_evidence(outcome: Outcome, candidate: Candidate, rule: str | None) -> None:
    hit = dominator(candidate, [outcome], RULES)
    assert (hit is None) == (rule is None), hit
    if rule is not None:
        assert hit is not None and rule in hit[1]


def test_a_pause_count_must_also_rest_on_enough_requests() -> None:
    few_requests = measured(2, 512, 1, "decode_starvation", 50.0, starved=(2,), counts=(PauseCount(2, 5, 6),))
    assert dominator(Candidate(4, 512, 512, CTX), [few_requests], RULES) is None
    strict = PruneRules(family=10**12)  # 14 of 100 (p = 2e-12) against a far larger family no longer stands
    assert dominator(Candidate(4, 2048, 2048, CTX), [measured(2, 512, 1, "decode_starvation", 50.0, starved=(2,),
                                                              counts=MANY)], strict) is None


STEP: dict[str, object] = {"concurrency": 0, "throughput_ci_tok_s": None, "checks": {}, "violations": [],
                           "usable": True, "window_s": 30.0, "requests": 100, "errors": 0, "requests_per_s": 1.0}


def step(c: int, t: float, hw: float, pause: str = "ok", limit: float = 0.25,
         top: tuple[float, ...] = (), n: int = 100) -> dict[str, object]:
    return {**STEP, "concurrency": c, "throughput_tok_s": t, "throughput_ci_tok_s": [t - hw, t + hw],
            "throughput_se_tok_s": hw / 2.0, "throughput_dof": 20.0,
            "checks": {"decode_starvation": {"status": pause, "measured": None, "limit": limit, "detail": ""}},
            "pause_excess_tail": {"n": n, "top": list(top)}}


def test_a_walks_document_gives_the_evidence_the_pruning_reads() -> None:
    lane: dict[str, Any] = {
        "status": "ok", "recommended_concurrency": 4, "binding_constraint": "throughput_plateau",
        "throughput_at_recommended_tok_s": 200.0, "saturation_concurrency": 4, "run_id": "r", "measured_at": None,
        "fairness": {"ok": True, "jain_min": None},
        "starvation": {"ok": False, "decode_stall_max_ratio": None, "prefill_wait_max_s": None},
        "steps": [step(1, 60.0, 2.0, "not_applicable"), step(2, 110.0, 3.0), step(4, 200.0, 4.0),
                  step(8, 205.0, 4.0, "flagged", top=(0.9,) * 12 + (0.1,) * 8)]}
    o = outcome_from_lane(Candidate(8, 512, 512, CTX), LaneModel.model_validate(lane), "f")
    assert o.throughput_ci_tok_s == (196.0, 204.0) and o.throughput_se_tok_s == 2.0 and o.throughput_dof == 20.0
    assert o.next_rung == 8 and o.plateau is not None and o.plateau[1] < 0.10  # 200 -> 205, +-2 %: flat
    assert o.pauses_bounded  # rungs 2 and 4 judged ok; the flag at 8 lies past the answer
    assert o.starved_at == (8,) and o.pause_counts == (PauseCount(8, 12, 100),)
    unjudged = {**lane, "steps": [step(1, 60.0, 2.0, "not_applicable"), step(2, 110.0, 3.0, "insufficient_data"),
                                  step(4, 200.0, 4.0)]}
    assert not outcome_from_lane(Candidate(8, 512, 512, CTX), LaneModel.model_validate(unjudged)).pauses_bounded
    assert outcome_from_lane(Candidate(8, 512, 512, CTX), LaneModel.model_validate({**lane, "steps": []})
                             ).throughput_ci_tok_s is None
    assert outcome_from_lane(Candidate(8, 512, 512, CTX), None).recommended is None  # the document has no answer


def synthetic_answer(c: Candidate) -> Outcome:
    """A lane with a knee at 4 busy slots whose whole-prompt batch (2048) starves decodes at c=2."""
    if c.batch >= 2048:
        return Outcome(c, "measured", status="ok", recommended=1, binding="decode_starvation",
                       throughput_tok_s=100.0, throughput_ci_tok_s=(97.0, 103.0), starved_at=(2,),
                       pause_counts=MANY)
    busy = min(c.parallel, 4)
    t = {1: 100.0, 2: 170.0, 4: 260.0}[busy] * (1.0 - 0.02 * (512 // c.batch - 1))  # smaller batch, less
    if c.parallel <= 4:
        return Outcome(c, "measured", status="ok", recommended=busy, binding="throughput_plateau",
                       throughput_tok_s=t, throughput_ci_tok_s=(t - 3.0, t + 3.0), pauses_bounded=True,
                       plateau=FLAT, next_rung=2 * busy)
    return Outcome(c, "measured", status="ok", recommended=4, binding="slo_itl", throughput_tok_s=t,
                   throughput_ci_tok_s=(t - 3.0, t + 3.0), pauses_bounded=True, next_rung=8)


def test_pruning_walks_fewer_candidates_and_gives_the_full_grids_answer() -> None:
    candidates = grid([1, 2, 4, 8, 16], [(2048, 2048), (512, 512), (256, 256), (128, 128)], CTX)
    walked: list[str] = []

    def measure(c: Candidate) -> Outcome:
        walked.append(c.id)
        return synthetic_answer(c)

    pruned = search(candidates, measure)
    full = search(candidates, synthetic_answer, prune=False)
    assert len(walked) <= len(candidates) // 2, walked
    a, b = choose(pruned, 0.1), choose(full, 0.1)
    assert a.winner is not None and b.winner is not None
    assert a.winner.candidate == b.winner.candidate == Candidate(4, 512, 512, CTX)
    skipped = [o for o in pruned if o.state == "pruned"]
    assert skipped and all(o.dominated_by and o.reason for o in skipped)


def test_pareto_marks_the_candidates_no_other_beats_on_both_throughputs() -> None:
    rows = pareto([measured(2, 512, 2, "throughput_plateau", 64.0), measured(4, 512, 4, "throughput_plateau", 80.0),
                   measured(8, 512, 8, "throughput_plateau", 78.0)])
    marks = {r.candidate: r.pareto_optimal for r in rows}
    assert marks == {"np2-b512-ub512-c2048": True, "np4-b512-ub512-c4096": True, "np8-b512-ub512-c8192": False}
    assert rows[0].throughput_per_user_tok_s == pytest.approx(20.0)


def test_the_fingerprint_is_stable_and_sensitive() -> None:
    q = {"lane": {"profile": "dense"}, "grid": {"parallel": [2, 4]}, "policy": {"min_gain_per_doubling": 0.1}}
    assert fingerprint(q) == fingerprint(dict(reversed(list(q.items()))))
    assert fingerprint(q) != fingerprint({**q, "grid": {"parallel": [2, 8]}})


def test_tuned_block_is_the_recommendations_documents_own_model() -> None:
    outcomes = [measured(2, 512, 2, "throughput_plateau", 63.0), measured(4, 512, 4, "throughput_plateau", 79.0),
                Outcome(Candidate(8, 512, 512, CTX), "pruned", reason="why", dominated_by="np4-b512-ub512-c4096")]
    candidates = [o.candidate for o in outcomes]
    lane = lane_entry(runtime="llamacpp", model="m.gguf", fingerprint="sha256:x", grid=candidates,
                      pairs=[(512, 512)], prune=True, outcomes=outcomes, choice=choose(outcomes, 0.1))
    block = tuned_block(lane, "tune-1")
    assert isinstance(block, TunedModel) and block.tune_id == "tune-1"
    assert block.settings == {"parallel": 4, "batch": 512, "ubatch": 512, "ctx_per_slot": CTX, "ctx_size": 4096,
                              "kv_unified": 0}
    assert block.flags == "-np 4 -b 512 -ub 512 -c 4096"
    assert block.recommended_concurrency == 4 and block.throughput_tok_s == 79.0
    assert block.runner_up and block.runner_up["candidate"] == "np2-b512-ub512-c2048"
    assert block.margin and block.margin["significant"] is True and block.fingerprint == "sha256:x"
    assert [c.state for c in block.candidates] == ["measured", "measured", "pruned"]
    assert list(itertools.chain.from_iterable(lane.grid.pairs)) == [512, 512]
    assert [c.verdict for c in lane.comparisons] == ["replaced"]
