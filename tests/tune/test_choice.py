"""The answer's rule: pairwise from the cheapest, significant and by the policy's gain, and its property.

Expected winners come from the scenario's numbers (which candidate is faster by how much, at which
intervals), never from ``choose`` run on another set; the property test draws random grids with unequal
intervals (hypothesis) and checks that a candidate which never holds the lead is irrelevant.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from satbench.tune.answer import beats, choose, compare, difference
from satbench.tune.grid import Candidate
from satbench.tune.search import Outcome

CTX = 1024


def m(p: int, t: float, hw: float | None = 2.0, *, b: int = 512, status: str = "ok", se: float | None = None,
      dof: float | None = None) -> Outcome:
    return Outcome(Candidate(p, b, b, CTX), "measured", status=status, recommended=p, binding="throughput_plateau",
                   throughput_tok_s=t, throughput_ci_tok_s=None if hw is None else (t - hw, t + hw),
                   throughput_se_tok_s=se, throughput_dof=dof)


def test_an_irrelevant_sixteen_slots_leave_four_slots_the_winner() -> None:
    """The audit's lane: +24 % from 2 to 4 slots far beyond both intervals, then nearly flat to 16."""
    two, four, sixteen = m(2, 138.6), m(4, 171.9), m(16, 182.8)
    assert choose([two, four], 0.1).winner is four
    choice = choose([two, four, sixteen], 0.1)
    assert choice.winner is four and choice.best is sixteen
    assert [c.verdict for c in choice.comparisons] == ["replaced", "gain_short"]  # 16 vs 4: 3 % a doubling
    assert choice.comparisons[1].gain_per_doubling == pytest.approx((182.8 / 171.9) ** 0.5 - 1)
    assert choice.open == () and choice.held == {two.candidate.id, four.candidate.id}


def test_more_slots_pay_only_by_the_gain_measured_from_the_holder() -> None:
    small, large = m(4, 100.0, 0.5), m(8, 105.0, 0.5)
    assert choose([small, large], 0.1).winner is small  # significant, but 5 % for a doubling
    assert choose([small, large], 0.04).winner is large
    # 1 -> 2 -> 8: 8 slots gain 10.7 % a doubling over 2 (the holder), although 48 % over 1
    one, two, eight = m(1, 100.0), m(2, 150.0), m(8, 184.0)
    assert choose([one, two, eight], 0.1).winner is eight
    assert choose([one, two, m(8, 180.0)], 0.1).winner is two  # 9.5 % a doubling over 2


def test_at_one_slot_count_the_larger_batch_holds_unless_a_smaller_is_significantly_faster() -> None:
    large, small = m(8, 806.0, 50.0), m(8, 813.0, 50.0, b=256)
    assert choose([large, small], 0.1).winner is large and choose([small, large], 0.1).winner is large
    faster = m(8, 860.0, 10.0, b=256)
    assert choose([m(8, 806.0, 10.0), faster], 0.1).winner is faster  # no extra slots: no gain asked
    whole = Outcome(Candidate(4, 2048, 2048, CTX), "measured", status="ok", recommended=1,
                    binding="decode_starvation", throughput_tok_s=100.0, throughput_ci_tok_s=(97.0, 103.0))
    chunked = m(4, 180.0, b=256)
    choice = choose([whole, chunked], 0.1)
    assert choice.winner is chunked and choice.significant


def test_a_smaller_batch_meets_its_own_slot_counts_holder_not_fewer_slots() -> None:
    """np8-b512 gains 9.5 % a doubling over np4 (short); np8-b256, no faster than np8-b512, would gain 11 %
    over np4 on its own draw. It is np8's larger batch that challenges np4, so np4 holds."""
    four, eight, eight_small = m(4, 186.0, 8.0), m(8, 203.7, 8.0), m(8, 206.7, 8.0, b=256)
    choice = choose([four, eight, eight_small], 0.1)
    assert choice.winner is four
    assert ("np8-b256-ub256-c8192", "np8-b512-ub512-c8192", "not_significant") in {
        (c.challenger, c.holder, c.verdict) for c in choice.comparisons}


def test_a_missing_interval_is_infinite_uncertainty() -> None:
    known, unknown = m(2, 100.0), m(4, 300.0, None)
    assert not beats(unknown, known, 0.1)
    choice = choose([known, unknown], 0.1)
    assert choice.winner is known and [o.candidate.id for o in choice.open] == [unknown.candidate.id]
    assert math.isinf(difference(unknown, known)[1])


def test_the_difference_uses_standard_errors_at_the_policys_confidence() -> None:
    a, b = m(4, 110.0, None, se=4.0, dof=30.0), m(4, 100.0, None, se=3.0, dof=30.0)
    diff, half = difference(a, b, 0.95)
    assert diff == 10.0 and half == pytest.approx(2.01 * 5.0, rel=0.01)  # Welch dof ~ 55, t ~ 2.004
    assert compare(a, b, 0.1, 0.95).verdict == "not_significant"
    assert compare(a, b, 0.1, 0.80).verdict == "replaced"  # at 80 % the same difference is shown


def test_undecided_answers_count_and_unknown_statuses_do_not() -> None:
    two, four = m(2, 100.0), m(4, 140.0, status="undecided")
    assert choose([two, four], 0.1).winner is four
    assert choose([two, m(4, 140.0, status="some_new_status")], 0.1).winner is two
    assert choose([m(4, 140.0, status="degraded")], 0.1).winner is None


SLOTS = st.sampled_from([1, 2, 4, 8, 16])
BATCH = st.sampled_from([128, 256, 512, 2048])


@st.composite
def outcome(draw: st.DrawFn) -> Outcome:
    p, b = draw(SLOTS), draw(BATCH)
    t = draw(st.floats(10.0, 500.0))
    width = draw(st.one_of(st.none(), st.floats(0.0, 60.0)))
    if draw(st.booleans()) and width is not None:
        return m(p, t, None, b=b, se=width / 2.0, dof=draw(st.floats(2.0, 60.0)))
    return m(p, t, width, b=b)


def distinct(outcomes: list[Outcome]) -> list[Outcome]:
    seen: dict[Candidate, Outcome] = {}
    for o in outcomes:
        seen.setdefault(o.candidate, o)
    return list(seen.values())


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(st.lists(outcome(), min_size=1, max_size=12).map(distinct), outcome(), st.sampled_from([0.0, 0.05, 0.1]))
def test_a_candidate_that_never_holds_the_lead_never_changes_the_winner(grid: list[Outcome], extra: Outcome,
                                                                        min_gain: float) -> None:
    choice = choose(grid, min_gain)
    assert choice.winner is not None
    for irrelevant in [o for o in grid if o.candidate.id not in choice.held]:
        smaller = choose([o for o in grid if o is not irrelevant], min_gain)
        assert smaller.winner is choice.winner, irrelevant.candidate.id
    if extra.candidate not in {o.candidate for o in grid}:
        larger = choose([*grid, extra], min_gain)
        if extra.candidate.id not in larger.held:
            assert larger.winner is choice.winner
