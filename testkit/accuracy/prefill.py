"""The peak prefill answer's accuracy over a declared space of engines (``bench/prefill_accuracy.py``).

For each seeded draw of an engine (``PrefillSpace``), the truth is the engine's own prefill capacity from its
construction, never satbench's analysis: a step holding ``n`` prompt tokens lasts
``simulator.stepcost.step_seconds(cost, 0, n, ubatch, time_scale)`` and holds at most the logical batch ``-b``
and at most what the slots have left to prefill, so the most prompt tokens/s is ``max over n <= min(batch,
slots x P) of n / step_seconds(n)`` (the formula of ``tests/loadgen/test_prefill_walk.py``), with the KV cache
sized so it never binds. The measurement is satbench's answer path minus the wire: the simulator's engine
(``simulator.engine.Engine``) in virtual time under ``c`` closed-loop users, each request's record built as the
load generator builds it from the simulator's answer (``queue_s`` = TTFT less the runtime's ``prompt_ms``, so
the prefill is credited from its first step), the window's ``StepFigures`` from
``core.step_figures.compute_step_figures``, its figure from ``core.prefill.prefill_window``, and the walk from
``core.prefill_peak.next_prefill_rung`` / ``peak_prefill`` exactly as ``loadgen.prefill_walk`` calls them
(gain 0.10 a doubling, at most 64 users).

The space (``PrefillSpace``), and why each range:

- the step's cost (``simulator.stepcost``): fixed overhead 0.3-8 ms (a graph launch and sync, a CPU-side
  scheduler), the weights streamed once per micro-batch 1-40 ms (a small model on a fast accelerator to a
  large one on a slow one), prompt tokens at 0.005-0.3 ms each (3,000-200,000 tokens/s of compute), all
  log-uniform, so the draws run from memory-bound (a step's fixed cost dominates: throughput grows with the
  tokens in a step, the walk must climb) to compute-bound (flat from one user); 40 % MoE-like: 8-256 experts,
  1-8 routed a token, the experts together 0.5-4 times the shared weights' cost (their distinct count grows with
  the tokens of a micro-batch, so a MoE step's cost is concave in its tokens);
- 1-16 slots (log-uniform); llama.cpp's ``-b`` 128-8192 and ``-ub`` 128-``-b`` (powers of two, as operators set
  them), so a prompt is chunked over several steps (``-b`` below the prompt), or a step holds several prompts
  (``-b`` above it), or the slots bound a step (``-b`` above every slot's prompt);
- a slot's context 4096-32768 tokens and the prompt length P log-uniform 256-16384, within the context less
  the walk's margin (``core.prefill.probe_prompt_tokens``);
- the client's turnaround between a request's end and its user's next send, 0.1-3 ms uniform per request: with
  none, two users' requests resubmit at the same instant and the engine's start of a step as soon as one
  arrives (the alternate steps ``core.prefill_peak`` is written for) disappears;
- the engine's noise: each step's duration times a lognormal factor of mean 1 and sigma 1-3 % (drawn per
  engine), through the engine's ``step_scale`` hook (the simulator has no step noise of its own).

A rung's window opens once every user has had a request end (or after a window's length of warm-up: the engine
fills a step's prompt tokens in slot order, so a request in a high slot can wait as long as the lower slots
stay busy) and lasts ``max(4 s, 15 x one request's prefill
alone)`` of virtual time (at least 15 prompts at one user; a short window as a live rung's 3-5 s); then the
users stop sending and the engine finishes what it holds, for a window's length at most (the walk's drain: a
request still waiting then is a timeout, as the live walk's starved one).
"""

from __future__ import annotations

import heapq
import math
import random
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

from satbench.core.manifest import StepWindow
from satbench.core.prefill import PrefillWindow, prefill_window, probe_prompt_tokens
from satbench.core.prefill_peak import (
    PeakStatus,
    PrefillRung,
    next_prefill_rung,
    peak_prefill,
    saturating_concurrency,
)
from satbench.core.records import Phase, RequestRecord
from satbench.core.step_figures import compute_step_figures
from satbench.simulator.engine import Engine, Request, RequestSpec
from satbench.simulator.profile import CostModel, Profile, ServerModel
from satbench.simulator.stepcost import step_seconds

