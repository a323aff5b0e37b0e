"""The judges: how one rung stands on each limit of the policy. A judge reads a step's figures (and what the
lane's other rungs tell of it, ``LaneBasis``) and says a ``Check`` (a judgment with a status) or a
``Violation`` (a broken objective, or ``None``); which limits exist, what each binds as, in what order, and
which figure, unit and setting each reads is declared once in ``answer.checks``, and ``answer.verdicts`` runs
them. A judge names the reading it used where its limit has several (``reading``: a key of its entry's
``readings``); the verdict states that reading's figure, unit and setting beside it.

The judgments (definitions of the figures in ``core.step_figures``; the reasons in DESIGN.md):

- ``decode_starvation``: a request is held when another request's prefill made one of its pauses longer than
  its decode step by more than the *stall limit*. Where the lane's holds grow with the prompt that caused them
  (a whole-prompt prefill: ``stall_prompt_elasticity`` at least ``unbounded_stall_elasticity``), the hold is
  unbounded in the prompt, and it counts once felt, past ``min_pause_excess_s`` (0.1 s); where they are
  bounded (a chunked prefill) or of unknown shape (one prompt size), only past the time objective
  ``slo.tbt_p99_s``; where the policy sets ``max_pause_ratio``, also past that many of the lane's steps. The
  p99 objective is broken when *significantly* more than 1 % of the rung's requests were held (the binomial
  count test of ``core.statistics.exceedance_p_value`` at ``1 - confidence``), so a p99 over 20 requests is
  not their largest one; more than 1 % held but too few to show it is ``insufficient_data``, and so is a rung
  whose pauses do not show at most 1 % held: fewer than 1 % past the limit among 20 requests says little of
  the population, so the share past it is bounded from the tail of the pauses the rung kept
  (``core.statistics.tail_share``'s upper bound, an exponential tail above the largest kept pauses) and
  must be at most 1 %: over the rung's held steps where the figures have them (``held_share_bound``: one
  prefill holds every decode beside it, so requests held in one step are one draw, not several; the steps'
  chance of a hold past the limit times the held steps a request meets), else over its requests. The cause is
  part of the definition: a pause that no prefill overlapped is no starvation, and a slow step everywhere is
  judged by the ITL objective (``core.stalls``). The shape does not move with the hardware (a faster machine
  shortens the hold and the step in proportion), so the real pair ``-b 2048``/``-b 256`` is told apart on
  any CPU, where a ratio to the step is not (a CPU's 3 ms step makes a 256-token chunk's 90 ms hold 30x).
- ``prefill_starvation``: a request that found every slot busy waited past the bound FIFO admission puts on
  it, from the slots that actually freed after it arrived (``core.admission``), by more than
  ``max_admission_wait_ratio`` and by more than a felt wait (``min_admission_overrun_s``, 0.1 s: a FIFO
  admission whose bound was a few tens of ms, late by a loaded host's wake-up, is no request passed over,
  which waits a whole release more); censored waits (requests still waiting when last seen) count as what they
  are, lower bounds.
- ``fairness``: users served nothing in the window while their requests waited past their FIFO bound; or
  users' waits (censored ones included) differ *significantly* (permutation log-rank, ``fairness_alpha``)
  *and materially* (worst user's mean over the lane's, ``max_user_wait_ratio``), or their decode pace does
  (slowest user's mean over the fastest's, ``max_user_itl_ratio``); Jain's index and the best/worst share
  bind only where the policy sets them.
- ``interference``: the share of decode time lost to others' prefills, warned about above
  ``interference_warn_share``, binding only where ``max_interference_share`` is set.
- ``memory``: the runtime's KV cache fuller than ``kv_usage_max_ratio`` binds; a GPU with less free memory
  than ``memory_headroom_min_ratio`` binds only where the rung filled it (the lowest rung had the headroom):
  llama.cpp allocates its weights and KV cache when it starts, so a flat, full GPU is reported (``warn``),
  never turned into a concurrency limit, and memory that other processes hold is said as such.

The per-request objectives (TTFT, TPOT and e2e p95, the error ratio) are judged in ``answer.objective_judges``,
the ITL objective in ``answer.itl_judge``, by the same count test (``quantile_exceeds``).

Each check has a status: ``ok``, ``flagged`` (binding: a violation), ``warn`` (reported, not binding),
``not_applicable`` (c=1 has no other request; a rung where every user has a slot queues nobody),
``insufficient_data`` (the counts say how much was missing) or ``unknown`` (the source did not measure the
figure, as the Prometheus histograms fallback does not). Never "unknown" where a figure can be computed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from satbench.answer.policy import Policy
from satbench.core.figures import MemoryFigures, StepFigures, Tail
from satbench.core.statistics import exceedance_p_value, tail_share

__all__ = [
    "Check",
    "LaneBasis",
    "Violation",
    "above_limit",
    "decode_check",
    "fairness_check",
    "interference_check",
    "memory_check",
    "memory_headroom_ratio",
    "prefill_check",
    "quantile_exceeds",
    "stall_limit",
]


@dataclass(frozen=True, slots=True)
class Violation:
    """A broken limit, named after the ``binding_constraint`` it would become. ``reading``: which of its
    entry's readings the judge used (empty: the first); ``figure``, ``unit`` and ``setting`` are that
    reading's, stated by ``answer.verdicts.check_step`` from the registry (``answer.checks``)."""

    constraint: str
    measured: float
    limit: float
    detail: str
    reading: str = ""
    figure: str = ""
    unit: str = ""
    setting: str = ""


