"""``core.admission`` on admissions laid out by hand: who was sent when, who held the slot, who was admitted
when; the truth is what first-in-first-out admission would have done with them (module docstring, DESIGN.md
"prefill starvation", "fairness").

With S slots, a request sent while k + S others are in flight is admitted, under FIFO, at the k + 1-th slot
release after it arrived; its bound is that release less its send, plus one decode step (``SLACK``) and
``HANDLING_S``, plus a prefill where the server does not say its queue time. Times are multiples of 1/8 s.
"""

from __future__ import annotations

import math
import random

import pytest
from scipy import stats

from satbench.core.admission import HANDLING_S, ORDER_SLACK_S, admission_figures, observe_waits
from satbench.core.manifest import StepWindow
from satbench.core.records import Outcome, RequestRecord
from satbench.core.survival import Wait

SLACK = 0.0625  # one decode step: the window's longest emission gap
EXTRA = SLACK + HANDLING_S  # what a bound allows beyond the release it waits for


def request(user: int, sent: float, *, queue: float | None = 0.0, ttft: float | None = 0.125,
            e2e: float | None = 1.0, outcome: Outcome = "ok", name: str = "") -> RequestRecord:
    return RequestRecord(
        run_id="r", lane="a", concurrency=3, user=user, request_id=name or f"u{user}@{sent}", phase="window",
        sent_at=sent, ttft_s=ttft, e2e_s=e2e, queue_s=queue, itl_s=(), prompt_tokens=64, output_tokens=8,
        outcome=outcome)


def window(slots: int | None = 1, concurrency: int = 3, start: float = 0.0, end: float = 10.0) -> StepWindow:
    return StepWindow(lane="a", concurrency=concurrency, start=start, end=end, slots=slots)


# One slot, three users. A holds the slot 0 -> 1; B is sent at 0.125, C at 0.25, both behind A.
A = request(0, 0.0, e2e=1.0)


def fifo() -> list[RequestRecord]:
    """FIFO: B is admitted when A frees the slot (1.0) and holds it to 2.125; C is admitted then and holds it to
    3.25. B's bound: one in flight ahead of it (A, in the slot): the first release after 0.125, 1.0; C's: A and B
    in flight, one beyond the slot: the second release after 0.25, 2.125."""
    b = request(1, 0.125, queue=0.875, ttft=1.0, e2e=2.0)
    c = request(2, 0.25, queue=1.875, ttft=2.0, e2e=3.0)
    return [A, b, c]


def newest_first() -> list[RequestRecord]:
    """Newest first: C overtakes B, admitted at 1.0 and holding the slot to 2.125; B is admitted at 2.125. The
    releases are those of FIFO (1.0, 2.125, 3.25), so the bounds are too; B waited 2.0 against 0.875 + extra."""
    c = request(2, 0.25, queue=0.75, ttft=0.875, e2e=1.875)
    b = request(1, 0.125, queue=2.0, ttft=2.125, e2e=3.125)
    return [A, b, c]


def test_waits_and_who_queued() -> None:
    observed = {o.record.user: o for o in observe_waits(fifo(), window())}
    # A found the slot free; B found A in flight (1 >= 1 slot), C found A and B
    assert [observed[u].queued for u in (0, 1, 2)] == [False, True, True]
    # a wait runs from the send to the admission (sent plus the server's queue time)
    assert [observed[u].wait for u in (0, 1, 2)] == [Wait(0.0), Wait(0.875), Wait(1.875)]
    assert observed[1].admitted == 1.0
    # with no slots known nothing is queued
    assert not any(o.queued for o in observe_waits(fifo(), window(slots=None)))


def test_fifo_never_overruns_its_bound() -> None:
    figures = admission_figures(fifo(), window(), {0: 8, 1: 8, 2: 8}, [], SLACK)
    assert figures.queued_requests == 2
    assert figures.admission_overruns == 0
    # the worst ratio is C's: 1.875 waited against 2.125 - 0.25 + extra
    assert figures.admission_wait_max_s == 1.875
    assert figures.admission_wait_bound_s == pytest.approx(1.875 + EXTRA)
    assert figures.admission_overrun_max_ratio == pytest.approx(1.875 / (1.875 + EXTRA))
    assert (figures.users_unserved, figures.users_starved) == (0, 0)


