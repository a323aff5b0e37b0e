"""How a lane's decodes pause, and whether another request's prefill made them: the decode-starvation figures.

Definitions (DESIGN.md "decode starvation"; the verdict is ``answer.judges.decode_check``):

- **emission**: tokens that arrive together are one emission. Speculative decoding delivers the tokens of one
  verify step a few microseconds apart, and a network segment can carry several token events; a reader gets
  them at once, so a gap shorter than ``BURST_GAP_S`` (1 ms) is not a gap between emissions. A decode step of
  llama.cpp takes more than a millisecond on any hardware it runs on (the per-step launch and sampling
  overhead alone is about that on a datacentre GPU), while the events of one step arrive within tens of
  microseconds, so the threshold separates the two.
- **per token**: an emission carries the tokens of its events (``token_gaps``): one, or several where the
  server put several tokens in one event (vLLM and SGLang ``--stream-interval``, a speculative verify step sent
  as one chunk) or sent a burst of one-token events (llama.cpp's speculative decoding). Its n tokens were made
  during the gap since the previous emission and arrived at once, so the gap is cut into n per-token gaps: n - 1
  at the request's pace (the median over its emissions of gap / tokens) and the rest first, or n equal gaps of
  ``gap / n`` when that is shorter than the pace. Why not n equal gaps always: a hold (a prefill beside the
  decode) is one long step among the n; spread evenly it would lengthen n gaps by a nth each, so the share of
  long gaps, and with it ITL p95, would grow with n (a hold in one step in 25 puts ITL p95 at 2.2x the step at
  two tokens an event, against 1.1x at one). Kept in one gap, the hold stays one gap whatever the framing, and
  a pause is measured in token-times: the emission's gap less the time its other tokens took at the request's
  pace. The cost: the step-to-step noise of the n steps lands in that one gap (about ``sqrt(n)`` times one
  step's), a few per cent on ITL p95 at eight tokens an event; and where held steps are frequent (a prefill
  every few steps, so most events hold one), the pace itself carries the holds and the split under-reads them:
  a stream of several tokens an event cannot show which step was held (measured on the simulator, ITL p95 at
  eight tokens an event 43 % under the engine's with prefills in a fifth of the steps; within 10 % with them
  under one in twenty). ITL, pauses, stalls and interference are over these per-token gaps, so the same engine
  gives the same figures whatever its framing, within those bounds; the gaps of a request sum to its decode
  time, so the mean ITL is the TPOT. The extra tokens of the first emission have no gap before
  them (TTFT covers them). A lane whose events carry several tokens says so (``tokens_per_event``).
- **prefill interval** of a request: from its admission (sent plus the server's queue time, where known;
  else sent) to its first token. A gap of another request that overlaps it is *stalled*.
- **decode step** ``d`` of a rung: the median of its per-token gaps that overlap no prefill, the token-time a
  decode has when no prompt is admitted beside it, at that rung's batch: the engine's step where each step makes
  one token a request (whatever the framing), that step over the tokens a verify step delivers under
  speculative decoding (the pause excess is then in token-times, as the per-token gaps are). With fewer than
  ``MIN_CLEAN_GAPS`` such gaps (prefills overlap nearly every step), the median of all its gaps stands in (an
  upper estimate of the step, so excesses are then underestimated; ``decode_step_gaps`` is 0 and the verdict
  says so).
- **pause excess** of a request: the longest of its m stalled gaps less what the longest of m gaps lasts with
  no prefill beside them (``jitter_baseline``: the rung's clean gaps' quantile m / (m + 1), the expected rank
  of the largest of m draws; ``d`` for one stalled gap, and where the rung has too few clean gaps), 0 when none
  of its gaps was stalled: how much longer another request's prefill held it than its own decode cadence would
  have. Why not ``d`` for every gap: the worst of a request's steps is slow by the step's own noise and by a
  batch above the rung's median whatever runs beside it, and a held step carries both, so against ``d`` they
  were counted as the hold (the datasheet's draw 1:110, 53 slots, step noise sigma 0.28: 26 of 224 requests past
  0.25 s where the engine's prefills held 9, and a trace answer of 0.25x against 0.59x). A uniformly slow
  decode has no excess whatever its step (a 285 ms step is slow, not starved); a whole-prompt prefill of a
  long prompt holds every running decode for the whole prompt, so the excess grows with the prompt; a
  chunked prefill holds it for at most a chunk. Quantiles over requests (``pause_excess_s``) and the largest
  ones (``pause_excess_tail``) for the verdict's count.
- **held together**: one prefill holds every request decoding beside it, so the requests' longest pauses are
  not independent draws: at c=8 a whole 1,200-token prompt holds seven decodes in one step, and their seven
  pauses are one draw of the steps' holds. ``held_steps`` groups the judged requests' stalled gaps by the step
  they waited (gaps overlapping by half: every stream's gap of one step, a millisecond apart on the wire), each
  step its largest excess (``pause_step_tail``), and ``pause_steps_per_request`` is how many held steps a
  judged request met on average: the verdict bounds the share of requests held past a limit from the steps
  (``answer.judges.held_share_bound``), where the requests taken one by one read a window whose long holds
  happened not to come (0 of 83 held, a 95 % bound of 0.7 %) as showing at most 1 % held where 6 % are (the
  datasheet's draw 1:182).
- **shape**: does a hold grow with the prompt that caused it? ``stall_prompt_elasticity`` is the elasticity of
  the stalled gaps' excess in the prompt tokens prefilled beside them (a cache hit is not prefilled): the
  gaps are split at the geometric middle of the prompt sizes that stalled them, and
  ``log(excess_hi / excess_lo) / log(prompt_hi / prompt_lo)`` of the two groups' medians, where the sizes
  differ at least twofold and each group has two gaps (else ``None``: one prompt size cannot show a shape).
  Twofold is asked of the prompts themselves too (each prompt once for each gap it held, split the same way):
  at a few users, two prompts of one size are at times prefilled in one step, whose tokens then lie twofold
  from a step of one, yet the workload has one prompt size, and the pause objective applies (the datasheet's
  truth reads the shape over the prompts; its draw 1:101, prompts 1.7x apart, was judged against 0.1 s).
  Every gap a prefill held counts, those that lasted no longer than ``d`` too: a held gap is the step's noise
  and the hold, and where a short prompt's hold is small against the noise, keeping only the gaps past ``d``
  keeps those the noise lengthened, which raises the shorter prompts' median more than the longer ones' and
  reads a whole prefill as bounded (40 ms steps under lognormal noise sigma 0.3, prompts of 64 and 256 tokens
  held 13 and 51 ms: 0.8 where the hold is proportional to the prompt; the datasheet's 7 settled misses of
  this kind read 0.6-0.77). The median of every held gap less the clean median is the hold, whether the noise
  scales the step or adds to it, so the ratio of two medians is the hold's; where the shorter prompts' median
  is not positive, their hold cannot be told from nothing and there is no shape (``None``; nor where the
  longer prompts' is not).
  A prefill of fewer than ``MIN_SHAPE_TOKENS`` (16) tokens, a prompt the cache served nearly whole, is left
  out: its cost is the step's fixed overhead, whatever the prefill's shape.
  A whole-prompt prefill holds a decode for the whole prompt, so the hold grows with it: about 1 (0.9-1.0
  with a step's fixed overhead). A prefill chunked at C tokens holds it for at most a chunk: about
  ``log(C / prompt_lo) / log(prompt_hi / prompt_lo)``, 0.4 for 256-token chunks between 64- and 1500-token
  prompts. The first is unbounded in the prompt, the definition of decode starvation's cause; the second is
  bounded, interference (``answer.judges``). The shape, unlike a ratio of the hold to the decode step,
  does not move with the hardware: a faster machine shortens both the hold and the step, in proportion.
- **prefill interference**: a stalled gap lost what it lasted beyond ``d``; ``interference_share`` is the time
  lost over all decode time (the sum of the window's gaps), ``stall_per_prompt_s`` the mean loss of one
  stalled gap, ``stall_ms_per_prompt_token`` that over the mean prompt of the admitted requests, and
  ``prefill_events`` the prefills that began inside the window while another request was decoding.
"""