@dataclass(frozen=True, slots=True)
class Check:
    """Where one step stands on one judgment (module docstring); ``reading``, ``figure``, ``unit`` and
    ``setting`` as a ``Violation``'s."""

    status: str
    measured: float | None = None
    limit: float | None = None
    detail: str = ""
    reading: str = ""
    figure: str = ""
    unit: str = ""
    setting: str = ""


@dataclass(frozen=True, slots=True)
class LaneBasis:
    """What the lane's other rungs tell a judge of one rung: ``baseline_step_s``, the decode step at its
    lowest rung (the cadence a policy ratio is taken against, a hold being felt the same at every rung); and
    ``lowest_memory``, that rung's memory (what the runtime held before the load); ``elasticity``, its
    holds' elasticity in the prompt over every rung. Each None where not measured."""

    baseline_step_s: float | None = None
    lowest_memory: MemoryFigures | None = None
    elasticity: float | None = None


def memory_headroom_ratio(mem: MemoryFigures) -> float | None:
    """The least free share of any of the lane's GPUs at its own peak (the fullest GPU's, where only that is
    known)."""
    if mem.gpu_headroom_min_ratio is not None:
        return mem.gpu_headroom_min_ratio
    if mem.gpu_max is None or not mem.gpu_total:
        return None
    return 1.0 - mem.gpu_max / mem.gpu_total


def above_limit(constraint: str, measured: float | None, limit: float | None, what: str) -> Violation | None:
    if measured is None or limit is None or not measured > limit:
        return None
    return Violation(constraint, float(measured), float(limit), f"{what} {measured:.4g} > {limit:.4g}")


def stall_limit(policy: Policy, step_s: float | None, unbounded: bool | None = None) -> float | None:
    """How long another request's prefill may hold a decode beyond its step before the hold counts (module
    docstring): ``slo.tbt_p99_s``; ``min_pause_excess_s`` where the holds grow with the prompt (``unbounded``);
    ``max_pause_ratio - 1`` steps where the policy sets a ratio (never under ``min_pause_excess_s``).
    ``None`` where the policy bounds nothing."""
    limits = [] if policy.slo.tbt_p99_s is None else [policy.slo.tbt_p99_s]
    if unbounded:
        limits.append(policy.min_pause_excess_s)
    if policy.max_pause_ratio is not None and step_s is not None:
        limits.append(max(policy.min_pause_excess_s, (policy.max_pause_ratio - 1) * step_s))
    return min(limits) if limits else None


def quantile_exceeds(tail: Tail, point: float | None, limit: float, q: float, alpha: float) -> tuple[bool, str]:
    """Is the q-quantile objective ``limit`` broken? Significantly more than a ``1 - q`` share of the ``n``
    requests above it, or (more exceed than the tail keeps) the quantile itself above it. Also says the count."""
    k, exact = tail.above(limit)
    p = exceedance_p_value(k, tail.n, q)
    said = f"{k}{'' if exact else '+'} of {tail.n} requests above it (p = {p:.2g})"
    if p < alpha:
        return True, said
    return (not exact and point is not None and point > limit), said


