"""Per-step figures: the numbers one rung of the ladder produced, as the recommendations document lists them.

``StepFigures`` is the shape shared by the load generator's ``steps.json``, the recommender's two sources
(Prometheus and records) and the report. Its JSON form is the ``steps[]`` entry of the recommendations
document (schema ``satbench.recommendations/v2``). Fields a source cannot know are ``None``: the records
source knows nothing of server-side occupancy or memory, for instance.

The functions that compute figures live with their sources: ``core.step_figures`` (exact, from
records) and ``recommender.prometheus_source`` (from PromQL over the step window).

Each figure is declared once, on its field (``field(..., metadata=figure(kind, unit, published=,
column=))``, a ``Figure``): the lists that used to spell its name again are derived from the declarations
(``FIGURES``): the quantiles and tails ``to_dict`` and ``from_dict`` convert, the published client figures
in their series order (``CLIENT_FIGURES``), the counts read back as integers, and ``steps.csv``'s figure
columns (``report.exports``). A new figure is one field with its declaration.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

from satbench.core.energy import EnergyFigures

__all__ = [
    "CLIENT_FIGURES",
    "FIGURES",
    "QUANTILE_FIGURES",
    "TAIL_FIGURES",
    "TAIL_SIZE",
    "Figure",
    "FigureKind",
    "FigureUnit",
    "MemoryFigures",
    "Quantiles",
    "StepFigures",
    "Tail",
    "client_figures",
    "client_values",
    "disagreements",
    "figure",
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

FigureKind = Literal["quantile", "tail", "count", "rate", "value", "interval"]
FigureUnit = Literal["s", "ms/token", "tok/s", "req/s", "count", "tokens", "ratio", "share", "index", "p", "1"]


@dataclass(frozen=True, slots=True)
class Figure:
    """How one ``StepFigures`` field is declared, once, on the field itself (``figure``): what it is and where
    it goes. ``kind``: a ``quantile`` (``Quantiles`` of a per-request figure), a ``tail`` (``Tail``), a
    ``count`` (an integer, or integers by key), a ``rate`` (per second), a single ``value`` or an
    ``interval``. ``unit``: ``s`` seconds, ``tok/s``, ``req/s``, ``count`` (requests, events, users),
    ``tokens``, ``ratio``, ``share`` (a fraction), ``index`` (Jain's), ``p`` (a p-value), ``1`` (any other
    pure number), ``ms/token``. ``published``: its rank among the figures the load generator publishes
    (``CLIENT_FIGURES``, the order of the ``loadgen_step_figure`` series); None: not published, a server-side
    or derived figure. ``column``: its rank among ``steps.csv``'s figure columns (None: not there), named
    ``csv`` where given, else after the field with seconds as ms (``report.exports`` says how). A new figure
    takes the next rank of each list it joins, so every published order stays as it was."""

    kind: FigureKind
    unit: FigureUnit
    published: int | None = None
    column: int | None = None
    csv: str | None = None


_UNIT_WORDS: dict[FigureUnit, str] = {
    "s": "seconds", "ms/token": "milliseconds per prompt token", "tok/s": "tokens per second",
    "req/s": "requests per second", "count": "a count", "tokens": "tokens", "ratio": "a ratio", "share": "a fraction",
    "index": "Jain's index", "p": "a p-value", "1": "a pure number",
}


def figure(kind: FigureKind, unit: FigureUnit, *, published: int | None = None, column: int | None = None,
           csv: str | None = None) -> dict[str, Figure | str]:
    """The metadata of a ``StepFigures`` field that declares it: ``field(default=None, metadata=figure(...))``.
    Its ``description`` is the unit and kind in words, which pydantic takes into the document's JSON Schema
    (``StepModel`` extends ``StepFigures``; pydantic reads only the ``Field`` arguments among a dataclass
    field's metadata, so ``figure`` itself stays out of it)."""
    described = f"unit: {unit} ({_UNIT_WORDS[unit]}); kind: {kind}"
    return {"figure": Figure(kind, unit, published, column, csv), "description": described}


@dataclass(frozen=True, slots=True)
class StepFigures:
    """Figures of one step window. Throughput counts output tokens *arriving* inside the window.

    The starvation and fairness figures (``pause_s`` and after) are defined in ``core.step_figures``; the
    prompt-cache and speculative-decoding ones (``cache_hit_share`` and after) in ``core.runtime_counts``.
    """

    lane: str
    concurrency: int
    window_s: float = field(metadata=figure("value", "s", published=0))
    requests: int = field(metadata=figure("count", "count", published=1))
    errors: int = field(metadata=figure("count", "count", published=2))
    throughput_tok_s: float = field(metadata=figure("rate", "tok/s", published=3))
    requests_per_s: float = field(metadata=figure("rate", "req/s", published=4))
    latency_s: Quantiles = field(
        default_factory=Quantiles, metadata=figure("quantile", "s", published=5, column=3, csv="e2e"))
    ttft_s: Quantiles = field(default_factory=Quantiles, metadata=figure("quantile", "s", published=6, column=0))
    itl_s: Quantiles = field(default_factory=Quantiles, metadata=figure("quantile", "s", published=7, column=1))
    tpot_s: Quantiles = field(default_factory=Quantiles, metadata=figure("quantile", "s", published=8, column=2))
    queue_s: Quantiles = field(default_factory=Quantiles, metadata=figure("quantile", "s", published=9, column=4))
    occupancy_ratio: float | None = field(default=None, metadata=figure("value", "ratio", column=6))
    queue_depth_avg: float | None = field(default=None, metadata=figure("value", "count", column=7))
    memory_bytes: MemoryFigures = field(default_factory=MemoryFigures)
    energy: EnergyFigures = field(default_factory=EnergyFigures)  # core.energy: the window's energy, per token
    jain: float | None = field(default=None, metadata=figure("value", "index", published=10, column=8))
    max_min_share: float | None = field(default=None, metadata=figure("value", "share", published=11, column=9))
    decode_stall_max_ratio: float | None = field(
        default=None, metadata=figure("value", "ratio", published=12, column=11))
    decode_stall_max_s: float | None = field(default=None, metadata=figure("value", "s", published=13, column=10))
    prefill_wait_max_s: float | None = field(default=None, metadata=figure("value", "s", published=14, column=12))
    pause_s: Quantiles = field(default_factory=Quantiles, metadata=figure("quantile", "s", published=15, column=5))
    pause_requests: int | None = field(default=None, metadata=figure("count", "count", published=21, column=13))
    prefill_events: int | None = field(default=None, metadata=figure("count", "count", published=22, column=14))
    interference_share: float | None = field(default=None, metadata=figure("value", "share", published=23, column=15))
    stall_per_prompt_s: float | None = field(default=None, metadata=figure("value", "s", published=24, column=16))
    stall_ms_per_prompt_token: float | None = field(
        default=None, metadata=figure("value", "ms/token", published=25, column=17))
    stall_prompt_elasticity: float | None = field(default=None, metadata=figure("value", "1", published=55))
    decode_step_s: float | None = field(default=None, metadata=figure("value", "s", published=44))
    decode_step_gaps: int | None = field(default=None, metadata=figure("count", "count", published=45))
    pause_excess_s: Quantiles = field(default_factory=Quantiles, metadata=figure("quantile", "s", published=16))
    pause_excess_tail: Tail = field(default_factory=Tail, metadata=figure("tail", "s", published=20))
    pause_step_tail: Tail = field(default_factory=Tail, metadata=figure("tail", "s", published=79))
    pause_steps_per_request: float | None = field(default=None, metadata=figure("value", "1", published=80))
    ttft_tail: Tail = field(default_factory=Tail, metadata=figure("tail", "s", published=19))
    latency_tail: Tail = field(default_factory=Tail, metadata=figure("tail", "s", published=18))
    censored_requests: int | None = field(default=None, metadata=figure("count", "count", published=46))
    queued_requests: int | None = field(default=None, metadata=figure("count", "count", published=26, column=18))
    admission_wait_max_s: float | None = field(default=None, metadata=figure("value", "s", published=27, column=19))
    admission_wait_bound_s: float | None = field(default=None, metadata=figure("value", "s", published=28, column=20))
    admission_overruns: int | None = field(default=None, metadata=figure("count", "count", published=47))
    admission_overrun_max_ratio: float | None = field(default=None, metadata=figure("value", "ratio", published=48))
    users_unserved: int | None = field(default=None, metadata=figure("count", "count", published=49))
    users_starved: int | None = field(default=None, metadata=figure("count", "count", published=50))
    user_wait_p_value: float | None = field(default=None, metadata=figure("value", "p", published=29, column=21))
    user_wait_ratio: float | None = field(default=None, metadata=figure("value", "ratio", published=30, column=22))
    user_itl_p_value: float | None = field(default=None, metadata=figure("value", "p", published=31, column=24))
    user_itl_ratio: float | None = field(default=None, metadata=figure("value", "ratio", published=32, column=25))
    user_wait_excess_s: float | None = field(default=None, metadata=figure("value", "s", published=33, column=23))
    user_itl_excess_s: float | None = field(default=None, metadata=figure("value", "s", published=34, column=26))
    input_throughput_tok_s: float | None = field(default=None, metadata=figure("rate", "tok/s", published=35))
    cache_hit_share: float | None = field(default=None, metadata=figure("value", "share", published=36, column=27))
    cached_prompt_tokens: int | None = field(default=None, metadata=figure("count", "tokens", published=37, column=28))
    cache_reported_prompt_tokens: int | None = field(
        default=None, metadata=figure("count", "tokens", published=38, column=29))
    spec_acceptance_rate: float | None = field(default=None, metadata=figure("value", "share", published=39, column=30))
    draft_tokens: int | None = field(default=None, metadata=figure("count", "tokens", published=40, column=31))
    draft_accepted_tokens: int | None = field(default=None, metadata=figure("count", "tokens", published=41, column=32))
    ttft_visible_s: Quantiles = field(default_factory=Quantiles, metadata=figure("quantile", "s", published=17))
    reasoning_requests: int | None = field(default=None, metadata=figure("count", "count", published=51))
    tokens_per_event: float | None = field(default=None, metadata=figure("value", "tokens", published=52))
    event_tokens_estimated: int | None = field(default=None, metadata=figure("count", "count", published=53))
    turn_mean: float | None = field(default=None, metadata=figure("value", "1", published=54))
    rate_rps: float | None = field(default=None, metadata=figure("rate", "req/s", published=56))
    offered_rps: float | None = field(default=None, metadata=figure("rate", "req/s", published=57))
    schedule_lag_s: Quantiles = field(default_factory=Quantiles, metadata=figure("quantile", "s", published=71))
    ttft_intended_s: Quantiles = field(default_factory=Quantiles, metadata=figure("quantile", "s", published=72))
    latency_intended_s: Quantiles = field(default_factory=Quantiles, metadata=figure("quantile", "s", published=73))
    backlog_growth_rps: float | None = field(default=None, metadata=figure("rate", "req/s", published=58))
    backlog_growth_se: float | None = field(default=None, metadata=figure("rate", "req/s", published=59))
    backlog_growth_dof: float | None = field(default=None, metadata=figure("value", "1", published=60))
    judged_requests: int | None = field(default=None, metadata=figure("count", "count", published=61))
    attained_requests: int | None = field(default=None, metadata=figure("count", "count", published=62))
    goodput_rps: float | None = field(default=None, metadata=figure("rate", "req/s", published=63))
    goodput_tok_s: float | None = field(default=None, metadata=figure("rate", "tok/s", published=64))
    attainment: float | None = field(default=None, metadata=figure("value", "share", published=65))
    attainment_se: float | None = field(default=None, metadata=figure("value", "share", published=66))
    attainment_dof: float | None = field(default=None, metadata=figure("value", "1", published=67))
    # an open rung: 1 where its waits settled (core.attainment.warmup_cut), 0 not
    waits_settled: int | None = field(default=None, metadata=figure("count", "count", published=68))
    # 1: an open-loop rung ended by a look before its window's limit (core.attainment.step_confidence)
    decided_early: int | None = field(default=None, metadata=figure("count", "count", published=75))
    # 1: a rung re-measured at its lane's end, for the drift check (core.drift)
    drift_reference: int | None = field(default=None, metadata=figure("value", "1"))
    objective_misses: dict[str, int] = field(default_factory=dict, metadata=figure("count", "count", published=74))
    errors_by_outcome: dict[str, int] = field(default_factory=dict, metadata=figure("count", "count", published=69))
    throughput_ci_tok_s: tuple[float, float] | None = field(
        default=None, metadata=figure("interval", "tok/s", published=70))
    throughput_se_tok_s: float | None = field(default=None, metadata=figure("rate", "tok/s", published=42))
    throughput_dof: float | None = field(default=None, metadata=figure("value", "1", published=43))
    # the ITL p95's 95 % interval over time-clustered gaps and its dof (core.itl_interval)
    itl_p95_low_s: float | None = field(default=None, metadata=figure("value", "s", published=76))
    itl_p95_high_s: float | None = field(default=None, metadata=figure("value", "s", published=77))
    itl_p95_dof: float | None = field(default=None, metadata=figure("value", "1", published=78))
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
        data["energy"] = self.energy.to_dict()
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
            memory_bytes=MemoryFigures(**{k: mem.get(k) for k in _MEMORY_FIELDS}),
            energy=EnergyFigures.from_dict(data.get("energy")),
            objective_misses=dict(data.get("objective_misses") or {}),
            **{name: Quantiles.from_dict(data.get(name)) for name in QUANTILE_FIGURES},  # type: ignore[arg-type]
            **{name: Tail.from_dict(data.get(name)) for name in TAIL_FIGURES},  # type: ignore[arg-type]
            **{name: data.get(name) for name in _AS_READ},  # type: ignore[arg-type]
            errors_by_outcome=dict(data.get("errors_by_outcome") or {}),
            throughput_ci_tok_s=None if ci is None else (float(ci[0]), float(ci[1])),
            valid=bool(data.get("valid", True)),
            reason=data.get("reason"),
        )