__all__ = [
    "GAIN",
    "MAX_CONCURRENCY",
    "PrefillDraw",
    "PrefillSpace",
    "RungRun",
    "attainable_truth",
    "measure_draw",
    "prefill_truth",
    "quantile",
    "run_rung",
    "sample",
]

GAIN = 0.10  # loadgen.prefill_walk.DEFAULT_GAIN, the ladder's plateau gain
MAX_CONCURRENCY = 64  # the walk's default top ([loadgen.prefill] max_concurrency)
DRAIN_MIN_S = 5.0  # loadgen.prefill_walk.STARVED_AFTER_S: the least the walk's drain follows a window's requests
ATTAINABLE_WINDOWS = 5  # the attainable truth's runs, in windows (noise-free: the rate settles within one)
POWERS = (128, 256, 512, 1024, 2048, 4096, 8192)


@dataclass(frozen=True)
class PrefillSpace:
    """The declared space (module docstring)."""

    step_overhead_ms: tuple[float, float] = (0.3, 8.0)
    weights_ms: tuple[float, float] = (1.0, 40.0)
    prefill_ms_per_token: tuple[float, float] = (0.005, 0.3)
    decode_ms_per_token: tuple[float, float] = (0.02, 0.3)
    moe_share: float = 0.4
    experts: tuple[int, ...] = (8, 16, 32, 64, 128, 256)
    experts_per_token: tuple[int, ...] = (1, 2, 4, 8)
    experts_over_weights: tuple[float, float] = (0.5, 4.0)  # all experts' cost over the shared weights'
    slots: tuple[int, int] = (1, 16)
    batches: tuple[int, ...] = POWERS
    slot_context: tuple[int, ...] = (4096, 8192, 16384, 32768)
    prompt_tokens: tuple[int, int] = (256, 16384)
    turnaround_ms: tuple[float, float] = (0.1, 3.0)
    jitter: tuple[float, float] = (0.01, 0.03)
    min_window_s: float = 4.0
    window_prefills: float = 15.0


@dataclass(frozen=True)
class PrefillDraw:
    """One engine of the space and the prompt length its walk sends."""

    draw: str
    index: int
    cost: CostModel
    slots: int
    batch: int
    ubatch: int
    slot_context: int
    prompt_tokens: int
    jitter: float
    turnaround_ms: tuple[float, float]
    seed: int

    @property
    def moe(self) -> bool:
        return self.cost.experts > 0

    @property
    def profile(self) -> Profile:
        server = ServerModel(slots=self.slots, ctx_tokens=self.slots * self.slot_context,
                             slot_ctx_tokens=self.slot_context, batch=self.batch, ubatch=self.ubatch,
                             seed=self.seed)
        return Profile(name=f"draw-{self.draw}", server=server, cost=self.cost)

    @property
    def regime(self) -> str:
        """Chunked (``-b`` below the prompt), several prompts a step, or bound by the slots."""
        if self.batch < self.prompt_tokens:
            return "chunked (-b < P)"
        if self.batch < self.slots * self.prompt_tokens:
            return "unchunked (P <= -b < slots x P)"
        return "slot-bound (-b >= slots x P)"


def _log_uniform(rng: random.Random, lo: float, hi: float) -> float:
    return math.exp(rng.uniform(math.log(lo), math.log(hi)))