def test_an_overtaken_request_overruns_its_bound() -> None:
    figures = admission_figures(newest_first(), window(), {0: 8, 1: 8, 2: 8}, [], SLACK)
    assert figures.admission_overruns == 1
    assert figures.admission_wait_max_s == 2.0
    assert figures.admission_wait_bound_s == pytest.approx(0.875 + EXTRA)
    assert figures.admission_overrun_max_ratio == pytest.approx(2.0 / (0.875 + EXTRA))
    # B was served after all: passed over, not starved
    assert figures.users_starved == 0


@pytest.mark.parametrize(("behind", "overrun"), [(0.001, False), (0.003, True)])
def test_a_request_sent_just_after_may_have_been_seen_first(behind: float, overrun: bool) -> None:
    # C is sent ``behind`` after B and admitted before it; within ORDER_SLACK_S (2 ms) the server may have seen C
    # first, so C counts as ahead of B: B's bound is then the second release after it (C's end, 2.0)
    assert ORDER_SLACK_S == 0.002
    c = request(2, 0.125 + behind, queue=1.0 - 0.125 - behind, ttft=1.0, e2e=2.0 - 0.125 - behind)
    b = request(1, 0.125, queue=1.875, ttft=2.0, e2e=3.0)
    figures = admission_figures([A, b, c], window(), {0: 8, 1: 8, 2: 8}, [], SLACK)
    assert figures.admission_overruns == int(overrun)
    bound = (2.0 if not overrun else 1.0) - 0.125 + EXTRA
    assert figures.admission_wait_bound_s == pytest.approx(bound)


def test_a_user_never_admitted_is_counted_censored_and_starved() -> None:
    # user 0 runs a closed loop 0 -> 1 -> 2 -> 3 -> 4, each request admitted at once (queue 0); user 1's request,
    # sent at 0.125, is never admitted and is cut off at the drain (5.0). Window [0, 4], one slot, two users.
    loop = [request(0, float(t), name=f"a{t}") for t in range(4)]
    b = request(1, 0.125, queue=None, ttft=None, e2e=4.875, outcome="dropped")
    records, win = [*loop, b], window(concurrency=2, end=4.0)
    observed = {o.record.request_id: o for o in observe_waits(records, win)}
    # B waited from its send until last seen (its end), not admitted: a censored wait of 4.875
    assert observed[b.request_id].wait == Wait(4.875, ended=False)
    # each later request of user 0 found B in flight (its own previous one ended at its send): queued
    assert [observed[f"a{t}"].queued for t in range(4)] == [False, True, True, True]
    figures = admission_figures(records, win, {0: 40}, [], SLACK)
    # B had only a0 ahead of it: the first release after its send, 1.0; with no queue time said (no token) its
    # bound allows a prefill, the median TTFT of the requests that found the slot free (a0's 0.125): bound
    # 1.0 - 0.125 + extra + 0.125, and it waited at least 4.875. Each of a1..a3 found one in flight (B, not
    # in the slot) and was admitted at once: within the next release, its own previous request's; none overruns
    assert figures.admission_overruns == 1
    assert figures.admission_wait_max_s == 4.875
    assert figures.admission_wait_bound_s == pytest.approx(1.0 + EXTRA)
    assert figures.admission_overrun_max_ratio == pytest.approx(4.875 / (1.0 + EXTRA))
    assert (figures.users_unserved, figures.users_starved) == (1, 1)
    # the queued waits by user: user 0 [0, 0, 0], user 1 [4.875 censored]; lane mean 4.875 / 4
    assert figures.user_wait_ratio == pytest.approx(4.875 / (4.875 / 4))
    assert figures.user_wait_excess_s == pytest.approx(4.875 - 4.875 / 4)
    # log-rank scores: at 0 three endings of four at risk, H = 3/4: user 0's waits 1/4 each, B's -3/4; of the 4
    # ways to pick the group of one only B's gives the observed statistic: exact permutation p 1/4
    assert figures.user_wait_p_value is not None and abs(figures.user_wait_p_value - 0.25) < 0.04


def test_a_request_without_a_token_waited_until_it_ended_or_the_window_closed() -> None:
    win = window(slots=1, concurrency=2, start=0.0, end=4.0)
    before = request(1, -1.0, queue=None, ttft=None, e2e=None, outcome="timeout")  # still waiting at the end
    admitted_before = request(0, -2.0, queue=0.5, ttft=0.75, e2e=1.0)  # waited -2 -> -1.5: before the window
    after = request(0, 4.5)  # sent after the window
    refused = request(0, 1.0, queue=None, ttft=None, e2e=0.125, outcome="http_error")  # turned away: no wait
    failed_late = request(0, 2.0, queue=None, ttft=0.5, e2e=1.0, outcome="http_error")  # had a token: waited
    observed = {o.record.request_id: o for o in observe_waits([before, admitted_before, after, refused,
                                                               failed_late], win)}
    assert set(observed) == {before.request_id, failed_late.request_id}
    # a request sent before the window and never admitted counts, censored at the window's end
    assert observed[before.request_id].wait == Wait(5.0, ended=False)
    # no queue time said: admitted at its first token
    assert observed[failed_late.request_id].wait == Wait(0.5)


