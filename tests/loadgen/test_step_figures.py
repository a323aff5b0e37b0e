"""Hand-computed cases for compute_step_figures (window [100, 110], see each case's comment)."""

from __future__ import annotations

import dataclasses

import pytest

from satbench.core.manifest import StepWindow
from satbench.core.records import RequestRecord
from satbench.core.step_figures import compute_step_figures, longest_stalled_gap, throughput_ci


def rec(user: int, sent: float, ttft: float | None, itl: tuple[float, ...], e2e: float, out: int,
        outcome: str = "ok", lane: str = "a", queue: float | None = None, c: int = 2,
        events: tuple[int, ...] | None = None) -> RequestRecord:
    return RequestRecord(run_id="r", lane=lane, concurrency=c, user=user, request_id=f"{user}-{sent}",
                         phase="window", sent_at=sent, ttft_s=ttft, e2e_s=e2e, queue_s=queue, itl_s=itl,
                         prompt_tokens=10, output_tokens=out, outcome=outcome,  # type: ignore[arg-type]
                         event_tokens=events)


# A: tokens 101..104, ends 104.5 (sent before the window).  B: events 104.5, 106.5 (server counted 5: 4 in
# its first event, 1 in its second, so its one gap is one token's, 2 s), ends 107.  C: dropped before any token,
# 104.5..105.5.  D: tokens 109, 111 (out).
RECORDS = [
    rec(0, 99.0, 2.0, (1.0, 1.0, 1.0), 5.5, 4),
    rec(1, 100.5, 4.0, (2.0,), 6.5, 5, queue=0.5, events=(4, 1)),
    rec(0, 104.5, None, (), 1.0, 0, outcome="dropped"),
    rec(1, 108.0, 1.0, (2.0,), 3.5, 2),
    rec(0, 100.0, 0.1, (0.1,) * 50, 6.0, 51, lane="other"),
]
WINDOW = StepWindow(lane="a", concurrency=2, start=100.0, end=110.0)


def test_hand_computed_step() -> None:
    f = compute_step_figures(RECORDS, WINDOW, batch_s=5.0)
    assert f.window_s == 10.0
    assert f.throughput_tok_s == pytest.approx(1.0)  # 4 (A) + 5 (B) + 1 (D) tokens in window
    assert f.requests == 2 and f.requests_per_s == pytest.approx(0.2)  # A and B ended inside
    assert f.errors == 1 and f.errors_by_outcome == {"dropped": 1}
    assert f.latency_s.p50 == pytest.approx(5.0)  # B 6.5, D 3.5 (A was sent before the window)
    assert f.ttft_s.p50 == pytest.approx(2.5)
    assert f.tpot_s.p50 == pytest.approx((0.625 + 2.5) / 2)
    assert f.queue_s.p50 == pytest.approx(0.5)
    assert f.itl_s.p50 == pytest.approx(1.0)  # gaps 1, 1, 1 (A) and 2 (B)
    assert f.tokens_per_event == pytest.approx(10 / 7)  # A 4, B 2 (5 tokens), D 1 events in the window
    assert f.event_tokens_estimated == 0  # B's counts are the runtime's
    assert f.jain == pytest.approx(100 / 104)  # users 4 and 6 tokens
    assert f.max_min_share == pytest.approx(1.5)
    assert f.decode_stall_max_s == pytest.approx(2.0)  # B's gap while C was "in prefill"
    assert f.decode_stall_max_ratio == pytest.approx(2.0)
    assert f.prefill_wait_max_s == pytest.approx(4.0)
    assert f.throughput_ci_tok_s is None  # two 5 s batches: fewer than the five an interval needs
    assert f.valid


def test_starved_user_and_no_stall_without_prefill() -> None:
    window = StepWindow(lane="a", concurrency=3, start=100.0, end=110.0)
    records = [rec(0, 100.0, 1.0, (1.0,) * 4, 5.0, 5, c=3), rec(1, 100.0, 1.0, (1.0,) * 4, 5.0, 5, c=3)]
    f = compute_step_figures(records, window)
    assert f.jain == pytest.approx(100 / (3 * 50))
    assert f.max_min_share is None
    assert f.decode_stall_max_s is None and f.decode_stall_max_ratio is None


def test_stall_counts_only_other_requests_prefill() -> None:
    # One request alone: its own prefill [100, 101] never overlaps its own gaps.
    window = StepWindow(lane="a", concurrency=1, start=100.0, end=110.0)
    f = compute_step_figures([rec(0, 100.0, 1.0, (3.0, 1.0), 5.0, 3, c=1)], window)
    assert f.decode_stall_max_s is None


