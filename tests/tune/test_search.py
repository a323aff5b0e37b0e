"""The pure parts of a tune: dominance, the pruned search against the full grid, the choice, Pareto, tuned_lane."""

from __future__ import annotations

import itertools

import pytest

from satbench.tune.answer import beats, choose, fingerprint, pareto
from satbench.tune.document import lane_entry, tuned_lane
from satbench.tune.grid import Candidate, grid
from satbench.tune.search import Outcome, dominator, search

CTX = 1024


def measured(p: int, b: int, rec: int | None, binding: str | None, t: float | None, *, status: str = "ok",
             starved: tuple[int, ...] = (), hw: float = 2.0) -> Outcome:
    ci = None if t is None else (t - hw, t + hw)
    return Outcome(Candidate(p, b, b, CTX), "measured", status=status, recommended=rec, binding=binding,
                   throughput_tok_s=t, throughput_ci_tok_s=ci, starved_at=starved)


def test_the_grid_walks_batches_largest_first_and_slots_ascending() -> None:
    ids = [c.id for c in grid([4, 2], [(256, 256), (512, 512)], CTX)]
    assert ids == ["np2-b512-ub512-c2048", "np4-b512-ub512-c4096", "np2-b256-ub256-c2048", "np4-b256-ub256-c4096"]
    assert Candidate(4, 256, 128, CTX).flags("llamacpp") == "-np 4 -b 256 -ub 128 -c 4096"


@pytest.mark.parametrize(("outcome", "candidate", "rule"), [
    # 1. an answer below the slot count (not the slot cap): more slots at the same batch are dominated
    (measured(8, 512, 4, "throughput_plateau", 100.0), Candidate(16, 512, 512, CTX), "below its 8 slots"),
    (measured(8, 512, 8, "throughput_plateau", 100.0), Candidate(16, 512, 512, CTX), None),
    (measured(8, 512, 4, "ladder_top", 100.0, status="unsaturated"), Candidate(16, 512, 512, CTX), None),
    (measured(8, 512, 4, "throughput_plateau", 100.0), Candidate(16, 256, 256, CTX), None),
    # 2a. a batch that holds every constraint: smaller batches at its slots are dominated
    (measured(4, 512, 4, "throughput_plateau", 100.0), Candidate(4, 256, 256, CTX), "held every constraint"),
    (measured(4, 512, 4, "throughput_plateau", 100.0), Candidate(8, 256, 256, CTX), None),
    (measured(4, 512, 2, "slo_ttft", 100.0), Candidate(4, 256, 256, CTX), None),
    # 2b. paused past the objective at c <= slots: as large a batch with as many slots is dominated
    (measured(2, 512, 1, "decode_starvation", 50.0, starved=(2,)), Candidate(4, 2048, 2048, CTX), "paused"),
    (measured(2, 512, 1, "decode_starvation", 50.0, starved=(2,)), Candidate(2, 2048, 2048, CTX), "paused"),
    (measured(2, 2048, 1, "decode_starvation", 50.0, starved=(2,)), Candidate(4, 256, 256, CTX), None),
    (measured(2, 2048, None, "decode_starvation", None, status="degraded", starved=(4,)),
     Candidate(4, 2048, 2048, CTX), None),
])
def test_dominance_rules(outcome: Outcome, candidate: Candidate, rule: str | None) -> None:
    hit = dominator(candidate, [outcome])
    assert (hit is None) == (rule is None), hit
    if rule is not None:
        assert hit is not None and rule in hit[1]


