"""``core.stalls`` on scenarios whose answer follows from the module's definitions, worked out by hand.

Truth: which gap overlaps which prefill window (``s < b and e > a``), the decode step as the median of the gaps
no prefill overlaps, a request's pause excess as its longest stalled gap less what the longest of as many clean
gaps lasts (that step for one), interference as the
time stalled gaps lost over all decode time, and the elasticity ``log(x_hi / x_lo) / log(n_hi / n_lo)`` of the
two prompt groups' medians: each scenario is laid out below with the figures it must give. Times are multiples
of ``U`` (1/64 s) so every gap is exact.
"""

from __future__ import annotations

import itertools
import math
import random
import statistics

import pytest

from satbench.core.stalls import (
    BURST_GAP_S,
    MIN_CLEAN_GAPS,
    Decoding,
    Overlap,
    emission_gaps,
    held_steps,
    jitter_baseline,
    longest_stalled_gap,
    prompt_elasticity,
    stall_figures,
    token_gaps,
)

U = 1 / 64


def gaps_of(*ticks: float) -> list[tuple[float, float]]:
    """The gaps between consecutive token times given in ``U``."""
    return [(a * U, b * U) for a, b in itertools.pairwise(ticks)]


def decoding(*ticks: float, judged: bool = True) -> Decoding:
    gaps = gaps_of(*ticks)
    return Decoding(gaps, gaps, judged, (ticks[0] * U, ticks[-1] * U))


# --- emissions and per-token gaps ---------------------------------------------------------------------------

def test_emission_gaps_join_events_closer_than_the_burst() -> None:
    assert BURST_GAP_S == 0.001
    # 0.5 ms apart: one emission; 10 ms apart: a gap
    assert emission_gaps([0.0, 0.0005, 0.0105, 0.0205]) == [(0.0005, 0.0105), (0.0105, 0.0205)]
    # the burst is inclusive: a gap of exactly ``burst`` is a gap, one just under it is not
    assert emission_gaps([0.0, 1.0, 3.0, 4.999], burst=2.0) == [(1.0, 3.0)]
    assert emission_gaps([0.0, 2.0], burst=2.0) == [(0.0, 2.0)]
    assert emission_gaps([]) == []
    assert emission_gaps([5.0]) == []


def test_token_gaps_of_single_token_events_are_the_emission_gaps() -> None:
    times = [0.0, 0.01, 0.03, 0.05]
    assert token_gaps(times) == emission_gaps(times)
    assert token_gaps(times, [1, 1, 1, 1]) == emission_gaps(times)
    assert token_gaps([]) == []
    assert token_gaps([1.0]) == []


@pytest.mark.parametrize("counts", [[1], [1, 1, 1, 1]])
def test_token_counts_are_one_an_event(counts: list[int]) -> None:
    # fewer counts than events raised an IndexError from inside the loop, more were silently ignored
    with pytest.raises(ValueError, match=r"^counts: \d+ token counts for 3 events; one count an event$"):
        token_gaps([0.0, 1.0, 2.0], counts)


def test_a_hold_in_a_several_token_event_stays_in_one_gap() -> None:
    # events at 0, 10, 20, 80 carrying 1, 1, 1, 3 tokens: gaps per token 10, 10, 60/3 = 20, pace = median 10;
    # the three tokens of the last event take 10 each, so the other 40 of its 60 is the first gap: the hold
    gaps = token_gaps([0.0, 10.0, 20.0, 80.0], [1, 1, 1, 3], burst=1.0)
    assert gaps == [(0.0, 10.0), (10.0, 20.0), (20.0, 60.0), (60.0, 70.0), (70.0, 80.0)]
    # with no burst the gaps of a request sum to its decode time (the mean ITL is the TPOT)
    assert sum(b - a for a, b in gaps) == 80.0


def test_an_event_faster_than_the_pace_is_cut_evenly() -> None:
    # the last event carries 3 tokens in 6: 2 each is shorter than the pace (median of 10, 10, 2 = 10)
    gaps = token_gaps([0.0, 10.0, 20.0, 26.0], [1, 1, 1, 3], burst=1.0)
    assert gaps == [(0.0, 10.0), (10.0, 20.0), (20.0, 22.0), (22.0, 24.0), (24.0, 26.0)]


