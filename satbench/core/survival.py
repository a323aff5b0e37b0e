"""Waits that may not have ended: censored observations and the log-rank test across users.

A request that is still waiting for a slot when the window closes (or when the load generator stops
following it) has a wait that is known only to be *at least* what it waited so far: a right-censored
observation. Leaving such requests out, as a figure over finished requests does, hides exactly the
requests a starving scheduler holds longest; a user admitted never cannot appear at all. Counting the wait
so far as if it had ended understates it. Survival analysis handles both (Kaplan and Meier 1958).

- ``Wait``: one observation, its duration and whether it ended (``ended``) or was cut off (censored).
- ``logrank_p_value``: do the users' waits share one distribution? The k-sample log-rank test (Mantel 1966;
  Peto and Peto 1972): at each time a wait ends, the ending is shared among the groups in proportion to how
  many of each were still waiting ("at risk"); a group whose waits end less often than its share (users
  held back) accumulates observed-minus-expected. It is rank-based in time (no distribution of waits
  assumed), uses the censored waits as what they are (at risk until cut off, no ending), and is the most
  powerful rank test against proportional hazards, the shape of an admission that favours some users by a
  constant factor. Its usual chi-squared reference fails with the few waits per user a window has (16
  users with 3-5 waits each: 8 % of fair windows rejected at 0.001; 64 users with 1-3: 95 %), because a
  group of one or two waits is far from normal; so the p-value comes from permutations instead (Peto and
  Peto's scores ``ended - H(t)``, H the pooled Nelson-Aalen cumulative hazard, summed per user; the statistic
  ``sum_u S_u**2 / n_u`` against 1999 random relabellings with a fixed seed: exact under exchangeable users,
  deterministic, about 20 ms). Groups with no observation are left out; fewer than two groups, or no wait
  that ended, give ``None``.
- ``mean_wait``: the mean of the waits with censored ones at their length so far: a lower bound of the mean,
  so a material excess it shows is real.

The smallest effect the test detects at the sizes a session has is measured by ``bench/verdict_power.py``
and stated in docs/DESIGN.md ("fairness").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["Wait", "logrank_p_value", "logrank_scores", "mean_wait"]


@dataclass(frozen=True, slots=True)
class Wait:
    """One wait: its length in seconds, and whether it ended (False: still waiting when last seen)."""

    seconds: float
    ended: bool = True


def mean_wait(waits: Sequence[Wait]) -> float | None:
    """Mean length of ``waits``, a censored one counted at its length so far (a lower bound); None if empty."""
    if not waits:
        return None
    return sum(w.seconds for w in waits) / len(waits)


def logrank_scores(waits: Sequence[Wait]) -> np.ndarray:
    """Each wait's log-rank score ``ended - H(t)``: whether it ended, less the pooled Nelson-Aalen
    cumulative hazard at its length (ties: the hazard counts the endings at that length). A group's sum of
    scores is its observed-minus-expected endings, the log-rank numerator."""
    times = np.asarray([w.seconds for w in waits], dtype=float)
    ended = np.asarray([w.ended for w in waits], dtype=bool)
    order = np.argsort(times, kind="stable")
    t_sorted = times[order]
    # at risk at t: observations with time >= t
    at_risk = len(times) - np.searchsorted(t_sorted, t_sorted, side="left")
    events = ended[order].astype(float)
    uniq, first = np.unique(t_sorted, return_index=True)
    deaths = np.add.reduceat(events, first)
    hazard = np.cumsum(deaths / at_risk[first])
    cumulative = hazard[np.searchsorted(uniq, times)]
    return ended.astype(float) - cumulative


def logrank_p_value(groups: Sequence[Sequence[Wait]], permutations: int = 1999, seed: int = 0) -> float | None:
    """Permutation log-rank p-value that ``groups`` share one distribution of waits (module docstring)."""
    kept = [g for g in groups if g]
    if len(kept) < 2:
        return None
    pooled = [w for g in kept for w in g]
    if not any(w.ended for w in pooled):
        return None
    scores = logrank_scores(pooled)
    scores = scores - scores.mean()
    if not np.any(np.abs(scores) > 1e-12):
        return None
    sizes = np.asarray([len(g) for g in kept], dtype=float)
    labels = np.repeat(np.arange(len(kept)), sizes.astype(int))

    n_groups = len(kept)

    def statistic(lab: np.ndarray) -> np.ndarray:
        rows = np.repeat(np.arange(lab.shape[0]) * n_groups, lab.shape[1])
        sums = np.bincount(rows + lab.ravel(), weights=np.tile(scores, lab.shape[0]),
                           minlength=lab.shape[0] * n_groups).reshape(lab.shape[0], n_groups)
        return (sums ** 2 / sizes).sum(axis=1)

    observed = statistic(labels[None, :])[0]
    rng = np.random.default_rng(seed)
    shuffled = rng.permuted(np.tile(labels, (permutations, 1)), axis=1)
    null = statistic(shuffled)
    return float((1 + np.count_nonzero(null >= observed - 1e-9)) / (permutations + 1))