def test_no_success_marks_step_invalid_and_keeps_window_reason() -> None:
    f = compute_step_figures([rec(0, 101.0, None, (), 1.0, 0, outcome="refused")], WINDOW)
    assert not f.valid and f.errors_by_outcome == {"refused": 1} and f.throughput_tok_s == 0
    bad = StepWindow(lane="a", concurrency=2, start=100.0, end=110.0, valid=False, reason="client lagged")
    assert compute_step_figures(RECORDS, bad).reason == "client lagged"


def test_throughput_interval_starts_from_a_32nd_of_the_window() -> None:
    arrivals = [(100.0 + i * 0.125, 1) for i in range(80)]  # 8 tok/s, evenly
    lo, hi = throughput_ci(arrivals, 100.0, 110.0) or (0.0, 0.0)  # 32 batches of 0.3125 s: 3 or 2 tokens each
    assert lo < 8.0 < hi and hi - lo < 1.6
    assert throughput_ci(arrivals, 100.0, 110.0, 2.0) == pytest.approx((8.0, 8.0))  # five 2 s batches
    assert throughput_ci(arrivals, 100.0, 110.0, 3.0) is None  # three batches
    assert throughput_ci(arrivals, 110.0, 100.0) is None


@pytest.mark.parametrize(("gaps", "prefills", "expected"), [
    ([(0.0, 1.0), (1.0, 4.0)], [(2.0, 3.0)], 3.0),  # the long gap contains a whole prefill
    ([(0.0, 1.0), (1.0, 4.0)], [(4.0, 5.0)], None),  # touching is not overlapping
    ([(0.0, 2.0), (2.0, 2.5)], [(-5.0, 0.5), (2.1, 2.2)], 2.0),
    ([(1.0, 1.0), (1.0, 1.0)], [(0.0, 5.0)], None),  # zero-length gaps are no stall
    ([(10.0, 11.0), (11.0, 13.0)], [(0.0, 1.0), (1.0, 10.5)], 1.0),  # only an early, long interval reaches
    ([(0.0, 3.0)], [], None),
])
def test_longest_stalled_gap(gaps: list[tuple[float, float]], prefills: list[tuple[float, float]],
                             expected: float | None) -> None:
    assert longest_stalled_gap(gaps, prefills) == expected


def test_pauses_interference_and_user_waits_by_hand() -> None:
    f = compute_step_figures(RECORDS, WINDOW)
    assert f.pause_s.p99 == pytest.approx(2.0) and f.pause_requests == 2  # B and D: longest gap 2 s each
    # prefills that began in the window beside a decode: B at 101 (A decoding), C at 104.5 (B); D's at 108 none
    assert f.prefill_events == 2
    # gaps 1, 1, 1, 2 (5 s of decode); only B's 2 s gap overlaps a prefill (C's): 1 s beyond the 1 s p50
    assert f.interference_share == pytest.approx(0.2)
    assert f.stall_per_prompt_s == pytest.approx(1.0)
    assert f.stall_ms_per_prompt_token == pytest.approx(100.0)  # prompts of 10 tokens
    assert f.queued_requests is None and f.admission_wait_bound_s is None  # slots unknown: not applicable
    # waits that overlap the window: user 0 A (sent 99, first token 101: 2.0) and C (dropped without a token:
    # still waiting at its end, 1.0 censored), user 1 B (queue 0.5) and D (TTFT 1.0): worst mean 1.5 over 1.125
    assert f.user_wait_ratio == pytest.approx(1.5 / 1.125)
    assert f.user_wait_p_value is not None and 0.0 < f.user_wait_p_value <= 1.0


def test_one_user_has_no_interference() -> None:
    window = StepWindow(lane="a", concurrency=1, start=100.0, end=110.0)
    f = compute_step_figures([rec(0, 100.0, 1.0, (0.1,) * 20, 3.0, 21, c=1)], window)
    assert f.pause_s.p99 == pytest.approx(0.1) and f.prefill_events == 0 and f.interference_share is None
    assert f.user_wait_p_value is None


@pytest.mark.parametrize(("queue", "within"), [(1.9, True), (6.0, False)])
def test_the_fifo_admission_bound(queue: float, within: bool) -> None:
    """One slot, two users: the second request finds the slot busy and nobody ahead of it; FIFO admits it when
    the slot frees (102.0, 1.9 s after it was sent) plus one step (the longest gap, 0.1 s) and the server's
    handling of a request (50 ms)."""
    window = StepWindow(lane="a", concurrency=2, start=100.0, end=120.0, slots=1)
    first = rec(0, 100.0, 0.2, (0.1,) * 18, 2.0, 19)
    second = rec(1, 100.1, queue + 0.2, (0.1,) * 18, queue + 2.0, 19, queue=queue)
    f = compute_step_figures([first, second], window)
    assert f.queued_requests == 1
    assert f.admission_wait_bound_s == pytest.approx(1.9 + 0.1 + 0.05)
    assert f.admission_wait_max_s == pytest.approx(queue)
    assert (f.admission_wait_max_s <= f.admission_wait_bound_s) is within
    assert compute_step_figures([first, second], StepWindow(lane="a", concurrency=2, start=100.0, end=120.0,
                                                            slots=2)).queued_requests is None  # c <= slots