def test_a_burst_of_one_token_events_is_one_emission_of_their_tokens() -> None:
    # 10 and 10.5 are one emission of two tokens (0.5 apart, burst 1): per token 10/2 = 5 and 9.5/1, pace
    # median 7.25; the two-token emission is cut at min(7.25, 5) = 5; the next gap starts at the burst's last
    # event
    assert token_gaps([0.0, 10.0, 10.5, 20.0], burst=1.0) == [(0.0, 5.0), (5.0, 10.0), (10.5, 20.0)]
    # the first emission's extra tokens have no gap before them (TTFT covers them)
    assert token_gaps([0.0, 10.0, 20.0], [4, 1, 1], burst=1.0) == [(0.0, 10.0), (10.0, 20.0)]


# --- overlap with prefill windows ---------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("gap", "expected"),
    [
        ((1.0, 2.0), False),  # ends where the prefill starts: s < b fails
        ((3.0, 4.0), False),  # starts where the prefill ends: e > a fails
        ((1.0, 2.5), True),  # shares (2, 2.5)
        ((2.2, 2.8), True),  # inside the prefill
        ((1.0, 4.0), True),  # holds the whole prefill
        ((9.0, 9.5), False),  # after everything
    ],
)
def test_overlap_is_strict_at_both_edges(gap: tuple[float, float], expected: bool) -> None:
    assert Overlap([(2.0, 3.0)])(*gap) is expected


def test_overlap_sees_a_long_interval_that_started_before_a_short_one() -> None:
    # sorted by start: (0, 10) then (2, 3); a gap (5, 6) overlaps only the first, which the last start's end
    # (3) would miss: the running maximum of the ends (10) finds it
    overlaps = Overlap([(2.0, 3.0), (0.0, 10.0)])
    assert overlaps(5.0, 6.0)
    assert not overlaps(10.0, 11.0)
    assert not Overlap([])(0.0, 1.0)


def test_longest_stalled_gap_is_the_longest_overlapping_not_the_longest() -> None:
    gaps = [(0.0, 1.0), (1.0, 5.0), (5.0, 7.0), (7.0, 7.5)]
    # the 4-long gap overlaps nothing; (5, 7) overlaps (6, 6.5); (7, 7.5) overlaps (7.4, 8) but is shorter
    assert longest_stalled_gap(gaps, [(6.0, 6.5), (7.4, 8.0)]) == 2.0
    assert longest_stalled_gap(gaps, [(20.0, 21.0)]) is None
    assert longest_stalled_gap(gaps, []) is None
    assert longest_stalled_gap([], [(0.0, 1.0)]) is None


# --- the step's figures -------------------------------------------------------------------------------------

def held_scenario() -> tuple[list[Decoding], list[tuple[float, float, int | None]]]:
    """A decodes at one token a ``U`` from 0 to 6 and from 20 to 26, held 6 -> 20 (14 U) while B's 1000-token
    prompt is prefilled (admitted at 8, first token at 18); B then decodes 18, 19, 20. A's own prefill
    (-4 -> 0, 500 tokens) is before the window [0, 64] and overlaps none of A's gaps, which start at 0."""
    a = decoding(0, 1, 2, 3, 4, 5, 6, 20, 21, 22, 23, 24, 25, 26)
    b = decoding(18, 19, 20)
    return [a, b], [(-4 * U, 0.0, 500), (8 * U, 18 * U, 1000)]