def held_share_bound(step: StepFigures, limit: float, confidence: float) -> tuple[float, str]:
    """The share of a rung's requests held past ``limit``, bounded at ``confidence`` (module docstring), and what
    it was read from: from its held steps where the figures have them, each step's chance of a hold past the
    limit (``core.statistics.tail_share`` over the steps, which are independent where the requests one step holds
    together are not) times the held steps a request meets (a request is held when one of its steps is: the union
    bound); from its requests' own pauses where they do not."""
    steps, per_request = step.pause_step_tail, step.pause_steps_per_request
    if steps.n and per_request is not None:
        return (min(1.0, per_request * tail_share(steps.top, steps.n, limit, confidence)),
                f"{steps.n} held steps' pauses ({per_request:.1f} a request)")
    tail = step.pause_excess_tail
    return tail_share(tail.top, tail.n, limit, confidence), "pauses"


def decode_check(step: StepFigures, policy: Policy, lane: LaneBasis) -> Check:
    """Decode starvation: prefill-held pauses beyond the stall limit, significantly often (module docstring).
    The lane's ``baseline_step_s`` is the cadence a policy ratio is taken against (a hold is felt the same at
    every rung; a rung's own step grows with its batch), and the step of a rung whose own cannot be told; its
    ``elasticity`` (its rungs' ``stall_prompt_elasticity``), else this rung's, the holds' shape."""
    baseline_step_s, elasticity = lane.baseline_step_s, lane.elasticity
    if step.concurrency < 2:
        return Check("not_applicable", detail="one user: no other request's prefill can pause a decode")
    tail, events = step.pause_excess_tail, step.prefill_events
    if not tail.n or events is None:
        return Check("unknown", detail="this source did not measure per-request pauses")
    own = step.decode_step_s if step.decode_step_gaps else None
    step_s = own if own is not None else (baseline_step_s or step.decode_step_s)
    cadence = baseline_step_s or step_s
    shape = elasticity if elasticity is not None else step.stall_prompt_elasticity
    unbounded = None if shape is None else shape >= policy.unbounded_stall_elasticity
    limit = stall_limit(policy, cadence, unbounded)
    p99 = step.pause_excess_s.p99
    if limit is None or step_s is None or cadence is None or p99 is None:
        return Check("ok", p99, None, "no stall limit in the policy (slo.tbt_p99_s and max_pause_ratio unset)")
    where = "" if own is not None else " (prefills overlap nearly every step: the lowest rung's step is used)"
    grows = ("holds of unknown shape (one prompt size)" if shape is None else
             f"holds {'grow with' if unbounded else 'bounded in'} the prompt (elasticity {shape:.2f}: "
             f"{'a whole-prompt prefill' if unbounded else 'a chunked prefill'})")
    said = (f"pause excess p99 {p99 * 1000:.0f} ms beyond the rung's {step_s * 1000:.1f} ms decode step{where}; "
            f"{grows}; stall limit {limit * 1000:.0f} ms")
    broken, count = quantile_exceeds(tail, p99, limit, 0.99, 1 - policy.confidence)
    if broken:
        return Check("flagged", p99, limit, f"{said}: {count}, significantly more than 1 % held by another "
                                             f"request's prefill")
    held, _ = tail.above(limit)
    if held > 0.01 * tail.n:
        # more than 1 % held: the p99 by the count (the value at most 1 % of the requests exceed) is past the
        # limit, where an interpolated p99 over few requests may not be (1 of 46 held: 95 ms against 100 ms)
        rank = tail.n - math.ceil(0.99 * tail.n)
        point = max(p99, tail.top[rank]) if rank < len(tail.top) else p99
        return Check("insufficient_data", point, limit,
                     f"{said}; {count}: more than 1 % held, too few requests to show it is more than chance "
                     f"(a longer window would tell)")
    if tail.n < policy.min_pause_requests:
        return Check("insufficient_data", p99, limit,
                     f"{said}; {tail.n} requests judged (policy needs {policy.min_pause_requests})")
    if events < policy.min_prefill_events:
        return Check("insufficient_data", p99, limit,
                     f"{said}; {events} prefills beside a decode: too few to show the pauses bounded (policy "
                     f"needs {policy.min_prefill_events})")
    bound, whose = held_share_bound(step, limit, policy.confidence)
    if bound > 1 - 0.99:
        return Check("insufficient_data", p99, limit,
                     f"{said}; {count}, but the tail of the {whose} allows up to {bound:.1%} held past it "
                     f"({policy.confidence:.0%} bound): too few requests to show at most 1 % (a longer window "
                     f"would tell)")
    return Check("ok", p99, limit, f"{said}; {count}, over {events} prefills beside a decode; at most "
                                   f"{bound:.2%} held past it ({policy.confidence:.0%} bound from the tail)")


