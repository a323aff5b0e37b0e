"""``core.survival`` against the log-rank test's published worked examples and small cases counted by hand.

Truth: the log-rank numerator of a group is its observed less expected endings, ``O - E``, with
``E = sum_j d_j * n_gj / n_j`` over the times an ending happens (Mantel 1966); a wait's Peto score is
``ended - H(t)``, so a group's scores sum to its ``O - E``. Published figures: the leukaemia remission data of
Freireich et al. (1963) as given by Gehan (1965) (R ``MASS::gehan``; R ``survdiff``: expected 19.3 and 10.7,
chi-squared 16.8, p = 4.17e-5; Kleinbaum and Klein, Survival Analysis, ch. 2: 16.79) and the AML maintenance
data of Miller (1981) (R ``survival::aml``; ``survdiff``: observed 7 and 11, expected 10.69 and 7.31,
chi-squared 3.4, p = 0.0653). ``scipy.stats.logrank`` computes the same two-sample statistic and checks the
transcription. The permutation p-value is checked against the exact permutation distribution, enumerated by
hand for four waits.
"""

from __future__ import annotations

import math

import pytest
from scipy import stats

from satbench.core.survival import Wait, logrank_p_value, logrank_scores, mean_wait

# Gehan (1965): weeks in remission; 6-MP arm, "+" (censored) as ended=False; placebo arm, all relapsed.
SIX_MP = [*(Wait(t) for t in (6, 6, 6, 7, 10, 13, 16, 22, 23)),
          *(Wait(t, ended=False) for t in (6, 9, 10, 11, 17, 19, 20, 25, 32, 32, 34, 35))]
PLACEBO = [Wait(t) for t in (1, 1, 2, 2, 3, 4, 4, 5, 5, 8, 8, 8, 8, 11, 11, 12, 12, 15, 17, 22, 23)]

# Miller (1981): weeks to relapse of AML; maintained and non-maintained chemotherapy.
MAINTAINED = [Wait(9), Wait(13), Wait(13, False), Wait(18), Wait(23), Wait(28, False), Wait(31), Wait(34),
              Wait(45, False), Wait(48), Wait(161, False)]
NOT_MAINTAINED = [Wait(5), Wait(5), Wait(8), Wait(8), Wait(12), Wait(16, False), Wait(23), Wait(27), Wait(30),
                  Wait(33), Wait(43), Wait(45)]


def censored_data(waits: list[Wait]) -> stats.CensoredData:
    return stats.CensoredData(uncensored=[w.seconds for w in waits if w.ended],
                              right=[w.seconds for w in waits if not w.ended])


def test_mean_wait_counts_a_censored_wait_at_its_length_so_far() -> None:
    assert mean_wait([]) is None
    assert mean_wait([Wait(1.0), Wait(3.0, ended=False)]) == 2.0
    assert mean_wait([Wait(0.5, ended=False)]) == 0.5


def test_scores_by_hand_without_ties() -> None:
    # four endings at 1, 2, 3, 4: at risk 4, 3, 2, 1, so H = 1/4, 7/12, 13/12, 25/12 and the scores 1 - H
    scores = logrank_scores([Wait(1.0), Wait(2.0), Wait(3.0), Wait(4.0)])
    assert scores.tolist() == pytest.approx([3 / 4, 5 / 12, -1 / 12, -13 / 12])


def test_no_wait_has_no_score() -> None:
    assert logrank_scores([]).tolist() == []


def test_scores_by_hand_with_ties_and_censoring() -> None:
    # at 1: two endings among 4 at risk (the wait censored at 1 is at risk there, censoring after endings),
    # H(1) = 2/4; at 2: one ending among 1, H(2) = 1.5; the censored wait scores 0 - H(1)
    scores = logrank_scores([Wait(2.0), Wait(1.0), Wait(1.0, ended=False), Wait(1.0)])
    assert scores.tolist() == pytest.approx([-0.5, 0.5, -0.5, 0.5])
    # censored before any ending: no hazard yet, score 0; the order of the input does not matter
    assert logrank_scores([Wait(0.5, ended=False), Wait(1.0)]).tolist() == pytest.approx([0.0, 0.0])
    assert logrank_scores([Wait(3.0, False), Wait(1.0), Wait(2.0)]).tolist() == pytest.approx(
        [-(1 / 3 + 1 / 2), 1 - 1 / 3, 1 - 1 / 3 - 1 / 2])


def test_group_score_sums_are_the_published_observed_minus_expected() -> None:
    scores = logrank_scores(SIX_MP + PLACEBO)
    six_mp, placebo = scores[:len(SIX_MP)].sum(), scores[len(SIX_MP):].sum()
    assert six_mp == pytest.approx(9 - 19.25, abs=0.01)  # survdiff: observed 9, expected 19.3 (19.25)
    assert placebo == pytest.approx(21 - 10.75, abs=0.01)
    scores = logrank_scores(MAINTAINED + NOT_MAINTAINED)
    assert scores[:len(MAINTAINED)].sum() == pytest.approx(7 - 10.69, abs=0.005)
    assert scores[len(MAINTAINED):].sum() == pytest.approx(11 - 7.31, abs=0.005)