def test_a_prefill_beside_a_decode_gives_its_excess_and_interference() -> None:
    decodings, prefills = held_scenario()
    figures = stall_figures(decodings, prefills, 0.0, 64 * U, overlapping=True)
    # 12 of A's gaps and both of B's overlap no prefill, all 1 U: the step is 1 U, from 14 clean gaps
    assert (figures.decode_step_s, figures.decode_step_gaps) == (U, 14)
    # A's held gap lasted 14 U: 13 U beyond the step; B's gaps start at its own first token: none stalled
    assert figures.excesses == [13 * U, 0.0]
    assert figures.excess_of == {0: 13 * U, 1: 0.0}
    assert figures.longest_stalled_s == 14 * U
    # B's prefill began at 8, inside the window, while A decoded (0 -> 26); A's own began before the window
    assert figures.prefill_events == 1
    # lost 13 U of the 26 + 2 U of decode time; one stalled gap; over B's 1000-token prompt
    assert figures.interference_share == pytest.approx(13 / 28)
    assert figures.stall_per_prompt_s == 13 * U
    assert figures.stall_ms_per_prompt_token == pytest.approx(1000 * 13 * U / 1000)
    assert figures.prompt_elasticity is None  # one stalled gap cannot show a shape


def test_only_judged_requests_have_an_excess() -> None:
    decodings, prefills = held_scenario()
    a, b = decodings
    figures = stall_figures([Decoding(a.window_gaps, a.gaps, False, a.decode), b], prefills, 0.0, 1.0, True)
    assert figures.excesses == [0.0]
    assert figures.excess_of == {1: 0.0}
    assert figures.longest_stalled_s == 14 * U  # the window's gaps still count


def test_a_request_alone_has_no_excess_and_no_interference() -> None:
    decodings, prefills = held_scenario()
    figures = stall_figures(decodings, prefills, 0.0, 1.0, overlapping=False)
    # every gap is clean when nothing can run beside it: median of 12 gaps of 1 U, 1 of 14 U and 2 of 1 U
    assert (figures.decode_step_s, figures.decode_step_gaps) == (U, 15)
    assert figures.excesses == [0.0, 0.0]
    assert (figures.longest_stalled_s, figures.prefill_events, figures.interference_share) == (None, 0, None)
    assert (figures.stall_per_prompt_s, figures.stall_ms_per_prompt_token, figures.prompt_elasticity) == \
        (None, None, None)


def test_a_uniformly_slow_decode_is_not_starved() -> None:
    # every gap 18 U, one of them beside B's prefill: no gap lasted beyond the step
    a = decoding(*range(0, 18 * 13, 18))
    figures = stall_figures([a], [(40 * U, 50 * U, 800)], 0.0, 300 * U, overlapping=True)
    assert figures.decode_step_s == 18 * U
    assert figures.excesses == [0.0]
    assert figures.longest_stalled_s == 18 * U
    assert figures.interference_share == 0.0


@pytest.mark.parametrize(("clean", "step", "counted"),
                         [(MIN_CLEAN_GAPS, U, MIN_CLEAN_GAPS), (MIN_CLEAN_GAPS - 1, 9 * U, 0)])
def test_too_few_clean_gaps_fall_back_to_the_median_of_all(clean: int, step: float, counted: int) -> None:
    # ten gaps of 9 U under one long prefill (1 -> 89), then ``clean`` gaps of 1 U: with ten clean gaps the
    # step is theirs (1 U); with nine, the median of all 19 gaps (the 10th: 9 U) stands in and is said as 0
    ticks = [*range(0, 91, 9), *range(91, 91 + clean)]
    figures = stall_figures([decoding(*ticks)], [(U, 89 * U, 4000)], 0.0, 200 * U, overlapping=True)
    assert MIN_CLEAN_GAPS == 10
    assert (figures.decode_step_s, figures.decode_step_gaps) == (step, counted)
    assert figures.excesses == [9 * U - step]


def test_a_prefill_with_no_decode_running_is_no_event() -> None:
    # A decodes 10 -> 20; prefills begin at 5 (nobody decoding yet), 15 (A decoding), 30 (A done) and 100
    # (outside the window [0, 64]); the events are counted whatever their length
    a = decoding(*range(10, 21))
    prefills: list[tuple[float, float, int | None]] = [(5 * U, 10 * U, 50), (15 * U, 15.5 * U, 60),
                                                       (30 * U, 31 * U, 70), (100 * U, 101 * U, 80)]
    assert stall_figures([a], prefills, 0.0, 64 * U, overlapping=True).prefill_events == 1