def interference_check(step: StepFigures, policy: Policy, lane: LaneBasis) -> Check:
    """Prefill interference: share of decode time lost to others' prefills; warned, binding if set
    (``reading`` ``bound``: against ``max_interference_share``)."""
    if step.concurrency < 2:
        return Check("not_applicable", detail="one user: no other request's prefill")
    share, events = step.interference_share, step.prefill_events
    if events is None:
        return Check("unknown", detail="this source did not measure prefill interference")
    if share is None:
        return Check("insufficient_data", detail=f"{events} prefills beside a decode")
    per = step.stall_per_prompt_s
    said = (f"{share:.1%} of decode time lost to {events} prefills"
            + ("" if per is None else f", {per * 1000:.0f} ms per stalled step")
            + ("" if step.stall_ms_per_prompt_token is None
               else f" ({step.stall_ms_per_prompt_token:.3f} ms per prompt token)"))
    bound = policy.max_interference_share
    if bound is not None and share > bound:
        return Check("flagged", share, bound, f"{said} > policy.max_interference_share {bound:.0%}",
                     reading="bound")
    if share > policy.interference_warn_share:
        return Check("warn", share, policy.interference_warn_share,
                     f"{said} > policy.interference_warn_share {policy.interference_warn_share:.0%}")
    return Check("ok", share, bound, said)


def prefill_check(step: StepFigures, policy: Policy, lane: LaneBasis) -> Check:
    """Prefill starvation: a queued request's wait against its own FIFO bound (module docstring); the
    longest wait against ``prefill_wait_max_s`` where the policy sets one (``reading`` ``absolute``)."""
    absolute = policy.prefill_wait_max_s
    if absolute is not None and step.prefill_wait_max_s is not None and step.prefill_wait_max_s > absolute:
        return Check("flagged", step.prefill_wait_max_s, absolute,
                     f"longest wait for a first token {step.prefill_wait_max_s:.3g} s > "
                     f"policy.prefill_wait_max_s {absolute:g} s", reading="absolute")
    queued, ratio = step.queued_requests, step.admission_overrun_max_ratio
    if queued is None:
        why = ("one user" if step.concurrency < 2 else
               "every user has a slot (c <= slots) or the runtime did not say its slots")
        return Check("not_applicable", detail=f"{why}: no request waits for admission")
    limit = policy.max_admission_wait_ratio
    if ratio is None:
        return Check("insufficient_data", None, limit,
                     f"{queued} queued requests, none whose FIFO bound could be told")
    wait, bound = step.admission_wait_max_s or 0.0, step.admission_wait_bound_s or 0.0
    said = (f"{step.admission_overruns} requests waited past their FIFO bound ({queued} found every slot busy); the "
            f"worst waited {wait:.3g} s against {bound:.3g} s ({ratio:.2f}x, limit {limit:g}x)")
    # past the ratio by less than a felt wait is a late wake-up, not a request passed over; a source that said
    # the ratio without the wait and its bound is judged by the ratio alone
    felt = step.admission_wait_max_s is None or step.admission_wait_bound_s is None \
        or wait - bound > policy.min_admission_overrun_s
    if ratio > limit and felt:
        return Check("flagged", ratio, limit, said)
    if ratio > limit:
        said += f"; {wait - bound:.3g} s past it, under policy.min_admission_overrun_s " \
                f"{policy.min_admission_overrun_s:g} s"
    if queued < policy.min_queued_requests:
        return Check("insufficient_data", ratio, limit, f"{said}; policy needs {policy.min_queued_requests} queued")
    return Check("ok", ratio, limit, said)