def sample(space: PrefillSpace, seed: int, index: int) -> PrefillDraw:
    """Draw ``index`` of ``seed``, from its own generator (reproduced alone, in any order or process)."""
    rng = random.Random(f"prefill-accuracy:{seed}:{index}")
    weights = _log_uniform(rng, *space.weights_ms)
    experts = per_token = 0
    expert_ms = 0.0
    if rng.random() < space.moe_share:
        experts = rng.choice(space.experts)
        per_token = min(experts, rng.choice(space.experts_per_token))
        expert_ms = _log_uniform(rng, *space.experts_over_weights) * weights / experts
    cost = CostModel(step_overhead_ms=_log_uniform(rng, *space.step_overhead_ms), weights_ms=weights,
                     decode_ms_per_token=_log_uniform(rng, *space.decode_ms_per_token),
                     prefill_ms_per_token=_log_uniform(rng, *space.prefill_ms_per_token),
                     experts=experts, experts_per_token=per_token, expert_ms=expert_ms)
    slots = min(space.slots[1], int(_log_uniform(rng, space.slots[0], space.slots[1] + 1)))
    batch = rng.choice(space.batches)
    ubatch = rng.choice([b for b in space.batches if b <= batch])
    context = rng.choice(space.slot_context)
    want = round(_log_uniform(rng, *space.prompt_tokens))
    return PrefillDraw(draw=f"{seed}:{index}", index=index, cost=cost, slots=slots, batch=batch, ubatch=ubatch,
                       slot_context=context, prompt_tokens=probe_prompt_tokens(want, context),
                       jitter=rng.uniform(*space.jitter), turnaround_ms=space.turnaround_ms,
                       seed=rng.randrange(1 << 30))


def prefill_truth(draw: PrefillDraw) -> float:
    """The engine's most prompt tokens/s, from its construction (module docstring)."""
    top = min(draw.batch, draw.slots * draw.prompt_tokens)
    return max(n / step_seconds(draw.cost, 0, n, draw.ubatch) for n in range(1, top + 1))


def attainable_truth(draw: PrefillDraw, space: PrefillSpace) -> tuple[float, int]:
    """The most prompt tokens/s the engine reaches with P-token prompts, and at how many users: the engine's own
    step counts (never satbench's analysis) over long noise-free closed-loop runs (``ATTAINABLE_WINDOWS``
    windows) at every concurrency from 1 to twice the slots (from there the queue refills every freed slot at
    once, so more users change nothing; four times the slots checks it). Below ``prefill_truth`` where the
    slots cannot keep every step at its best size: one slot's prompt of ``-b`` + 9 tokens runs as a full step
    and a 9-token one."""
    best = max((run_rung(draw, c, ATTAINABLE_WINDOWS * window_s(draw, space), salt=2, noisy=False).engine_tok_s, c)
               for c in (*range(1, 2 * draw.slots + 1), 4 * draw.slots))
    return best


def _alone_s(draw: PrefillDraw) -> float:
    """One request's prefill with the engine to itself: its chunks of ``-b``."""
    left, total = draw.prompt_tokens, 0.0
    while left > 0:
        n = min(left, draw.batch)
        total += step_seconds(draw.cost, 0, n, draw.ubatch)
        left -= n
    return total


def window_s(draw: PrefillDraw, space: PrefillSpace) -> float:
    return max(space.min_window_s, space.window_prefills * _alone_s(draw))


@dataclass
class RungRun:
    """One closed-loop rung in virtual time: its records, window, and the prompt tokens the engine really
    evaluated inside the window (its steps', apportioned by time: the rung's own truth)."""

    concurrency: int
    records: list[RequestRecord]
    start: float
    end: float
    engine_tok_s: float