def test_the_bound_allows_a_prefill_where_the_queue_time_is_not_said() -> None:
    # without queue_s the wait is the TTFT, which holds the request's own prefill: A found the slot free and
    # took 0.25 to its first token, so a queued request's bound allows 0.25 more. B admitted at A's release
    # (1.0) and prefilled 0.25: waited 1.125 to its first token, bound 1.0 - 0.125 + extra + 0.25
    a = request(0, 0.0, queue=None, ttft=0.25, e2e=1.0)
    b = request(1, 0.125, queue=None, ttft=1.125, e2e=2.0)
    figures = admission_figures([a, b], window(concurrency=2), {0: 8, 1: 8}, [], SLACK)
    assert figures.admission_overruns == 0
    assert figures.admission_wait_bound_s == pytest.approx(0.875 + EXTRA + 0.25)
    assert figures.admission_overrun_max_ratio == pytest.approx(1.125 / (0.875 + EXTRA + 0.25))


def test_a_request_whose_release_was_not_seen_is_not_judged() -> None:
    # B and C never got a token (cut off at 5.0): A's end is the only release. B needed one (bound 1.0 - 0.125
    # + extra + 0.125, a prefill: A's TTFT); C needed two and cannot be told: only B is judged, and only B's
    # user is starved (C's user was served nothing too, but whether it was passed over cannot be told)
    b = request(1, 0.125, queue=None, ttft=None, e2e=4.875, outcome="dropped")
    c = request(2, 0.25, queue=None, ttft=None, e2e=4.75, outcome="dropped")
    figures = admission_figures([A, b, c], window(), {0: 8}, [], SLACK)
    assert figures.admission_overruns == 1
    assert figures.admission_wait_max_s == 4.875
    assert figures.admission_wait_bound_s == pytest.approx(1.0 + EXTRA)
    assert (figures.users_unserved, figures.users_starved) == (2, 1)


def test_no_verdict_figures_where_the_slots_are_unknown_or_enough() -> None:
    for win in (window(slots=None), window(slots=3), window(slots=4)):
        figures = admission_figures(newest_first(), win, {0: 8, 1: 8, 2: 8}, [], SLACK)
        assert figures.queued_requests is None
        assert figures.admission_overruns is None and figures.users_starved is None
        assert figures.admission_wait_max_s is None and figures.admission_overrun_max_ratio is None
    # slots unknown: every wait is compared across users (0, 2.0 and 0.75), not only the queued ones
    figures = admission_figures(newest_first(), window(slots=None), {0: 8, 1: 8, 2: 8}, [], SLACK)
    assert figures.user_wait_ratio == pytest.approx(2.0 / (2.75 / 3))


def test_users_unserved_counts_every_user_without_a_token() -> None:
    figures = admission_figures(fifo(), window(concurrency=5), {0: 8, 1: 0, 2: 3}, [], SLACK)
    assert figures.users_unserved == 3  # users 1, 3 and 4


def test_no_comparison_with_one_user_or_nothing_waited() -> None:
    only_a = admission_figures([A], window(concurrency=2), {0: 8}, [(0, 0.02)], SLACK)
    assert (only_a.user_wait_p_value, only_a.user_wait_ratio, only_a.user_wait_excess_s) == (None, None, None)
    assert (only_a.user_itl_p_value, only_a.user_itl_ratio) == (None, None)
    # two users whose waits were all zero: the lane's mean wait is 0, nothing to compare
    instant = [request(0, 0.0), request(1, 0.5)]
    figures = admission_figures(instant, window(slots=None, concurrency=2), {0: 8, 1: 8}, [], SLACK)
    assert (figures.user_wait_p_value, figures.user_wait_ratio) == (None, None)
    assert figures.queued_requests is None
    empty = admission_figures([], window(), {}, [], SLACK)
    assert (empty.queued_requests, empty.admission_overruns, empty.users_unserved) == (0, 0, 3)