def test_no_decode_at_all_gives_empty_figures() -> None:
    figures = stall_figures([], [(0.0, 1.0, 10)], 0.0, 1.0, overlapping=True)
    assert figures.decode_step_s is None and figures.decode_step_gaps == 0
    assert figures.excesses == [] and figures.longest_stalled_s is None
    assert figures.interference_share is None


# --- the shape of the holds ---------------------------------------------------------------------------------

def shaped(excess_short: float, excess_long: float, short: int = 100, long: int = 1000) \
        -> tuple[list[tuple[float, float]], list[tuple[float, float, int | None]]]:
    """Four gaps, each holding one whole prefill inside it: two of ``short`` prompt tokens stalled
    ``excess_short`` U beyond a 1 U step, two of ``long`` tokens ``excess_long`` U."""
    gaps, prefills = [], []
    for i, (excess, tokens) in enumerate([(excess_short, short)] * 2 + [(excess_long, long)] * 2):
        a, b = 100.0 * i, 100.0 * i + 1 + excess
        gaps.append((a * U, b * U))
        prefills.append(((a + 0.5) * U, (b - 0.5) * U, tokens))
    return gaps, prefills


def test_a_hold_that_grows_with_the_prompt_has_elasticity_one() -> None:
    # whole-prompt prefill: ten times the prompt, ten times the hold: log(40/4) / log(1000/100) = 1
    gaps, prefills = shaped(4, 40)
    assert prompt_elasticity(gaps, prefills, U) == pytest.approx(1.0)


def test_a_chunked_hold_has_the_elasticity_of_its_bound() -> None:
    # held at most 10 U (a chunk) whatever the prompt: log(10/4) / log(10)
    gaps, prefills = shaped(4, 10)
    assert prompt_elasticity(gaps, prefills, U) == pytest.approx(math.log(2.5) / math.log(10))


def test_a_prefill_that_only_grazes_a_gap_is_not_its_cause() -> None:
    # a 5000-token prefill from 4.5 to 99: it shares 0.5 U of the first 5 U gap (less than half of the gap, less
    # than half of itself), so that gap stays stalled by its 100 tokens alone
    gaps, prefills = shaped(4, 40)
    grazing = [*prefills, (4.5 * U, 99 * U, 5000)]
    assert prompt_elasticity(gaps, grazing, U) == pytest.approx(1.0)
    # one that covers half the gap (2.5 -> 5 of 0 -> 5) counts: the first gap's tokens become 5100, the split
    # falls at sqrt(100 * 5100) = 714 and leaves one gap below it: no shape
    covering = [*prefills, (2.5 * U, 99 * U, 5000)]
    assert prompt_elasticity(gaps, covering, U) is None


@pytest.mark.parametrize(
    ("case", "gaps_prefills"),
    [
        ("prompts not twofold apart", shaped(4, 40, short=100, long=150)),
        ("prefills under 16 tokens are the step's overhead", shaped(4, 40, short=15, long=15)),
        ("fewer than four stalled gaps", (shaped(4, 40)[0][1:], shaped(4, 40)[1][1:])),
        ("no prefill", (shaped(4, 40)[0], [])),
    ],
)
def test_no_shape_where_one_cannot_be_shown(
        case: str, gaps_prefills: tuple[list[tuple[float, float]], list[tuple[float, float, int | None]]]) -> None:
    gaps, prefills = gaps_prefills
    assert prompt_elasticity(gaps, prefills, U) is None, case


def test_prompts_prefilled_together_do_not_make_a_shape_their_sizes_lack() -> None:
    # prompts of 100 and 150 tokens (not twofold apart: no shape), two of them at times prefilled in one step:
    # the steps' tokens are 100 and 250, twofold apart, but one prompt size cannot show how a hold grows with it,
    # and the datasheet's truth reads the shape over the prompts, not the steps (its draw 1:101: 1.7x apart)
    gaps, prefills = shaped(4, 10, short=100, long=100)

    def beside(tokens: int) -> list[tuple[float, float, int | None]]:
        """A second prompt of ``tokens`` prefilled in each of the last two gaps' steps."""
        return [(a + 0.5 * U, b - 0.5 * U, tokens) for a, b in gaps[2:]]

    assert prompt_elasticity(gaps, prefills + beside(150), U) is None
    # the same steps with the second prompt ten times as long: a shape (the steps' tokens 100 and 1100)
    assert prompt_elasticity(gaps, prefills + beside(1000), U) is not None