def run_rung(draw: PrefillDraw, concurrency: int, length_s: float, salt: int = 0, noisy: bool = True) -> RungRun:
    """``concurrency`` closed-loop users of P-token prompts and one output token (module docstring); ``noisy``
    False: the steps without their noise."""
    engine = Engine(draw.profile)
    noise = random.Random(f"{draw.seed}:{concurrency}:{salt}:steps")
    turn = random.Random(f"{draw.seed}:{concurrency}:{salt}:turnaround")
    sigma = draw.jitter
    if noisy:
        engine.step_scale = lambda _now: math.exp(noise.gauss(-sigma * sigma / 2, sigma))
    lo, hi = draw.turnaround_ms
    pending: list[tuple[float, int, int]] = []  # (send time, tie-break, user)
    for user in range(concurrency):
        heapq.heappush(pending, (turn.uniform(lo, hi) / 1e3, user, user))
    users: dict[str, int] = {}
    requests: list[Request] = []
    unfinished: dict[str, Request] = {}  # in send order: the first is the oldest still in flight
    ended: set[int] = set()
    start: float | None = None
    end = math.inf
    drain = max(DRAIN_MIN_S, length_s)
    tokens = 0.0
    now, seq = 0.0, concurrency
    while True:
        while pending and pending[0][0] <= now:
            at, _, user = heapq.heappop(pending)
            rid = f"u{user}-r{len(requests)}"
            users[rid] = user
            requests.append(engine.submit(RequestSpec(rid, draw.prompt_tokens, 1, ignore_eos=True,
                                                      user=f"user-{user}"), at))
            unfinished[rid] = requests[-1]
        plan = engine.begin_step(now)
        if plan is None:
            if not pending:
                break
            now = pending[0][0]
            continue
        result = engine.finish_step()
        now = result.end
        if start is None and now >= length_s:  # a user starved in the slot order: the warm-up ends anyway
            start, end = now, now + length_s
        if start is not None and plan.n_prompt and result.end > start and result.start < end:
            span = result.end - result.start
            inside = min(result.end, end) - max(result.start, start)
            tokens += plan.n_prompt * (inside / span if span > 0 else 1.0)
        for e in result.emissions:
            if not e.finished:
                continue
            rid = e.request.spec.request_id
            unfinished.pop(rid, None)
            user = users[rid]
            ended.add(user)
            if start is None and len(ended) == concurrency:
                start, end = now, now + length_s
            seq += 1
            heapq.heappush(pending, (now + turn.uniform(lo, hi) / 1e3, seq, user))
        if now >= end and (now >= end + drain or not unfinished
                           or next(iter(unfinished.values())).arrival >= end):
            break  # the drain: the load kept on until every request sent in the window has ended, or its cap
    assert start is not None, "a rung whose users never all had a request end"
    records = [_record(r, users[r.spec.request_id], concurrency, start, end) for r in requests]
    return RungRun(concurrency, records, start, end, tokens / (end - start))


def _record(r: Request, user: int, concurrency: int, start: float, end: float) -> RequestRecord:
    """The record the load generator writes from the simulator's answer (``loadgen.request_record``)."""
    phase: Phase = "warmup" if r.arrival < start else (
        "window" if r.first_token is not None and r.first_token <= end else "drain")
    if r.first_token is None or r.prompt_start is None:  # in flight when the drain ended: cancelled, dropped
        return RequestRecord(run_id="acc", lane="lane", concurrency=concurrency, user=user,
                             request_id=r.spec.request_id, phase=phase, sent_at=r.arrival, ttft_s=None,
                             e2e_s=None, queue_s=None, itl_s=(), prompt_tokens=None, output_tokens=0,
                             outcome="dropped")
    ttft = r.first_token - r.arrival
    return RequestRecord(run_id="acc", lane="lane", concurrency=concurrency, user=user,
                         request_id=r.spec.request_id, phase=phase, sent_at=r.arrival, ttft_s=ttft, e2e_s=ttft,
                         queue_s=max(0.0, ttft - r.prompt_ms / 1e3), itl_s=(), prompt_tokens=r.spec.prompt_tokens,
                         output_tokens=1, outcome="ok", cached_prompt_tokens=0)


def measure_rung(draw: PrefillDraw, concurrency: int, length_s: float) -> tuple[PrefillWindow, RungRun]:
    """The rung's ``PrefillWindow`` as the walk computes it (``loadgen.prefill_walk.PrefillStepper``)."""
    run = run_rung(draw, concurrency, length_s)
    window = StepWindow("lane", concurrency, run.start, run.end, warmup_start=0.0, slots=draw.slots)
    figures = compute_step_figures(run.records, window)
    return prefill_window(run.records, figures, run.start, run.end), run