FIGURES: dict[str, Figure] = {f.name: f.metadata["figure"] for f in fields(StepFigures) if "figure" in f.metadata}
"""Every declared figure of ``StepFigures``, in field order (that of ``steps.json``'s keys)."""


def _ranked(names: list[str], rank: Mapping[str, int | None]) -> tuple[str, ...]:
    """``names`` with a rank in that rank's order (ties would be a declaration's error, see the tests)."""
    return tuple(sorted((n for n in names if rank[n] is not None), key=lambda n: rank[n] or 0))


# The figures the load generator knows exactly from its records (``core.step_figures``), published per step
# as ``loadgen_step_figure{figure=...}`` in this order so that the Prometheus path reads the same numbers the
# records give (the throughput interval as ``throughput_ci_tok_s.lo`` and ``.hi``).
CLIENT_FIGURES = _ranked(list(FIGURES), {n: f.published for n, f in FIGURES.items()})
# published first in their published order, then those not published in field order
_ORDER = {**{n: i for i, n in enumerate(CLIENT_FIGURES)},
          **{n: len(FIGURES) + i for i, n in enumerate(FIGURES) if n not in CLIENT_FIGURES}}
QUANTILE_FIGURES = _ranked([n for n, f in FIGURES.items() if f.kind == "quantile"], _ORDER)
TAIL_FIGURES = _ranked([n for n, f in FIGURES.items() if f.kind == "tail"], _ORDER)
_COUNTS = frozenset(n for n in CLIENT_FIGURES if FIGURES[n].kind == "count")  # read back as integers
# the figures ``from_dict`` takes as they are: those a step may lack (None), each one number
_AS_READ = tuple(f.name for f in fields(StepFigures)
                 if f.name in FIGURES and FIGURES[f.name].kind in ("count", "rate", "value") and f.default is None)
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