def test_held_steps_are_the_steps_every_stream_waited_at_once() -> None:
    # three streams wait one step (their gaps a millisecond apart on the wire), two the next: two held steps, each
    # its largest excess; a gap that only touches the next one's start is the next step
    held = [(0.0, 1.0, 0.2), (0.0, 1.0, 0.25), (0.002, 1.001, 0.22), (1.0, 2.0, 0.1), (1.001, 2.0, 0.05)]
    assert held_steps(held) == [0.25, 0.1]
    assert held_steps([]) == []


def test_sixteen_tokens_count_for_the_shape() -> None:
    # 16 and 160 tokens: the smallest prompt that counts; the hold grows tenfold with it
    gaps, prefills = shaped(4, 40, short=16, long=160)
    assert prompt_elasticity(gaps, prefills, U) == pytest.approx(1.0)


def test_gaps_within_the_step_carry_no_shape() -> None:
    # excess 0: nothing was held, whatever overlapped
    gaps, prefills = shaped(0, 0)
    assert prompt_elasticity(gaps, prefills, U) is None


def engine(chunk: int | None, steps: int = 300) -> tuple[list[Decoding], list[tuple[float, float, int | None]]]:
    """One decode running through ``steps`` engine steps of 20 ms, and a prompt admitted every tenth step,
    64 and 1500 tokens in turn. A step that prefills ``n`` tokens lasts 5 ms + 0.2 ms a token longer: the whole
    prompt in one step (``chunk`` None) or at most ``chunk`` tokens a step until it is done. The decode's token
    comes at each step's end; a prompt's prefill runs from its first step's start to its last step's end."""
    t, times = 0.0, [0.0]
    prefills: list[tuple[float, float, int | None]] = []
    pending: list[int] = []  # [tokens left, prompt tokens, index of its first step's start in times]
    for step in range(steps):
        if step % 10 == 0:
            prompt = 64 if step % 20 == 0 else 1500
            pending = [prompt, prompt, len(times) - 1]
        work = 0
        if pending:
            work = pending[0] if chunk is None else min(chunk, pending[0])
            pending[0] -= work
        t += 0.020 + (0.005 + 0.0002 * work if work else 0.0)
        times.append(t)
        if pending and pending[0] == 0:
            prefills.append((times[pending[2]], t, pending[1]))
            pending = []
    gaps = list(itertools.pairwise(times))
    return [Decoding(gaps, gaps, True, (0.0, t))], prefills


@pytest.mark.parametrize(
    ("chunk", "expected"),
    [
        # the hold is the whole prompt's prefill: 5 + 0.2 n ms, from 64 to 1500 tokens
        (None, math.log((5 + 0.2 * 1500) / (5 + 0.2 * 64)) / math.log(1500 / 64)),
        # the hold is at most a chunk's (5 + 0.2 * 256 ms; the median of a long prompt's six stalled gaps)
        (256, math.log((5 + 0.2 * 256) / (5 + 0.2 * 64)) / math.log(1500 / 64)),
    ],
)
def test_the_shape_of_an_engines_holds(chunk: int | None, expected: float) -> None:
    decodings, prefills = engine(chunk)
    figures = stall_figures(decodings, prefills, 0.0, 100.0, overlapping=True)
    assert figures.decode_step_s == pytest.approx(0.020)
    assert figures.prompt_elasticity == pytest.approx(expected, rel=1e-6)
    # the longest hold: the whole long prompt's step, or a chunk's
    assert figures.longest_stalled_s == pytest.approx(0.020 + 0.005 + 0.0002 * (chunk or 1500))
    # whole prompts: 0.90 (unbounded in the prompt, with the step's fixed 5 ms); chunks of 256: 0.36 (bounded)
    assert (expected > 0.8) == (chunk is None)