def synthetic_answer(c: Candidate) -> Outcome:
    """A lane with a knee at 4 busy slots whose whole-prompt batch (2048) starves decodes at c=2."""
    if c.batch >= 2048:
        return Outcome(c, "measured", status="ok", recommended=1, binding="decode_starvation",
                       throughput_tok_s=100.0, throughput_ci_tok_s=(97.0, 103.0), starved_at=(2,))
    busy = min(c.parallel, 4)
    t = {1: 100.0, 2: 170.0, 4: 260.0}[busy] * (1.0 - 0.02 * (512 // c.batch - 1))  # smaller batch, less
    binding = "throughput_plateau" if c.parallel <= 4 else "slo_itl"
    return Outcome(c, "measured", status="ok", recommended=busy, binding=binding, throughput_tok_s=t,
                   throughput_ci_tok_s=(t - 3.0, t + 3.0))


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


@pytest.mark.parametrize("seed", range(20))
def test_pruning_never_changes_the_answer_on_lanes_that_keep_the_assumptions(seed: int) -> None:
    knee, starving = 2 ** (seed % 4), 2048 if seed % 2 else 10**6
    slopes = (0.9, 0.6, 0.3)

    def answer(c: Candidate) -> Outcome:
        if c.batch >= starving:
            return Outcome(c, "measured", status="ok", recommended=1, binding="decode_starvation",
                           throughput_tok_s=50.0, throughput_ci_tok_s=(49.0, 51.0), starved_at=(2,))
        busy = min(c.parallel, knee)
        t = sum(100.0 * slopes[min(i, 2)] for i in range(busy.bit_length())) * (1 - 0.01 * (2048 // c.batch))
        bound = "throughput_plateau" if c.parallel <= knee else "slo_itl"
        return Outcome(c, "measured", status="ok", recommended=busy, binding=bound, throughput_tok_s=t,
                       throughput_ci_tok_s=(t - 1.0, t + 1.0))

    candidates = grid([2, 4, 8, 16], [(2048, 2048), (512, 512), (128, 128)], CTX)
    a = choose(search(candidates, answer), 0.1).winner
    b = choose(search(candidates, answer, prune=False), 0.1).winner
    assert a is not None and b is not None and a.candidate == b.candidate


def test_the_winner_is_the_fewest_slots_the_best_does_not_beat() -> None:
    four = measured(4, 512, 4, "throughput_plateau", 79.0, hw=3.0)
    eight = measured(8, 512, 4, "slo_itl", 80.0, hw=3.0)  # more slots, the same four users busy
    two = measured(2, 512, 2, "throughput_plateau", 63.0, hw=2.0)
    choice = choose([two, four, eight], 0.1)
    assert choice.best is eight and choice.winner is four
    assert choice.runner_up is eight and choice.margin_tok_s == pytest.approx(-1.0)
    assert choice.significant is False
    assert beats(four, two, 0.1) and not beats(eight, four, 0.1)


def test_a_significant_gain_below_the_policys_gain_does_not_pay_for_more_slots() -> None:
    small = measured(4, 512, 4, "throughput_plateau", 100.0, hw=0.5)
    large = measured(8, 512, 8, "throughput_plateau", 105.0, hw=0.5)
    assert choose([small, large], 0.1).winner is small
    assert choose([small, large], 0.04).winner is large


def test_batches_at_one_slot_count_are_decided_by_throughput() -> None:
    whole = measured(4, 2048, 1, "decode_starvation", 100.0, starved=(2,))
    chunked = measured(4, 256, 4, "throughput_plateau", 180.0)
    choice = choose([whole, chunked], 0.1)
    assert choice.winner is chunked and choice.significant


def test_at_one_slot_count_the_larger_batch_wins_unless_a_smaller_is_significantly_better() -> None:
    # bench/tune_cost.py measured these two within the noise: the pruned search (which skips the smaller batch
    # once the larger held every constraint) and the full grid must then give the same winner
    large = measured(8, 512, 8, "throughput_plateau", 806.0, hw=50.0)
    small = measured(8, 256, 8, "throughput_plateau", 813.0, hw=50.0)
    assert choose([large, small], 0.1).winner is large and choose([small, large], 0.1).winner is large
    # a significant gain at the same slots needs no policy gain: there are no extra slots to pay for
    faster = measured(8, 256, 8, "throughput_plateau", 860.0, hw=10.0)
    assert choose([measured(8, 512, 8, "throughput_plateau", 806.0, hw=10.0), faster], 0.1).winner is faster


def test_no_feasible_candidate_is_no_answer() -> None:
    refused = Outcome(Candidate(4, 512, 512, CTX), "refused", reason="error: KV cache does not fit")
    degraded = measured(2, 512, None, "decode_starvation", None, status="degraded")
    assert choose([refused, degraded], 0.1).winner is None


def test_pareto_marks_the_candidates_no_other_beats_on_both_throughputs() -> None:
    rows = pareto([measured(2, 512, 2, "throughput_plateau", 64.0), measured(4, 512, 4, "throughput_plateau", 80.0),
                   measured(8, 512, 8, "throughput_plateau", 78.0)])
    marks = {r["candidate"]: r["pareto_optimal"] for r in rows}
    assert marks == {"np2-b512-ub512-c2048": True, "np4-b512-ub512-c4096": True, "np8-b512-ub512-c8192": False}
    assert rows[0]["throughput_per_user_tok_s"] == pytest.approx(20.0)


def test_the_fingerprint_is_stable_and_sensitive() -> None:
    q = {"lane": {"profile": "dense"}, "grid": {"parallel": [2, 4]}, "policy": {"min_gain_per_doubling": 0.1}}
    assert fingerprint(q) == fingerprint(dict(reversed(list(q.items()))))
    assert fingerprint(q) != fingerprint({**q, "grid": {"parallel": [2, 8]}})


def test_tuned_lane_is_the_block_for_the_recommendations_document() -> None:
    outcomes = [measured(2, 512, 2, "throughput_plateau", 63.0), measured(4, 512, 4, "throughput_plateau", 79.0),
                Outcome(Candidate(8, 512, 512, CTX), "pruned", reason="why", dominated_by="np4-b512-ub512-c4096")]
    candidates = [o.candidate for o in outcomes]
    lane = lane_entry(runtime="llamacpp", model="m.gguf", fingerprint="sha256:x", grid=candidates,
                      pairs=[(512, 512)], prune=True, outcomes=outcomes, choice=choose(outcomes, 0.1))
    block = tuned_lane(lane)["tuned"]
    assert block["settings"] == {"parallel": 4, "batch": 512, "ubatch": 512, "ctx_per_slot": CTX, "ctx_size": 4096}
    assert block["flags"] == "-np 4 -b 512 -ub 512 -c 4096"
    assert block["recommended_concurrency"] == 4 and block["throughput_tok_s"] == 79.0
    assert block["runner_up"]["candidate"] == "np2-b512-ub512-c2048"
    assert block["margin"]["significant"] is True and block["fingerprint"] == "sha256:x"
    assert [c["state"] for c in block["candidates"]] == ["measured", "measured", "pruned"]
    assert list(itertools.chain.from_iterable(lane["grid"]["pairs"])) == [512, 512]