def reused(user: int, sent: float, prompt: int | None, cached: int | None, drafted: int | None = None,
           accepted: int | None = None, outcome: str = "ok") -> RequestRecord:
    return RequestRecord(run_id="r", lane="a", concurrency=2, user=user, request_id=f"{user}-{sent}",
                         phase="window", sent_at=sent, ttft_s=0.5, e2e_s=1.0, queue_s=None, itl_s=(0.5,),
                         prompt_tokens=prompt, output_tokens=2, outcome=outcome,  # type: ignore[arg-type]
                         cached_prompt_tokens=cached, draft_tokens=drafted, draft_accepted_tokens=accepted)


@pytest.mark.parametrize(("records", "expected"), [
    # two hits weighed by their tokens: (300 + 0) / (400 + 100); the request that said nothing is left out
    ([reused(0, 101, 400, 300), reused(1, 102, 100, 0), reused(0, 103, 900, None)],
     {"cache_hit_share": 0.6, "cached_prompt_tokens": 300, "cache_reported_prompt_tokens": 500}),
    # a runtime that reports nothing: unknown, not zero
    ([reused(0, 101, 400, None), reused(1, 102, 100, None)],
     {"cache_hit_share": None, "cached_prompt_tokens": None, "cache_reported_prompt_tokens": None}),
    # failed requests, and one that ended after the window, do not count
    ([reused(0, 101, 400, 400, outcome="dropped"), reused(1, 109.5, 100, 50), reused(0, 102, 100, 10)],
     {"cache_hit_share": 0.1, "cached_prompt_tokens": 10}),
    # drafts: accepted over drafted, summed; nothing drafted is no rate
    ([reused(0, 101, 10, 0, 18, 18), reused(1, 102, 10, 0, 12, 3)],
     {"spec_acceptance_rate": 0.7, "draft_tokens": 30, "draft_accepted_tokens": 21}),
    ([reused(0, 101, 10, 0, 0, 0)], {"spec_acceptance_rate": None, "draft_tokens": 0, "draft_accepted_tokens": 0}),
    ([reused(0, 101, 10, 0)], {"spec_acceptance_rate": None, "draft_tokens": None}),
])
def test_prompt_cache_and_draft_figures(records: list[RequestRecord], expected: dict[str, object]) -> None:
    f = compute_step_figures(records, WINDOW)
    got = {name: getattr(f, name) for name in expected}
    assert got == pytest.approx(expected)


def test_an_open_loop_rungs_holds_are_pause_excess() -> None:
    # An open-loop rung (concurrency 0: no in-flight cap) runs its arrivals beside each other, so a prefill holds
    # the decodes running beside it: A decodes at 50 ms a token; B, sent at 102.15, prefills until 102.55 while
    # A's gap from 102.1 waits 0.5 s. A's pause excess is that gap less the 50 ms step, as on a closed rung
    # (it read 0 when only closed rungs above one user were looked at).
    def open_rec(user: int, sent: float, ttft: float, itl: tuple[float, ...]) -> RequestRecord:
        return RequestRecord(run_id="r", lane="a", concurrency=0, user=user, request_id=f"{user}-{sent}",
                             phase="window", sent_at=sent, ttft_s=ttft, e2e_s=ttft + sum(itl), queue_s=0.0,
                             itl_s=itl, prompt_tokens=400, output_tokens=len(itl) + 1, outcome="ok", rate_rps=2.0,
                             intended_at=sent)
    a = open_rec(0, 100.0, 0.1, (0.05,) * 40 + (0.5,) + (0.05,) * 10)
    b = open_rec(1, 102.15, 0.4, (0.05,) * 10)
    window = StepWindow(lane="a", concurrency=0, start=100.0, end=110.0, rate_rps=2.0)
    f = compute_step_figures([a, b], window)
    assert f.decode_step_s == pytest.approx(0.05)
    assert f.pause_excess_tail.top[0] == pytest.approx(0.45)  # A's; B was held by nobody
    assert f.pause_excess_s.p99 == pytest.approx(0.45, rel=0.02)
    # the same stream on a closed rung of one user: nothing can run beside it, so nothing is an excess
    lone = compute_step_figures([dataclasses.replace(a, concurrency=1, rate_rps=None, intended_at=None)],
                                StepWindow(lane="a", concurrency=1, start=100.0, end=110.0))
    assert lone.pause_excess_s.p99 in (None, 0.0)
