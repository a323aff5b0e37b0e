"""Per-step figures: the numbers one rung of the ladder produced, as the recommendations document lists them.

``StepFigures`` is the shape shared by the load generator's ``steps.json``, the recommender's two sources
(Prometheus and records) and the report. Its JSON form is the ``steps[]`` entry of the recommendations
document (schema ``satbench.recommendations/v2``). Fields a source cannot know are ``None``: the records
source knows nothing of server-side occupancy or memory, for instance.

The functions that compute figures live with their sources: ``core.step_figures`` (exact, from
records) and ``recommender.prometheus_source`` (from PromQL over the step window).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = [
    "CLIENT_FIGURES",
    "TAIL_SIZE",
    "MemoryFigures",
    "Quantiles",
    "StepFigures",
    "Tail",
    "client_figures",
    "client_values",
    "disagreements",
]


@dataclass(frozen=True, slots=True)
class Quantiles:
    """p50, p95, p99 and the mean of one latency figure (``None`` where unknown)."""

    p50: float | None = None
    p95: float | None = None
    p99: float | None = None
    mean: float | None = None

    def to_dict(self) -> dict[str, float | None]:
        return {"p50": self.p50, "p95": self.p95, "p99": self.p99, "mean": self.mean}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Quantiles:
        data = data or {}
        return cls(p50=data.get("p50"), p95=data.get("p95"), p99=data.get("p99"), mean=data.get("mean"))


TAIL_SIZE = 16


@dataclass(frozen=True, slots=True)
class Tail:
    """The upper tail of one per-request figure: how many requests it covers (``n``) and its largest values,
    at most ``TAIL_SIZE``, in descending order. Enough to count how many requests exceed any limit above the
    tail's smallest value, so a quantile objective is judged by a test of that count
    (``core.statistics.exceedance_p_value``) at whatever limit and confidence the policy sets, from figures
    the load generator published without knowing the policy."""

    n: int = 0
    top: tuple[float, ...] = ()

    @classmethod
    def of(cls, values: list[float], size: int | None = TAIL_SIZE) -> Tail:
        """The tail of ``values``: its ``size`` largest (every value where ``size`` is None: the exact count
        above any limit, as ``satbench compare`` reads a run folder's records)."""
        ordered = sorted(values, reverse=True)
        return cls(len(values), tuple(ordered if size is None else ordered[:size]))

    def above(self, limit: float) -> tuple[int, bool]:
        """How many of the ``n`` exceed ``limit``, and whether that count is exact (False: at least that many,
        every kept value exceeds and more were not kept)."""
        k = sum(1 for v in self.top if v > limit)
        return k, not (k == len(self.top) and self.n > len(self.top))

    def to_dict(self) -> dict[str, Any]:
        return {"n": self.n, "top": list(self.top)}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Tail:
        data = data or {}
        return cls(int(data.get("n") or 0), tuple(float(v) for v in data.get("top") or ()))


@dataclass(frozen=True, slots=True)
class MemoryFigures:
    """Memory over the window. ``gpu_max`` is the fullest GPU's peak and ``gpu_total`` its size (what the
    headroom verdict reads: a GPU that fills is where a lane fails); ``gpu_sum_max`` and ``gpu_sum_total``
    are the lane's GPUs summed (a lane split over several), ``gpu_count`` how many, ``gpu_names`` their
    names, and ``gpu_simulated`` true where the figures are the simulator's model, not a reading.

    ``gpu_headroom_min_ratio`` is each GPU's free share at its own peak against its own size, the least over
    the lane's GPUs (a lane fails where one of its GPUs fills); ``gpu_other_max`` the most memory the lane's
    GPUs held for other processes than the runtime (device-wide use less the runtime's own, where NVML tells
    both: another tenant); ``kv_usage_max_ratio`` the fullest the runtime's KV cache was (tokens held by
    processing slots over its capacity, ``runtime_kv_cache_usage_ratio``). llama.cpp allocates its weights
    and KV cache when it starts, so GPU memory is flat across rungs; what fills with concurrency is the KV
    cache (see ``answer.judges.memory_check``)."""

    gpu_max: float | None = None
    gpu_total: float | None = None
    host_rss_max: float | None = None
    gpu_sum_max: float | None = None
    gpu_sum_total: float | None = None
    gpu_count: int | None = None
    gpu_names: str | None = None
    gpu_simulated: bool | None = None
    gpu_headroom_min_ratio: float | None = None
    gpu_other_max: float | None = None
    kv_usage_max_ratio: float | None = None


_MEMORY_FIELDS = ("gpu_max", "gpu_total", "host_rss_max", "gpu_sum_max", "gpu_sum_total", "gpu_count", "gpu_names",
                  "gpu_simulated", "gpu_headroom_min_ratio", "gpu_other_max", "kv_usage_max_ratio")
QUANTILE_FIGURES = ("latency_s", "ttft_s", "itl_s", "tpot_s", "queue_s", "pause_s", "pause_excess_s",
                    "ttft_visible_s", "schedule_lag_s", "ttft_intended_s", "latency_intended_s")
TAIL_FIGURES = ("latency_tail", "ttft_tail", "pause_excess_tail")
_OPTIONAL_NUMBERS = (
    "pause_requests", "prefill_events", "interference_share", "stall_per_prompt_s", "stall_ms_per_prompt_token",
    "queued_requests", "admission_wait_max_s", "admission_wait_bound_s", "user_wait_p_value", "user_wait_ratio",
    "user_itl_p_value", "user_itl_ratio", "user_wait_excess_s", "user_itl_excess_s", "input_throughput_tok_s",
    "cache_hit_share", "cached_prompt_tokens", "cache_reported_prompt_tokens", "spec_acceptance_rate",
    "draft_tokens", "draft_accepted_tokens", "throughput_se_tok_s", "throughput_dof", "decode_step_s",
    "decode_step_gaps", "censored_requests", "admission_overruns", "admission_overrun_max_ratio", "users_unserved",
    "users_starved", "reasoning_requests", "tokens_per_event", "event_tokens_estimated", "turn_mean",
    "stall_prompt_elasticity", "rate_rps", "offered_rps",
    "backlog_growth_rps", "backlog_growth_se", "backlog_growth_dof", "judged_requests", "attained_requests",
    "goodput_rps", "goodput_tok_s", "attainment", "attainment_se", "attainment_dof", "waits_settled",
)


@dataclass(frozen=True, slots=True)
class StepFigures:
    """Figures of one step window. Throughput counts output tokens *arriving* inside the window.

    The starvation and fairness figures (``pause_s`` and after) are defined in ``core.step_figures``; the
    prompt-cache and speculative-decoding ones (``cache_hit_share`` and after) in ``core.runtime_counts``.
    """

    lane: str
    concurrency: int
    window_s: float
    requests: int
    errors: int
    throughput_tok_s: float
    requests_per_s: float
    latency_s: Quantiles = field(default_factory=Quantiles)
    ttft_s: Quantiles = field(default_factory=Quantiles)
    itl_s: Quantiles = field(default_factory=Quantiles)
    tpot_s: Quantiles = field(default_factory=Quantiles)
    queue_s: Quantiles = field(default_factory=Quantiles)
    occupancy_ratio: float | None = None
    queue_depth_avg: float | None = None
    memory_bytes: MemoryFigures = field(default_factory=MemoryFigures)
    jain: float | None = None
    max_min_share: float | None = None
    decode_stall_max_ratio: float | None = None
    decode_stall_max_s: float | None = None
    prefill_wait_max_s: float | None = None
    pause_s: Quantiles = field(default_factory=Quantiles)
    pause_requests: int | None = None
    prefill_events: int | None = None
    interference_share: float | None = None
    stall_per_prompt_s: float | None = None
    stall_ms_per_prompt_token: float | None = None
    stall_prompt_elasticity: float | None = None
    decode_step_s: float | None = None
    decode_step_gaps: int | None = None
    pause_excess_s: Quantiles = field(default_factory=Quantiles)
    pause_excess_tail: Tail = field(default_factory=Tail)
    ttft_tail: Tail = field(default_factory=Tail)
    latency_tail: Tail = field(default_factory=Tail)
    censored_requests: int | None = None
    queued_requests: int | None = None
    admission_wait_max_s: float | None = None
    admission_wait_bound_s: float | None = None
    admission_overruns: int | None = None
    admission_overrun_max_ratio: float | None = None
    users_unserved: int | None = None
    users_starved: int | None = None
    user_wait_p_value: float | None = None
    user_wait_ratio: float | None = None
    user_itl_p_value: float | None = None
    user_itl_ratio: float | None = None
    user_wait_excess_s: float | None = None
    user_itl_excess_s: float | None = None
    input_throughput_tok_s: float | None = None
    cache_hit_share: float | None = None
    cached_prompt_tokens: int | None = None
    cache_reported_prompt_tokens: int | None = None
    spec_acceptance_rate: float | None = None
    draft_tokens: int | None = None
    draft_accepted_tokens: int | None = None
    ttft_visible_s: Quantiles = field(default_factory=Quantiles)
    reasoning_requests: int | None = None
    tokens_per_event: float | None = None
    event_tokens_estimated: int | None = None
    turn_mean: float | None = None
    rate_rps: float | None = None
    offered_rps: float | None = None
    schedule_lag_s: Quantiles = field(default_factory=Quantiles)
    ttft_intended_s: Quantiles = field(default_factory=Quantiles)
    latency_intended_s: Quantiles = field(default_factory=Quantiles)
    backlog_growth_rps: float | None = None
    backlog_growth_se: float | None = None
    backlog_growth_dof: float | None = None
    judged_requests: int | None = None
    attained_requests: int | None = None
    goodput_rps: float | None = None
    goodput_tok_s: float | None = None
    attainment: float | None = None
    attainment_se: float | None = None
    attainment_dof: float | None = None
    waits_settled: int | None = None  # an open rung: 1 where its waits settled (core.attainment.warmup_cut), 0 not
    drift_reference: int | None = None  # 1: a rung re-measured at its lane's end, for the drift check (core.drift)
    objective_misses: dict[str, int] = field(default_factory=dict)
    errors_by_outcome: dict[str, int] = field(default_factory=dict)
    throughput_ci_tok_s: tuple[float, float] | None = None
    throughput_se_tok_s: float | None = None
    throughput_dof: float | None = None
    valid: bool = True
    reason: str | None = None

    @property
    def total_throughput_tok_s(self) -> float | None:
        """Prompt plus generated tokens per second (None where the prompt counts are unknown)."""
        if self.input_throughput_tok_s is None:
            return None
        return self.input_throughput_tok_s + self.throughput_tok_s

    @property
    def error_ratio(self) -> float:
        total = self.requests + self.errors
        return self.errors / total if total else 0.0

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for name in QUANTILE_FIGURES:
            data[name] = getattr(self, name).to_dict()
        for name in TAIL_FIGURES:
            data[name] = getattr(self, name).to_dict()
        data["throughput_ci_tok_s"] = (
            None if self.throughput_ci_tok_s is None else list(self.throughput_ci_tok_s)
        )
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StepFigures:
        mem = data.get("memory_bytes") or {}
        ci = data.get("throughput_ci_tok_s")
        return cls(
            lane=str(data.get("lane", "")),
            concurrency=int(data["concurrency"]),
            window_s=float(data["window_s"]),
            requests=int(data["requests"]),
            errors=int(data.get("errors", 0)),
            throughput_tok_s=float(data["throughput_tok_s"]),
            requests_per_s=float(data.get("requests_per_s", 0.0)),
            latency_s=Quantiles.from_dict(data.get("latency_s")),
            ttft_s=Quantiles.from_dict(data.get("ttft_s")),
            itl_s=Quantiles.from_dict(data.get("itl_s")),
            tpot_s=Quantiles.from_dict(data.get("tpot_s")),
            queue_s=Quantiles.from_dict(data.get("queue_s")),
            occupancy_ratio=data.get("occupancy_ratio"),
            queue_depth_avg=data.get("queue_depth_avg"),
            memory_bytes=MemoryFigures(**{k: mem.get(k) for k in _MEMORY_FIELDS}),
            jain=data.get("jain"),
            max_min_share=data.get("max_min_share"),
            decode_stall_max_ratio=data.get("decode_stall_max_ratio"),
            decode_stall_max_s=data.get("decode_stall_max_s"),
            prefill_wait_max_s=data.get("prefill_wait_max_s"),
            pause_s=Quantiles.from_dict(data.get("pause_s")),
            pause_excess_s=Quantiles.from_dict(data.get("pause_excess_s")),
            ttft_visible_s=Quantiles.from_dict(data.get("ttft_visible_s")),
            schedule_lag_s=Quantiles.from_dict(data.get("schedule_lag_s")),
            ttft_intended_s=Quantiles.from_dict(data.get("ttft_intended_s")),
            latency_intended_s=Quantiles.from_dict(data.get("latency_intended_s")),
            objective_misses=dict(data.get("objective_misses") or {}),
            **{name: Tail.from_dict(data.get(name)) for name in TAIL_FIGURES},  # type: ignore[arg-type]
            **{name: data.get(name) for name in _OPTIONAL_NUMBERS},  # type: ignore[arg-type]
            errors_by_outcome=dict(data.get("errors_by_outcome") or {}),
            throughput_ci_tok_s=None if ci is None else (float(ci[0]), float(ci[1])),
            drift_reference=data.get("drift_reference"),
            valid=bool(data.get("valid", True)),
            reason=data.get("reason"),
        )


# The figures the load generator knows exactly from its records (``core.step_figures``), published per step
# as ``loadgen_step_figure{figure=...}`` so that the Prometheus path reads the same numbers the records give
# (the throughput interval as ``throughput_ci_tok_s.lo`` and ``.hi``).
CLIENT_FIGURES = (
    "window_s", "requests", "errors", "throughput_tok_s", "requests_per_s", "latency_s", "ttft_s", "itl_s",
    "tpot_s", "queue_s", "jain", "max_min_share", "decode_stall_max_ratio", "decode_stall_max_s",
    "prefill_wait_max_s", "pause_s", "pause_excess_s", "ttft_visible_s", *TAIL_FIGURES, *_OPTIONAL_NUMBERS,
    "errors_by_outcome", "throughput_ci_tok_s", "schedule_lag_s", "ttft_intended_s", "latency_intended_s",
    "objective_misses",
)
_COUNTS = ("requests", "errors", "errors_by_outcome", "pause_requests", "prefill_events", "queued_requests",
           "cached_prompt_tokens", "cache_reported_prompt_tokens", "draft_tokens", "draft_accepted_tokens",
           "decode_step_gaps", "censored_requests", "admission_overruns", "users_unserved", "users_starved",
           "reasoning_requests", "event_tokens_estimated", "judged_requests", "attained_requests", "objective_misses",
           "waits_settled")
_INTERVAL = ("lo", "hi")


_UNKNOWN = StepFigures(lane="", concurrency=1, window_s=0.0, requests=0, errors=0, throughput_tok_s=0.0,
                       requests_per_s=0.0).to_dict()


def client_values(step: StepFigures) -> dict[str, float]:
    """The client figures of ``step`` as flat ``name -> value`` (``ttft_s.p95``, ``errors_by_outcome.http``);
    unknown (None) figures are left out."""
    data = step.to_dict()
    out: dict[str, float] = {}
    for name in CLIENT_FIGURES:
        value = data.get(name)
        if name in TAIL_FIGURES:  # a tail: its count and each kept value by rank
            tail = getattr(step, name)
            if tail.n:
                out[f"{name}.n"] = float(tail.n)
                out.update({f"{name}.{i}": float(v) for i, v in enumerate(tail.top)})
        elif isinstance(value, list | tuple):  # an interval
            out.update({f"{name}.{k}": float(v) for k, v in zip(_INTERVAL, value, strict=True)})
        elif isinstance(value, dict):
            out.update({f"{name}.{k}": float(v) for k, v in value.items() if isinstance(v, int | float)})
        elif isinstance(value, int | float) and not isinstance(value, bool):
            out[name] = float(value)
    return out


def client_figures(values: Mapping[str, float]) -> dict[str, Any]:
    """The inverse of ``client_values``: every client field of ``StepFigures.to_dict()`` (counts as ints
    again), those ``values`` lacks as unknown (None, empty quantiles, no errors by outcome)."""
    out: dict[str, Any] = {name: _UNKNOWN[name] for name in CLIENT_FIGURES}
    for key, value in values.items():
        name, _, sub = key.partition(".")
        if name not in CLIENT_FIGURES:
            continue
        v: float | int = round(value) if name in _COUNTS else float(value)
        if name in TAIL_FIGURES:
            count: int = out[name]["n"]
            top: list[float | None] = list(out[name]["top"])
            if sub == "n":
                count = round(value)
            elif sub.isdigit():
                rank = int(sub)
                top += [None] * (rank + 1 - len(top))
                top[rank] = float(value)
            out[name] = {"n": count, "top": top}
        elif name == "throughput_ci_tok_s":
            if sub in _INTERVAL:
                bounds = dict(zip(_INTERVAL, out[name] or (None, None), strict=True))
                bounds[sub] = v
                out[name] = [bounds["lo"], bounds["hi"]]
        elif sub:
            out[name] = {**(out[name] or {}), sub: v}
        else:
            out[name] = v
    if out["throughput_ci_tok_s"] is not None and None in out["throughput_ci_tok_s"]:
        out["throughput_ci_tok_s"] = None  # half an interval is none
    for name in TAIL_FIGURES:  # a tail with a gap in its ranks keeps the ranks before the gap
        top = out[name]["top"]
        out[name] = {"n": out[name]["n"], "top": top[:top.index(None)] if None in top else top}
    return out


def _agree(a: float, b: float) -> bool:
    bound = 1e-3 if abs(b) < 0.020 else 0.05 * abs(b)
    return abs(a - b) <= bound


def disagreements(other: StepFigures, exact: StepFigures) -> dict[str, tuple[float | None, float | None]]:
    """The client figures where ``other`` (say, the Prometheus path) and ``exact`` (the records) differ by
    more than DESIGN.md's agreement bound: 5 %, or 1 ms for figures under 20 ms; known on one side only
    counts as a difference. Empty when they agree."""
    a, b = client_values(other), client_values(exact)
    out: dict[str, tuple[float | None, float | None]] = {}
    for key in sorted(set(a) | set(b)):
        x, y = a.get(key), b.get(key)
        if x is None or y is None or not _agree(x, y):
            out[key] = (x, y)
    return out