from __future__ import annotations

import bisect
import itertools
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = [
    "BURST_GAP_S",
    "MIN_CLEAN_GAPS",
    "Overlap",
    "StallFigures",
    "emission_gaps",
    "held_steps",
    "jitter_baseline",
    "longest_stalled_gap",
    "prompt_elasticity",
    "stall_figures",
    "token_gaps",
]

BURST_GAP_S = 0.001
MIN_CLEAN_GAPS = 10
MIN_SHAPE_TOKENS = 16


def emission_gaps(times: Sequence[float], burst: float = BURST_GAP_S) -> list[tuple[float, float]]:
    """(start, end) of each gap between emissions of one request: consecutive token times at least ``burst``
    apart (module docstring; ``burst`` in the times' unit, ``BURST_GAP_S`` for seconds)."""
    return [(a, b) for a, b in itertools.pairwise(times) if b - a >= burst]


def token_gaps(times: Sequence[float], counts: Sequence[int] | None = None,
               burst: float = BURST_GAP_S) -> list[tuple[float, float]]:
    """(start, end) of each per-token gap of one request (module docstring): events ``burst`` apart at most are
    one emission carrying the sum of their ``counts`` (one token an event when ``None``); the gap from the
    previous emission's last event to an emission of n tokens is cut into n contiguous gaps: n - 1 at the
    request's pace (the median of its gaps per token) or at ``gap / n`` when that is shorter, and the rest
    first. With one token an event and no burst it is ``emission_gaps``. ``ValueError`` where ``counts`` is not
    one count an event."""
    n = len(times)
    if counts is not None and len(counts) != n:
        raise ValueError(f"counts: {len(counts)} token counts for {n} events; one count an event")
    emissions: list[tuple[float, float, int]] = []
    i = 0
    previous: float | None = None
    while i < n:
        j, tokens = i, 1 if counts is None else counts[i]
        while j + 1 < n and times[j + 1] - times[j] < burst:
            j += 1
            tokens += 1 if counts is None else counts[j]
        if previous is not None:
            emissions.append((previous, times[i], max(tokens, 1)))
        previous, i = times[j], j + 1
    if all(k == 1 for _, _, k in emissions):
        return [(a, b) for a, b, _ in emissions]
    pace = statistics.median((b - a) / k for a, b, k in emissions)
    out: list[tuple[float, float]] = []
    for a, b, k in emissions:
        step = min(pace, (b - a) / k)
        first = b - (k - 1) * step
        out.append((a, first))
        out.extend((first + m * step, first + (m + 1) * step) for m in range(k - 1))
    return out