def fairness_check(step: StepFigures, policy: Policy, lane: LaneBasis) -> Check:
    """Fairness: users' waits differ significantly and materially; Jain / share where the policy sets them
    (``reading``: ``jain``, ``share``, ``queue``, ``starved``; empty: the users' ratios)."""
    if step.jain is not None and policy.jain_min is not None and step.jain < policy.jain_min:
        return Check("flagged", step.jain, policy.jain_min, f"Jain's index {step.jain:.3f} < policy.jain_min "
                                                            f"{policy.jain_min}", reading="jain")
    share = step.max_min_share
    if share is not None and policy.max_min_share_max is not None and share > policy.max_min_share_max:
        return Check("flagged", share, policy.max_min_share_max, f"max/min user share {share:.3g} > "
                                                                 f"{policy.max_min_share_max:g}", reading="share")
    q99 = step.queue_s.p99
    if q99 is not None and policy.queue_p99_max_s is not None and q99 > policy.queue_p99_max_s:
        return Check("flagged", q99, policy.queue_p99_max_s, f"queue wait p99 (s) {q99:.4g} > "
                                                             f"{policy.queue_p99_max_s:.4g}", reading="queue")
    if step.concurrency < 2:
        return Check("not_applicable", detail="one user")
    if step.users_starved:
        return Check("flagged", float(step.users_starved), 0.0,
                     f"{step.users_starved} of {step.concurrency} users were served nothing in the window while "
                     f"their requests waited past their FIFO bound (others were served: Jain's index "
                     f"{step.jain if step.jain is not None else float('nan'):.3f})", reading="starved")
    # (p-value, ratio, its bound, the difference in seconds, its floor, words)
    tests = [(step.user_wait_p_value, step.user_wait_ratio, policy.max_user_wait_ratio,
              step.user_wait_excess_s, policy.min_user_wait_gap_s,
              "worst user's mean wait {r:.2f}x the lane's mean (p = {p:.2g} that users wait alike)"),
             (step.user_itl_p_value, step.user_itl_ratio, policy.max_user_itl_ratio,
              step.user_itl_excess_s, policy.min_user_itl_gap_s,
              "slowest user's decode pace (median gap) {r:.2f}x the fastest's (p = {p:.2g})")]
    jain = "" if step.jain is None else f"; Jain's index {step.jain:.3f}"
    known = [(p, r, bound, gap, floor, text.format(r=r, p=p)) for p, r, bound, gap, floor, text in tests
             if p is not None and r is not None]
    if not known:
        if step.pause_requests is None:  # the source measured no per-request figures at all
            return Check("unknown", step.jain, None, f"users' waits not measured by this source{jain}")
        return Check("insufficient_data",
                     detail=f"fewer than two users with a queued wait or a decode pace in the window{jain}")
    said = "; ".join(text for *_, text in known) + jain
    for p, r, bound, gap, floor, _ in known:
        if p < policy.fairness_alpha and r > bound and (gap is None or gap >= floor):
            return Check("flagged", r, bound,
                         f"{said}: significant (< {policy.fairness_alpha:g}), beyond {bound:g}x"
                         + ("" if gap is None else f" and {gap * 1000:.0f} ms apart"))
    p, r, bound, *_ = known[0]
    return Check("ok", r, bound, said)


def memory_check(step: StepFigures, policy: Policy, lane: LaneBasis) -> Check:
    """Memory: a full KV cache binds; a GPU short of headroom binds only where this rung filled it (module
    docstring; ``reading`` ``headroom``). The lane's ``lowest_memory``: what the runtime held before the
    load."""
    mem, lowest = step.memory_bytes, lane.lowest_memory
    kv = mem.kv_usage_max_ratio
    if kv is not None and kv > policy.kv_usage_max_ratio:
        return Check("flagged", kv, policy.kv_usage_max_ratio,
                     f"KV cache {kv:.0%} full (tokens held by processing slots over its capacity) > "
                     f"policy.kv_usage_max_ratio {policy.kv_usage_max_ratio:.0%}: admissions wait for KV space")
    headroom = memory_headroom_ratio(mem)
    kv_said = "" if kv is None else f"; KV cache at most {kv:.0%} full"
    if headroom is None:
        return Check("unknown", kv, policy.kv_usage_max_ratio, f"no GPU memory reading{kv_said}")
    other = ("" if not mem.gpu_other_max else
             f"; {mem.gpu_other_max / 2**30:.1f} GiB of it held by other processes than the runtime")
    said = f"least free GPU memory {headroom:.1%} of its size{other}{kv_said}"
    floor = policy.memory_headroom_min_ratio
    if headroom >= floor:
        return Check("ok", headroom, floor, said, reading="headroom")
    before = None if lowest is None else memory_headroom_ratio(lowest)
    if before is None or before < floor:
        return Check("warn", headroom, floor,
                     f"{said} < {floor:.0%} at every rung: memory the runtime (or another process) holds from "
                     f"its start, not a concurrency limit", reading="headroom")
    return Check("flagged", headroom, floor, f"{said} < {floor:.0%}; the lowest rung left {before:.1%}: this "
                                             f"rung filled it", reading="headroom")