@dataclass
class DrawResult:
    """One draw: its truths (``capacity``, the construction's bound; ``truth``, what the engine attains with
    P-token prompts, at ``truth_c`` users), the walk's answer and rungs, the hand-run recipe's figure."""

    draw: PrefillDraw
    capacity: float
    truth: float
    truth_c: int
    status: PeakStatus
    peak: float | None
    interval: tuple[float, float] | None
    concurrency: int | None
    rungs: list[dict[str, Any]] = field(default_factory=list)
    recipe: float | None = None
    window_s: float = 0.0
    coverage: dict[str, Any] | None = None

    @property
    def error(self) -> float | None:
        return None if self.peak is None else self.peak / self.truth - 1

    @property
    def capacity_error(self) -> float | None:
        return None if self.peak is None else self.peak / self.capacity - 1

    @property
    def recipe_error(self) -> float | None:
        return None if self.recipe is None else self.recipe / self.truth - 1

    def summary(self) -> dict[str, Any]:
        d = asdict(self.draw)
        d.pop("turnaround_ms")
        return {"draw": self.draw.draw, "regime": self.draw.regime, "moe": self.draw.moe, **d,
                "capacity": self.capacity, "truth": self.truth, "truth_c": self.truth_c, "status": self.status,
                "peak": self.peak, "interval": self.interval, "concurrency": self.concurrency, "error": self.error,
                "capacity_error": self.capacity_error, "recipe": self.recipe, "recipe_error": self.recipe_error,
                "window_s": self.window_s, "rungs": self.rungs, "coverage": self.coverage}


def measure_draw(draw: PrefillDraw, space: PrefillSpace, coverage_factor: float = 0.0) -> DrawResult:
    """The walk on one engine and its truths; with ``coverage_factor``, the peak rung run again for that many
    windows to hold its interval against (``coverage``: the rung's long-run prompt tokens/s)."""
    length = window_s(draw, space)
    saturating = saturating_concurrency(draw.slots, draw.batch, draw.prompt_tokens)  # as /props says them
    rungs: list[PrefillRung] = []
    seen: list[dict[str, Any]] = []
    recipe = None
    while (c := next_prefill_rung(rungs, min_gain_per_doubling=GAIN, max_concurrency=MAX_CONCURRENCY,
                                  saturating=saturating)) is not None:
        window, run = measure_rung(draw, c, length)
        rungs.append(PrefillRung(window.concurrency, window.prompt_tok_s, window.interval,
                                 window.requests if window.valid else 0))
        seen.append({"c": c, "tok_s": window.prompt_tok_s, "interval": window.interval,
                     "requests": window.requests, "valid": window.valid, "engine_tok_s": run.engine_tok_s,
                     "median_ttft_s": window.median_ttft_s})
        if c == 1 and window.valid and window.median_ttft_s:
            recipe = draw.prompt_tokens / window.median_ttft_s  # the hand-run recipe: P / median TTFT at c=1
        if not window.valid:
            break
    peak = peak_prefill(rungs, min_gain_per_doubling=GAIN, saturating=saturating)
    truth, truth_c = attainable_truth(draw, space)
    result = DrawResult(draw, prefill_truth(draw), truth, truth_c, peak.status, peak.peak_tok_s, peak.interval,
                        peak.concurrency, seen, recipe, length)
    if coverage_factor > 0 and peak.concurrency is not None and peak.interval is not None:
        long = run_rung(draw, peak.concurrency, coverage_factor * length, salt=1)
        low, high = peak.interval
        result.coverage = {"c": peak.concurrency, "long_tok_s": long.engine_tok_s, "interval": peak.interval,
                           "holds": low <= long.engine_tok_s <= high}
    return result


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if len(ordered) == 1 or q <= 0:
        return ordered[0]
    if q >= 1:
        return ordered[-1]
    return statistics.quantiles(ordered, n=1000, method="inclusive")[max(0, min(998, round(q * 1000) - 1))]