class Overlap:
    """Does a gap (a, b) overlap one of the intervals (s, e), ``s < b and e > a``? A bisect into the
    intervals sorted by start, against the running maximum of their ends."""

    def __init__(self, intervals: Iterable[tuple[float, float]]) -> None:
        ordered = sorted(intervals)
        self.starts = [s for s, _ in ordered]
        self.run_max: list[float] = []
        top = -math.inf
        for _, e in ordered:
            top = max(top, e)
            self.run_max.append(top)

    def __call__(self, a: float, b: float) -> bool:
        i = bisect.bisect_left(self.starts, b)
        return i > 0 and self.run_max[i - 1] > a


def longest_stalled_gap(gaps: Iterable[tuple[float, float]],
                        prefills: Sequence[tuple[float, float]]) -> float | None:
    """Length of the longest gap (a, b) that overlaps some prefill interval (s, e): s < b and e > a.

    Only a gap longer than the best so far is tested, so the usual case costs one comparison per gap.
    """
    if not prefills:
        return None
    overlaps = Overlap(prefills)
    best = 0.0
    for a, b in gaps:
        if b - a > best and overlaps(a, b):
            best = b - a
    return best if best > 0 else None


@dataclass(frozen=True, slots=True)
class StallFigures:
    decode_step_s: float | None
    decode_step_gaps: int
    excesses: list[float]  # per judged request, its pause excess
    excess_of: dict[int, float]  # the same by the decoding's index, and those of the earlier pass's decodings
    longest_stalled_s: float | None
    prefill_events: int
    interference_share: float | None
    stall_per_prompt_s: float | None
    stall_ms_per_prompt_token: float | None
    prompt_elasticity: float | None = None
    holds: list[float] | None = None  # ``held_steps``: each held step's excess
    holds_per_request: float | None = None  # the judged requests' held steps, on average