def test_the_baseline_of_m_stalled_gaps_is_the_clean_gaps_quantile_m_over_m_plus_one() -> None:
    clean = [float(i) for i in range(1, 101)]  # sorted
    assert jitter_baseline(clean, 1, 50.5) == 50.5  # one stalled gap: the rung's step
    assert jitter_baseline(clean, 3, 50.5) == 75.0  # the largest of 3 draws ranks at 3/4
    assert jitter_baseline(clean, 99, 50.5) == 99.0
    assert jitter_baseline([], 5, 50.5) == 50.5  # too few clean gaps: the step


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_jittery_steps_noise_is_not_counted_as_the_hold(seed: int) -> None:
    """An engine whose every step is scaled by lognormal noise (sigma 0.25, as a busy GPU's): 64 ms decode steps,
    and for each request a run of 8 steps held by another's prefill for 100 ms more, the hold scaled by the same
    step's noise. The truth is the engine's: each request's longest hold, 0.1 k. The longest held gap is the
    step's noise on both parts; against the median clean step its excess read the noise on the decode part as
    hold too (measured here: the median request's excess 18-20 % above its hold); against what the longest of
    8 clean gaps lasts it is within 8 % (2.5-4.7 %)."""
    rng = random.Random(seed)
    step, hold = 0.064, 0.1
    decodings, prefills, holds = [], [], []
    t = 0.0
    for _ in range(40):
        times, worst = [t], 0.0
        held = range(10, 18)
        for i in range(30):
            k = rng.lognormvariate(0.0, 0.25)
            extra = hold * k if i in held else 0.0
            worst = max(worst, extra)
            times.append(times[-1] + step * k + extra)
        gaps = list(itertools.pairwise(times))
        decodings.append(Decoding(gaps, gaps, True, (times[0], times[-1])))
        prefills.append((gaps[held[0]][0] + 1e-6, gaps[held[-1]][1] - 1e-6, 1000))
        holds.append(worst)
        t = times[-1] + 1.0
    figures = stall_figures(decodings, prefills, 0.0, t, overlapping=True)
    errors = sorted(x / h - 1 for x, h in zip(figures.excesses, holds, strict=True))
    assert abs(errors[len(errors) // 2]) <= 0.08, errors


def noisy_engine(seed: int, chunk: int | None, sigma: float = 0.3) -> float | None:
    """The shape one window of a noisy engine shows: 400 steps of 40 ms, each scaled by lognormal noise
    ``sigma``; every fifth step prefills a prompt of 256 or 64 tokens in turn at 0.2 ms a token, whole (held 51
    and 13 ms: the hold is proportional to the prompt) or ``chunk`` tokens of it (held the first chunk's)."""
    rng = random.Random(seed)
    t, gaps, clean = 0.0, [], []
    prefills: list[tuple[float, float, int | None]] = []
    for i in range(400):
        prompt = (64 if (i // 5) % 2 else 256) if i % 5 == 0 else 0
        work = prompt if chunk is None else min(prompt, chunk)
        d = (0.040 + 0.0002 * work) * rng.lognormvariate(0.0, sigma)
        gaps.append((t, t + d))
        if prompt:
            prefills.append((t + 1e-6, t + d - 1e-6, prompt))
        else:
            clean.append(d)
        t += d
    return prompt_elasticity(gaps, prefills, statistics.median(clean))


def test_a_short_prompts_hold_within_the_step_noise_still_shows_the_shape() -> None:
    # a 64-token prompt's 13 ms hold against 40 ms steps under noise sigma 0.3: counting only the held gaps past
    # the step kept those the noise lengthened and read the whole prefill as bounded in 26 of 40 windows
    # (median 0.78); every held gap counted, the ratio of the medians is the hold's
    whole = [noisy_engine(seed, None) for seed in range(40)]
    assert sum(1 for e in whole if e is not None and e >= 0.8) >= 28, whole
    chunked = [noisy_engine(seed, 64) for seed in range(40)]  # a 64-token chunk: the hold is bounded
    assert all(e is None or e < 0.8 for e in chunked), chunked