def test_published_examples_transcribed_as_scipy_reads_them() -> None:
    gehan = stats.logrank(censored_data(SIX_MP), censored_data(PLACEBO))
    assert gehan.statistic ** 2 == pytest.approx(16.79, abs=0.01)
    aml = stats.logrank(censored_data(MAINTAINED), censored_data(NOT_MAINTAINED))
    assert aml.statistic ** 2 == pytest.approx(3.40, abs=0.01)
    assert aml.pvalue == pytest.approx(0.0653, abs=0.0001)


def test_permutation_p_value_agrees_with_the_published_log_rank() -> None:
    # AML: chi-squared p 0.0653; 1999 relabellings estimate a p of 0.065 with a standard error of 0.0055
    p = logrank_p_value([MAINTAINED, NOT_MAINTAINED])
    assert p is not None and abs(p - 0.0653) < 0.015
    # Gehan: p = 4.2e-5, so of 1999 relabellings about 0.08 reach the observed statistic: p is at its floor
    p = logrank_p_value([SIX_MP, PLACEBO])
    assert p is not None and p <= 2 / 2000


def test_permutation_p_value_is_the_exact_one_for_four_waits() -> None:
    # scores 3/4, 5/12, -1/12, -13/12 (above); two groups of two: the statistic is S_A**2 * (1/2 + 1/2) and of
    # the 6 ways to choose A, {1, 2} and {3, 4} give |S_A| = 7/6, the others 2/3, 2/3, 1/3, 1/3: exact p 2/6
    early, late = [Wait(1.0), Wait(2.0)], [Wait(3.0), Wait(4.0)]
    p = logrank_p_value([early, late])
    assert p is not None and abs(p - 1 / 3) < 0.04  # standard error of 1999 relabellings: 0.0105
    # three groups {2, 3}, {1}, {4}: the statistic sum S_u**2 / n_u is, by the pair in the group of two,
    # {1,2} 1.861, {2,3} 1.792, {1,3} 1.569, {3,4} 1.417, {2,4} 0.792, {1,4} 0.236 (the singletons' order
    # does not change it): two of six reach the observed 1.792, exact p 1/3 (summing S_u**2 without the
    # division by n_u would rank {3,4} and {1,2} above it: p 1/2)
    p = logrank_p_value([[Wait(2.0), Wait(3.0)], [Wait(1.0)], [Wait(4.0)]])
    assert p is not None and abs(p - 1 / 3) < 0.04
    # groups of one wait each: every relabelling gives the same statistic, so p is exactly 1
    assert logrank_p_value([[Wait(1.0)], [Wait(2.0)], [Wait(3.0)]]) == 1.0


def test_p_value_is_deterministic_and_never_below_its_resolution() -> None:
    groups = [MAINTAINED, NOT_MAINTAINED]
    assert logrank_p_value(groups) == logrank_p_value(groups)
    p = logrank_p_value([SIX_MP, PLACEBO], permutations=99)
    assert p is not None and p >= 1 / 100


@pytest.mark.parametrize(
    ("groups", "why"),
    [
        ([], "no group"),
        ([[Wait(1.0), Wait(2.0)]], "a single group"),
        ([[Wait(1.0)], []], "one group left once the empty one is left out"),
        ([[Wait(1.0, False)], [Wait(2.0, False)]], "all censored: no ending to compare"),
        ([[Wait(2.0)], [Wait(2.0)]], "every wait alike: every score the same"),
    ],
)
def test_p_value_is_none_where_nothing_can_be_compared(groups: list[list[Wait]], why: str) -> None:
    assert logrank_p_value(groups) is None, why


def test_empty_groups_are_left_out() -> None:
    assert logrank_p_value([[], MAINTAINED, [], NOT_MAINTAINED]) == logrank_p_value([MAINTAINED, NOT_MAINTAINED])


def test_a_held_back_group_is_found_and_a_fair_one_is_not() -> None:
    # 8 users of 6 waits of one distribution, each user first at a different length (fair); then user 0's waits
    # ten times as long (censored at the window's end, 20 s, where longer): a proportional hazard, the shape the
    # test is most powerful against
    base = [0.1, 0.2, 0.3, 0.5, 0.8, 1.3]
    fair = [[Wait(t * (1 + (u + k) % 8 / 100)) for k, t in enumerate(base)] for u in range(8)]
    held = [[Wait(min(10 * t, 20.0), 10 * t < 20.0) for t in base], *fair[1:]]
    p_fair, p_held = logrank_p_value(fair), logrank_p_value(held)
    assert p_fair is not None and p_fair > 0.5
    assert p_held is not None and p_held <= 0.002
    assert not math.isnan(p_held)