@dataclass(frozen=True, slots=True)
class Decoding:
    """One request's decode as the stall figures need it: its emission gaps inside the window, all its
    emission gaps (for its own pause), whether it is judged (sent in the window, ended or followed), the
    (first token, end) of its decode, and whether it was sent in the pass before a trace rung's window (its
    pause excess is judged for the pass-paired attainment, ``core.passes.paired_attainment``)."""

    window_gaps: list[tuple[float, float]]
    gaps: list[tuple[float, float]]
    judged: bool
    decode: tuple[float, float] | None
    earlier: bool = False  # of the pass before a trace rung's window: its excess is wanted, not in the figures


def jitter_baseline(clean: Sequence[float], m: int, step: float) -> float:
    """What the longest of ``m`` gaps would last with no prefill beside them: the clean gaps' (sorted)
    quantile ``m / (m + 1)``, the expected rank of the largest of m draws from their distribution, read as the
    clean gap at that rank (an observed gap, where ``core.statistics.quantile`` interpolates); ``step`` (their
    median) for one gap, and where the rung has too few clean gaps to tell."""
    if not clean or m <= 1:
        return step
    return float(clean[min(len(clean) - 1, math.ceil(m / (m + 1) * len(clean)) - 1)])


def stall_figures(decodings: Sequence[Decoding], prefills: Sequence[tuple[float, float, int | None]],
                  start: float, end: float, overlapping: bool) -> StallFigures:
    """The stall figures of one step (module docstring). ``prefills``: (admitted, first token or end, prompt
    tokens) of every request of the step; ``overlapping``: another request can run beside one (a closed rung
    above one user, an open-loop rung whose in-flight cap is not one: arrivals do not wait for each other)."""
    overlaps = Overlap((s, e) for s, e, _ in prefills)
    window_gaps = [g for d in decodings for g in d.window_gaps]
    clean = [b - a for a, b in window_gaps if not overlaps(a, b)] if overlapping else \
        [b - a for a, b in window_gaps]
    if len(clean) >= MIN_CLEAN_GAPS:
        step: float | None = float(statistics.median(clean))
        clean_n = len(clean)
    else:
        step = float(statistics.median(b - a for a, b in window_gaps)) if window_gaps else None
        clean_n = 0
    excesses: list[float] = []
    excess_of: dict[int, float] = {}
    longest: float | None = None
    ordered_clean = sorted(clean) if clean_n else []
    held: list[tuple[float, float, float]] = []  # every judged request's stalled gap, with its excess
    for i, d in enumerate(decodings):
        if not (d.judged or d.earlier):
            continue
        worst = 0.0
        if overlapping and step is not None:
            stalled = [(a, b) for a, b in d.gaps if overlaps(a, b)]
            if stalled:
                baseline = jitter_baseline(ordered_clean, len(stalled), step)
                worst = max(0.0, max(b - a for a, b in stalled) - baseline)
                if d.judged:
                    held += [(a, b, b - a - baseline) for a, b in stalled]
        if d.judged:
            excesses.append(worst)
        excess_of[i] = worst
    holds = held_steps(held) if overlapping and excesses else None
    for a, b in window_gaps:
        if (longest is None or b - a > longest) and overlaps(a, b):
            longest = b - a
    if not overlapping:
        return StallFigures(step, clean_n, excesses, excess_of, None, 0, None, None, None)
    per_request = None if holds is None else len(held) / len(excesses)
    elasticity = None if step is None else prompt_elasticity(window_gaps, prefills, step)
    firsts = sorted(d.decode[0] for d in decodings if d.decode is not None)
    ends = sorted(d.decode[1] for d in decodings if d.decode is not None)
    events = [(s, n) for s, _, n in prefills if start <= s <= end
              and bisect.bisect_right(firsts, s) - bisect.bisect_right(ends, s) > 0]
    total = sum(b - a for a, b in window_gaps)
    if not events or step is None or total <= 0:
        return StallFigures(step, clean_n, excesses, excess_of, longest, len(events), None, None, None, elasticity,
                            holds, per_request)
    losses = [b - a - step for a, b in window_gaps if b - a > step and overlaps(a, b)]
    per_stall = sum(losses) / len(losses) if losses else 0.0
    sizes = [n for _, n in events if n]
    per_token = 1000.0 * per_stall * len(sizes) / sum(sizes) if sizes else None
    return StallFigures(step, clean_n, excesses, excess_of, longest, len(events), sum(losses) / total, per_stall,
                        per_token, elasticity, holds, per_request)


