"""How the lane walk reads a rung whose decode starvation is not settled (``answer.judges.decode_check``'s
``insufficient_data``: neither starvation nor at most 1 % of its requests held past the stall limit shown).

The share held past the limit does not fall as concurrency grows (more users, each prefilling in turn beside
every decode), so a higher rung shown within the limit (below any rung shown starved) settles a lower one.
Short of that, a rung whose requests point past 1 % (by their count, or by the tail of their pauses:
``core.statistics.tail_share``) ends the walk below it, ``undecided`` (the answer may be one doubling low), and
one whose point lies within is accepted, an answer resting on it ``undecided`` (one doubling high). DESIGN.md,
"decode starvation", says why; docs/accuracy.md measures it.
"""

from __future__ import annotations

from collections.abc import Sequence

from satbench.answer.judges import Check
from satbench.answer.verdicts import StepVerdict
from satbench.core.figures import StepFigures
from satbench.core.statistics import tail_share

__all__ = ["starvation_open", "starvation_stops", "unsettled_check"]


def unsettled_check(verdicts: Sequence[StepVerdict], i: int) -> Check | None:
    """Rung ``i``'s decode-starvation check where it is not settled, by itself or by a higher rung shown within
    the limit (module docstring); ``None`` where it is settled."""
    check = verdicts[i].checks.get("decode_starvation")
    if check is None or check.status != "insufficient_data":
        return None
    for verdict in verdicts[i + 1:]:
        above = verdict.checks.get("decode_starvation")
        if above is not None and above.status == "flagged":
            break  # a starved rung above: the ones beyond it cannot speak for this one
        if above is not None and above.status == "ok" and above.limit is not None:
            return None
    return check


def starvation_stops(steps: Sequence[StepFigures], verdicts: Sequence[StepVerdict], i: int) -> str | None:
    """Why the walk stops below rung ``i`` (``steps[i]``, judged ``verdicts[i]``): its decode starvation is not
    settled and its requests point past the policy's 1 %, by their count or by the tail of their pauses.
    ``None`` where the walk may go on."""
    check = unsettled_check(verdicts, i)
    if check is None:
        return None
    step = steps[i]
    tail = step.pause_excess_tail
    point = 1.0 if check.limit is None or not tail.n else tail_share(tail.top, tail.n, check.limit)
    if point <= 1 - 0.99 and (check.measured is None or check.limit is None or check.measured <= check.limit):
        return None
    return (f"decode starvation at c={step.concurrency} is not settled: {check.detail}; the answer may be one "
            f"doubling low")


def starvation_open(verdicts: Sequence[StepVerdict], concurrency: int) -> str | None:
    """Why the answer's rung is not shown free of decode starvation, where the walk accepted it on its requests
    pointing within the stall limit: the answer is then ``undecided``, not settled on a check that could not
    decide. ``None`` otherwise."""
    i = next((i for i, v in enumerate(verdicts) if v.concurrency == concurrency), None)
    check = None if i is None else unsettled_check(verdicts, i)
    if check is None:
        return None
    return (f"decode starvation at c={concurrency} is not settled: {check.detail}; the answer may be one "
            f"doubling high")