def test_decode_pace_by_user_is_kruskal_wallis_and_slowest_over_fastest() -> None:
    paces = [(0, 0.020), (0, 0.022), (0, 0.021), (1, 0.040), (1, 0.044), (1, 0.042), (2, 0.021), (2, 0.023)]
    figures = admission_figures(fifo(), window(), {0: 8, 1: 8, 2: 8}, paces, SLACK)
    groups = [[0.020, 0.022, 0.021], [0.040, 0.044, 0.042], [0.021, 0.023]]
    assert figures.user_itl_p_value == pytest.approx(stats.kruskal(*groups).pvalue)
    assert figures.user_itl_ratio == pytest.approx(0.042 / 0.021)
    assert figures.user_itl_excess_s == pytest.approx(0.042 - 0.021)
    # a user whose pace is 0 leaves no ratio to take
    zero = admission_figures(fifo(), window(), {0: 8}, [(0, 0.0), (1, 0.04)], SLACK)
    assert (zero.user_itl_p_value, zero.user_itl_ratio) == (None, None)


def test_a_request_being_turned_away_holds_no_slot() -> None:
    # two slots: A holds one from 0 to 2; R is sent at 0.125 and refused at 0.25 (an HTTP error, no token); B,
    # sent at 0.1875 while R is being refused, finds the second slot free and is admitted at once. Only A held a
    # slot at B's send: B did not queue, as the FIFO bound too counts it (one in flight, under two slots)
    a = request(0, 0.0, e2e=2.0)
    refused = request(1, 0.125, queue=None, ttft=None, e2e=0.125, outcome="http_error")
    b = request(2, 0.1875, e2e=1.0)
    win = window(slots=2)
    assert [o.queued for o in observe_waits([a, refused, b], win)] == [False, False]
    figures = admission_figures([a, refused, b], win, {0: 8, 2: 8}, [], SLACK)
    assert figures.queued_requests == 0
    assert figures.admission_wait_bound_s == pytest.approx(EXTRA)  # found a slot free: one step's slack


def served_by(policy: str, seed: int, users: int = 8, slots: int = 2, horizon: float = 20.0) -> list[RequestRecord]:
    """A closed loop of ``users`` on a server of ``slots`` slots that admits at once when a slot frees, from the
    waiting requests the oldest (``fifo``) or the newest (``newest``): each request serves for a lognormal time
    (median 0.5 s, a tenth of it prefill), its user sends the next after a short think; sends stop at
    ``horizon`` and every request is served to its end."""
    rng = random.Random(seed)
    sends = [(rng.uniform(0.0, 0.1), u) for u in range(users)]
    waiting: list[tuple[float, int]] = []
    running: list[float] = []  # end times of the requests in the slots
    records: list[RequestRecord] = []
    t = 0.0
    while sends or waiting or running:
        t = min([s for s, _ in sends] + running)
        for end in [e for e in running if e == t]:
            running.remove(end)
        for sent, user in [s for s in sends if s[0] == t]:
            sends.remove((sent, user))
            waiting.append((sent, user))
        while waiting and len(running) < slots:
            sent, user = waiting.pop(0 if policy == "fifo" else -1)
            service = rng.lognormvariate(math.log(0.5), 0.5)
            running.append(t + service)
            records.append(request(user, sent, queue=t - sent, ttft=t - sent + service / 10, e2e=t - sent + service,
                                   name=f"q{len(records)}"))
            if t + service + 0.05 < horizon:
                sends.append((t + service + rng.uniform(0.005, 0.05), user))
    return records


@pytest.mark.parametrize("seed", range(5))
def test_fifo_admission_never_overruns_and_newest_first_does(seed: int) -> None:
    # FIFO admits a queued request exactly at the release its bound names, whatever the lengths: never past it
    win = window(slots=2, concurrency=8, start=2.0, end=18.0)
    served = {u: 1 for u in range(8)}
    fifo_figures = admission_figures(served_by("fifo", seed), win, served, [], 0.0)
    assert fifo_figures.queued_requests is not None and fifo_figures.queued_requests > 20
    assert fifo_figures.admission_overruns == 0
    assert fifo_figures.admission_overrun_max_ratio is not None and fifo_figures.admission_overrun_max_ratio < 1.0
    newest = admission_figures(served_by("newest", seed), win, served, [], 0.0)
    assert newest.admission_overruns is not None and newest.admission_overruns > 0
    assert newest.admission_overrun_max_ratio is not None and newest.admission_overrun_max_ratio > 2.0