def held_steps(held: Sequence[tuple[float, float, float]]) -> list[float]:
    """Each held step's excess (module docstring, "held together"): the judged requests' stalled gaps ``(start,
    end, excess)`` grouped where they are one engine step (a gap overlapping the group's first by at least half of
    the shorter of the two: every stream decoding in a step waits it at once), a group's excess its largest."""
    out: list[float] = []
    anchor: tuple[float, float] | None = None
    for a, b, x in sorted(held):
        if anchor is not None:
            shared = min(b, anchor[1]) - max(a, anchor[0])
            if shared > 0 and shared >= 0.5 * min(b - a, anchor[1] - anchor[0]):
                out[-1] = max(out[-1], x)
                continue
        anchor = (a, b)
        out.append(x)
    return out


def prompt_elasticity(gaps: Sequence[tuple[float, float]], prefills: Sequence[tuple[float, float, int | None]],
                      step: float) -> float | None:
    """How a stalled gap's excess grows with the prompt tokens prefilled beside it (module docstring). A prefill
    counts for a gap when they share at least half of the gap or half of the prefill: a whole-prompt prefill
    lies inside the gap it stalls, a chunked one spans the gaps of its chunks, and a gap that only grazes a
    prefill's edge was not stalled by it."""
    ordered = sorted((s, e, n) for s, e, n in prefills if n and n >= MIN_SHAPE_TOKENS and e > s)
    if not ordered:
        return None
    starts = [s for s, _, _ in ordered]
    longest = max(e - s for s, e, _ in ordered)
    pairs: list[tuple[int, float]] = []
    singles: list[int] = []  # each prompt that held a gap, once a gap
    for a, b in gaps:
        excess = b - a - step  # kept where it is not positive: a short prompt's hold can lie within the noise
        lo, hi = bisect.bisect_left(starts, a - longest), bisect.bisect_left(starts, b)
        tokens = 0
        for s, e, n in ordered[lo:hi]:
            shared = min(b, e) - max(a, s)
            if shared > 0 and (shared >= 0.5 * (b - a) or shared >= 0.5 * (e - s)):
                tokens += n
                singles.append(n)
        if tokens:
            pairs.append((tokens, excess))
    if len(pairs) < 4 or _halves_ratio(singles) < 2:
        return None
    halves = _halves([n for n, _ in pairs])
    low = [(n, x) for n, x in pairs if n <= halves]
    high = [(n, x) for n, x in pairs if n > halves]
    if len(low) < 2 or len(high) < 2:
        return None
    n_lo, n_hi = statistics.median(n for n, _ in low), statistics.median(n for n, _ in high)
    x_lo, x_hi = statistics.median(x for _, x in low), statistics.median(x for _, x in high)
    if n_hi < 2 * n_lo or x_lo <= 0 or x_hi <= 0:
        return None
    return math.log(x_hi / x_lo) / math.log(n_hi / n_lo)


def _halves(sizes: Sequence[int]) -> float:
    """Where the shape's shorter and longer prompts part: the geometric middle of the sizes' 10th and 90th
    percentiles."""
    ordered = sorted(sizes)
    return math.sqrt(ordered[len(ordered) // 10] * ordered[(9 * len(ordered)) // 10])


def _halves_ratio(sizes: Sequence[int]) -> float:
    """The longer prompts' median over the shorter ones', split at ``_halves``; 0 where a half is empty."""
    middle = _halves(sizes) if sizes else 0.0
    low, high = [n for n in sizes if n <= middle], [n for n in sizes if n > middle]
    return statistics.median(high) / statistics.median(low) if low and high else 0.0
