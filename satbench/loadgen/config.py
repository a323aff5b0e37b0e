"""Load generator configuration: one pydantic model, validated once at the entry point, then passed down.

Why pydantic here and frozen dataclasses elsewhere: the config is the boundary where human-written TOML and
command-line overrides enter, so it must refuse every bad value *before* anything starts and name each bad
field in one message. A session orchestrator embeds ``LoadgenConfig`` in its own config, so the model has
no I/O and defaults that make a short session: two lanes of four rungs each finish in about 2-3 minutes
(warm-up 2 s, window 8-20 s, drain at most 5 s per rung).

``http_client``: ``auto`` sends plain-HTTP lanes through the kernel-timestamped socket client
(:mod:`loadgen.rawclient`) and HTTPS lanes through aiohttp; ``aiohttp`` forces aiohttp everywhere (for a
proxy setup the socket client does not speak, or to compare the two).

``metrics_linger_s`` keeps /metrics up after the walk until Prometheus has scraped it once (at most that
long), so the last step's exact figures (``loadgen_step_figure``) reach Prometheus too.

``max_loop_lag_s`` and ``max_idle_share`` are the client self-check (:mod:`loadgen.selfcheck`): a step timed
by client reads whose event-loop lag (or dispatch delay) p99 passes ``max_loop_lag_s``, or a kernel-timed
step whose users sat idle more than ``max_idle_share`` of their time, is marked invalid. ``gc_pause`` keeps
Python's cyclic garbage collector off while a step runs (a full collection can stall the loop for tens of
milliseconds) and collects between steps.

Every value is bounded (``core.config_files``): floats finite, lengths within ``MAX_TOKENS``, durations within
``MAX_SECONDS``, concurrency within ``MAX_CONCURRENCY``, rates within ``MAX_RATE_RPS``, trace windows within
``MAX_TRACE_SPAN_S`` and speed factors within ``MAX_SPEED_FACTOR``; a value past its bound is refused when the
config is read, naming the setting, instead of failing (or hanging) once the runtimes run.

Overrides are a flat dict of dotted paths (``{"ladder.concurrency": [1, 2], "warmup_s": 1}``) applied on top
of the file before validation. API keys are never stored: a lane names an environment variable
(``api_key_env``) that is read when the session opens.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from satbench.core.config_files import (
    MAX_CONCURRENCY,
    MAX_SECONDS,
    MAX_TOKENS,
    MAX_TRACE_SPAN_S,
    FieldError,
    HttpUrl,
    load_toml_model,
)
from satbench.core.lanes import Lane, duplicate_names, lane_named
from satbench.core.objectives import Objectives
from satbench.loadgen.pacer import SPIN_S

__all__ = [
    "AgentsConfig",
    "ArrivalConfig",
    "ConfigError",
    "ConversationConfig",
    "DatasetConfig",
    "LadderConfig",
    "LaneConfig",
    "LengthDist",
    "LoadgenConfig",
    "ObjectivesConfig",
    "PrefillConfig",
    "SharedPrefixConfig",
    "TraceConfig",
    "WorkloadConfig",
    "load_config",
]

MAX_RATE_RPS = 1e6  # an open-loop rate: a million requests/s is far past what one client sends
MAX_SPEED_FACTOR = 1e4  # a trace replayed ten thousand times faster than recorded


class ConfigError(ValueError):
    """A configuration was refused; the message names every bad field."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class LaneConfig(Lane):
    """One model deployment to measure, at ``url`` (the fields it shares with every lane: ``core.lanes``)."""

    url: HttpUrl


class LadderConfig(_Model):
    """The rungs and how to walk them (see ``loadgen.ladder.next_step``).

    ``extend``: once the listed rungs are measured, keep doubling concurrency past the top one while the
    newest rung still pays (``loadgen.ladder.extension_stop``): its throughput gained at least
    ``extend_min_gain`` per doubling over the rung below it, its TTFT and ITL p95 hold ``extend_ttft_p95_s``
    and ``extend_itl_p95_s`` (``None``: unchecked), no more than ``extend_ttft_late_share`` of its requests
    were past their own TTFT deadline (goodput's count by the objectives, ``core.objectives``: the session's
    check where the deadline grows with the prompt; ``None``: unchecked), its error ratio stays within
    ``extend_max_error_ratio`` and it is valid. No rung is ever measured above ``max_concurrency``, listed or not.
    ``drift_reference``: once a lane's ladder is walked, measure its lowest valid rung again, and the rung its walk
    stopped at where the ladder decides gains (``core.drift.knee_rung``; each a window marked
    ``drift_reference``, no rung of the ladder), so the recommender can tell a node that changed speed during the
    walk from an effect of concurrency (``core.drift``); false: no re-measure, only the rung-by-rung check.
    """

    concurrency: list[Annotated[int, Field(le=MAX_CONCURRENCY)]] = Field(default_factory=lambda: [1, 2, 4, 8])
    plateau_stop: bool = False
    plateau_min_gain: float = Field(default=0.10, ge=0.0, le=10.0)
    plateau_patience: int = Field(default=1, ge=1, le=64)
    refine: bool = False
    refine_steps: int = Field(default=1, ge=0, le=8)
    extend: bool = False
    max_concurrency: int = Field(default=64, ge=1, le=MAX_CONCURRENCY)
    extend_min_gain: float = Field(default=0.10, ge=0.0, le=10.0)
    extend_ttft_p95_s: float | None = Field(default=None, gt=0.0, le=MAX_SECONDS)
    extend_itl_p95_s: float | None = Field(default=None, gt=0.0, le=MAX_SECONDS)
    extend_ttft_late_share: float | None = Field(default=None, gt=0.0, le=1.0)
    extend_max_error_ratio: float = Field(default=0.01, ge=0.0, le=1.0)
    drift_reference: bool = True

    @field_validator("concurrency")
    @classmethod
    def _check_ladder(cls, value: list[int]) -> list[int]:
        if not value:
            raise ValueError("ladder must list at least one concurrency")
        bad = [c for c in value if c <= 0]
        if bad:
            raise ValueError(f"concurrency must be positive, got {bad}")
        if len(set(value)) != len(value):
            raise ValueError(f"concurrency rungs repeat: {value}")
        return value

    @model_validator(mode="after")
    def _check_cap(self) -> LadderConfig:
        above = [c for c in self.concurrency if c > self.max_concurrency]
        if above:
            raise FieldError([("concurrency", f"{above} above max_concurrency ({self.max_concurrency}): "
                                "raise max_concurrency or drop the rung")])
        return self

    @property
    def max_rung(self) -> int:
        """The highest concurrency the walk may measure: the top listed rung, or with ``extend`` its largest
        doubling within ``max_concurrency`` (what a client sizes its connection pool for)."""
        top = max(self.concurrency)
        while self.extend and top * 2 <= self.max_concurrency:
            top *= 2
        return top


class LengthDist(_Model):
    """A token-length distribution: ``fixed`` (value), ``uniform`` (low..high), ``lognormal`` (median, sigma).

    Draws are clipped to ``[low, high]`` for every kind but ``fixed``.
    """

    kind: Literal["fixed", "uniform", "lognormal"] = "fixed"
    value: int = Field(default=64, ge=1, le=MAX_TOKENS)
    low: int = Field(default=1, ge=1, le=MAX_TOKENS)
    high: int = Field(default=4096, ge=1, le=MAX_TOKENS)
    median: float = Field(default=64.0, gt=0, le=MAX_TOKENS)
    sigma: float = Field(default=0.5, ge=0, le=10.0)

    @model_validator(mode="after")
    def _check_bounds(self) -> LengthDist:
        if self.high < self.low:
            raise FieldError([("high", f"{self.high} is below low ({self.low})")])
        return self


class SharedPrefixConfig(_Model):
    """``share`` of the requests open with one of ``prefixes`` common prefixes of ``tokens`` tokens (a system
    prompt, say), which a runtime's prompt cache can serve; see ``loadgen.workload``."""

    share: float = Field(default=0.5, ge=0.0, le=1.0)
    prefixes: int = Field(default=4, ge=1, le=4096)
    tokens: int = Field(default=256, ge=1, le=MAX_TOKENS)


class ConversationConfig(_Model):
    """Multi-turn conversations: a user's next request repeats its previous exchange and adds a new message,
    for ``turns`` requests, then a new conversation begins; see ``loadgen.workload``.

    ``start = "steady"`` (the default): each user opens at a random turn of a conversation whose earlier
    exchanges are synthesized, so the depths of the requests in flight are the stationary mix (uniform over the
    turns) from the rung's first request, the same at every rung; the warm-up then lasts until every user has
    had one answer (the synthesized history is prefilled once, outside the window). ``"fresh"``: every user
    opens at turn 1 (depths then grow through the rung, more slowly at higher rungs)."""

    turns: int = Field(default=4, ge=1, le=1000)
    start: Literal["steady", "fresh"] = "steady"


class ArrivalConfig(_Model):
    """How requests arrive (``core.arrivals``): ``closed`` (the default: c users, each sending when its last
    request ended) or open loop at a rate: ``constant``, ``poisson`` or ``gamma`` (``burstiness``, the gamma
    shape: 1 is Poisson, below 1 burstier; or ``cv``, the coefficient of variation of the gaps). Open loop walks
    a rate ladder after the closed one (``loadgen.rates``): the listed ``rates`` (requests/s), else ``relative``
    factors of the lane's measured closed-loop capacity (the most requests/s a closed rung served), extended by
    1.25x steps up to ``max_relative`` until one fails, then bisected ``search_steps`` times between the last
    rate that passed and the first that failed. A rate passes when the lane sustains it (its backlog does not
    grow) and at least ``target`` of its requests attain every objective (``objectives``; the session sets
    both from the policy). ``max_in_flight`` caps the requests in flight (a request that finds the cap full
    waits in the client, and the wait counts); ``max_lag_s`` is the p99 schedule lag past which a rung's
    client is said to have fallen behind (the rung is invalid). A rate rung's window is looked at from the
    ladder's ``min_window_s`` on, at 1.5x growing lengths, until its verdict is decided or ``max_window_s``
    (``core.attainment``), past which a rung whose attainment interval still straddles the target is
    *undecided* and the rate answer says so where its interval is wider than 10 %. 600 s by default: on an
    engine whose truth is known (4 slots, 10 searches per arrival cv), 90 s windows answered gamma cv 3 and 4
    searches 33 % and 51 % high, all settled; with the honest interval no search was settled and wrong at
    300 s or 600 s, and Poisson searches settled (within 5 %) 2 of 10 times at 300 s and 5 of 10 at 600 s,
    while cv 2 to 4 stayed undecided (their point answers -1 % median at cv 3) at both. Its warm-up is
    ``warmup_s``, by default the longest of the ladder's warm-up, twice the
    mean latency of the closed rung that served most and the TTFT objective (a queue fills in about a latency,
    and the waits an objective judges take about their own length to build).

    ``workers``: the processes that send the open-loop requests (``loadgen.senders``): 1 (the default) sends
    from this process; more hands the one schedule, drawn here, round-robin to that many sender processes,
    each with its own kernel-timed pacer and client, their clocks measured against this one.

    ``spin_s``: how early the pacer's kernel timer wakes before each send, the rest spun on the clock
    (``loadgen.pacer``): 0.2 ms by default, a send within microseconds of its time at a CPU cost of about that
    long a send; 0 sleeps to the timer alone (tens to hundreds of microseconds late, sends due together then
    bunched)."""

    process: Literal["closed", "constant", "poisson", "gamma"] = "closed"
    burstiness: float | None = Field(default=None, gt=0, le=1e6)
    cv: float | None = Field(default=None, gt=0, le=1e3)
    max_in_flight: int | None = Field(default=None, ge=1, le=MAX_CONCURRENCY)
    rates: list[Annotated[float, Field(gt=0, le=MAX_RATE_RPS, allow_inf_nan=False)]] | None = None
    relative: list[Annotated[float, Field(gt=0, le=1e3, allow_inf_nan=False)]] = Field(
        default_factory=lambda: [0.5, 0.75, 1.0, 1.25])
    max_relative: float = Field(default=2.0, gt=0, le=1e3)
    search_steps: int = Field(default=3, ge=0, le=8)
    target: float = Field(default=0.9, gt=0, le=1)
    max_lag_s: float = Field(default=0.05, gt=0, le=MAX_SECONDS)
    max_window_s: float = Field(default=600.0, gt=0, le=3600)
    warmup_s: float | None = Field(default=None, ge=0, le=MAX_SECONDS)
    workers: int = Field(default=1, ge=1, le=64)
    spin_s: float = Field(default=SPIN_S, ge=0, le=0.01)

    @model_validator(mode="after")
    def _check_arrival(self) -> ArrivalConfig:
        problems = []
        if self.workers > 1 and self.max_in_flight is not None:
            problems.append(("workers", "a cap on requests in flight (max_in_flight) needs one sending process "
                                        "(workers = 1)"))
        if self.burstiness is not None and self.cv is not None:
            problems.append(("burstiness", "set burstiness (the gamma shape) or cv, not both"))
        if (self.burstiness is not None or self.cv is not None) and self.process != "gamma":
            problems.append(("burstiness" if self.burstiness is not None else "cv",
                             f"only the gamma process has a burstiness (process is {self.process!r})"))
        if self.rates is not None and not self.rates:
            problems.append(("rates", "list at least one rate, or leave it out to search relative to capacity"))
        if problems:
            raise FieldError(problems)
        return self

    @property
    def open(self) -> bool:
        return self.process != "closed"


class TraceConfig(_Model):
    """A recorded trace replayed open-loop at speed factors (``loadgen.traces``, ``loadgen.trace_step``): ``path``
    (Mooncake JSONL, BurstGPT CSV or Azure LLM inference CSV; ``format`` ``auto`` reads it from the file), the
    window of it replayed (``offset_s``, ``length_s`` of the trace's own time; ``None``: to its end), the speed
    factors walked (``factors``, increasing, then 1.25x steps up to ``max_factor`` while every factor passes,
    then ``search_steps`` bisections between the last that passed and the first that failed: the search of
    ``loadgen.rates`` over the trace's recorded rate), and ``seed`` of the synthesised prompt text. A rung plays
    the window once as its warm-up, then measures it whole: whole passes of it, as many as the warm-up and
    ``min_window_s`` need (``loadgen.trace_step``; the same requests, the same text)."""

    path: Path
    format: Literal["auto", "mooncake", "burstgpt", "azure"] = "auto"
    offset_s: float = Field(default=0.0, ge=0.0, le=MAX_TRACE_SPAN_S, allow_inf_nan=False)
    length_s: float | None = Field(default=None, gt=0.0, le=MAX_TRACE_SPAN_S, allow_inf_nan=False)
    factors: list[Annotated[float, Field(gt=0, le=MAX_SPEED_FACTOR, allow_inf_nan=False)]] = Field(
        default_factory=lambda: [0.5, 1.0, 2.0, 4.0])
    max_factor: float = Field(default=64.0, gt=0, le=MAX_SPEED_FACTOR, allow_inf_nan=False)
    search_steps: int = Field(default=3, ge=0, le=8)
    seed: int = 0

    @field_validator("factors")
    @classmethod
    def _check_factors(cls, value: list[float]) -> list[float]:
        if not value:
            raise ValueError("list at least one speed factor")
        return sorted(set(value))


class PrefillConfig(_Model):
    """The lane's peak prefill throughput (``loadgen.prefill_walk``), walked after its ladder: closed-loop rungs
    of ``prompt_tokens``-token prompts (within a slot's context) and one output token each, at 1, 2, 4, ...
    users until prompt tokens/s stop gaining (the ladder's rule: less than ``decide_gain`` per doubling, by
    the interval; 0.10 where unset) or ``max_concurrency``; each rung's window as the ladder's (its warm-up,
    ``min_window_s`` to ``max_window_s``, measured longer where its gain straddles the rule). What llm-d's
    router reads as ``peakPrefillThroughput``."""

    prompt_tokens: int = Field(default=2048, ge=16, le=MAX_TOKENS)
    max_concurrency: int = Field(default=32, ge=1, le=MAX_CONCURRENCY)


class AgentsConfig(_Model):
    """The lane's agent answer (``loadgen.agent_walk``), walked after its ladder: rungs of ``n`` concurrent agent
    session trees (``core.agents``), each turn sent end to start, judged at the tier (a p95 TTFT ceiling
    ``ttft_s`` and a p25 output speed floor ``speed_tok_s``: Artificial Analysis' AgentPerf tiers; 2 s and 30
    tok/s by default); 1, 2, 4 ... sessions until one fails, then bisection, up to ``max_sessions``. Each rung:
    ``warmup_s`` (its trees start), then a ``window_s`` window whose turns are judged, followed to their end for
    at most ``drain_s``. Sessions are synthetic (``core.agents.SyntheticAgents``' published defaults; the
    fields below change the ones operators change most) or, with ``trajectories``, a recorded corpus
    (``cc-traces-weka`` lines), read and checked whole before the run. ``max_context_tokens``: the most a
    session's call may hold (its prompt and its output); the lane's slot context bounds it too."""

    ttft_s: float = Field(default=2.0, gt=0.0, le=MAX_SECONDS)
    speed_tok_s: float = Field(default=30.0, gt=0.0, le=1e6)
    max_sessions: int = Field(default=64, ge=1, le=MAX_CONCURRENCY)
    warmup_s: float = Field(default=10.0, ge=0.0, le=MAX_SECONDS)
    window_s: float = Field(default=120.0, gt=0.0, le=MAX_SECONDS)
    drain_s: float = Field(default=60.0, ge=0.0, le=MAX_SECONDS)
    confidence: float = Field(default=0.95, gt=0.5, lt=1.0)
    seed: int = 0
    trajectories: Path | None = None
    max_context_tokens: int = Field(default=32768, ge=64, le=MAX_TOKENS)
    system_tokens: int = Field(default=2000, ge=1, le=MAX_TOKENS)
    task_tokens: int = Field(default=1000, ge=1, le=MAX_TOKENS)
    turns_median: float = Field(default=11.0, ge=1.0, le=10_000)
    new_tokens_median: float = Field(default=875.0, ge=1.0, le=MAX_TOKENS)
    output_tokens_median: float = Field(default=214.0, ge=1.0, le=MAX_TOKENS)
    output_tokens_max: int = Field(default=2048, ge=1, le=MAX_TOKENS)
    delay_median_s: float = Field(default=0.3, ge=0.0, le=MAX_SECONDS)
    delay_cap_s: float = Field(default=10.0, ge=0.0, le=MAX_SECONDS)
    spawn_share: float = Field(default=0.0, ge=0.0, le=1.0)
    spawns: int = Field(default=2, ge=1, le=64)

    @model_validator(mode="after")
    def _check_room(self) -> AgentsConfig:
        if self.max_context_tokens <= self.system_tokens + self.task_tokens + 16:
            raise FieldError([("max_context_tokens", f"{self.max_context_tokens} leaves no room for a turn after "
                               f"the system prompt ({self.system_tokens}) and the task ({self.task_tokens})")])
        return self


class ObjectivesConfig(_Model):
    """Per-request objectives for goodput (``core.objectives``): the session sets them from its policy."""

    ttft_s: float | None = Field(default=None, gt=0, le=MAX_SECONDS)
    ttft_s_per_1k_prompt: float = Field(default=0.0, ge=0, le=MAX_SECONDS)
    tpot_s: float | None = Field(default=None, gt=0, le=MAX_SECONDS)
    pause_excess_s: float | None = Field(default=None, gt=0, le=MAX_SECONDS)
    e2e_s: float | None = Field(default=None, gt=0, le=MAX_SECONDS)

    def objectives(self) -> Objectives:
        return Objectives(**self.model_dump())


class DatasetConfig(_Model):
    """Prompts from a conversation dataset (``loadgen.datasets``): ``path`` (ShareGPT JSON, OpenAI chat JSONL or
    prompt JSONL; ``format`` ``auto`` reads it from the file), ``sample`` conversations drawn with ``seed`` (None:
    every one, shuffled), kept where every turn's prompt is within ``min_prompt_tokens``..``max_prompt_tokens``
    and every answer within ``max_output_tokens`` (lengths estimated at 4 characters a token), cut to
    ``max_turns``. ``output``: ``answer`` sends each turn's ``max_tokens`` as the length of the dataset's answer
    to it (counted by the lane's ``/tokenize`` where it answers, else estimated; a turn without an answer draws
    from ``output_tokens``), ``workload`` always draws from ``output_tokens``."""

    path: Path
    format: Literal["auto", "sharegpt", "openai", "prompt"] = "auto"
    sample: int | None = Field(default=None, ge=1, le=10_000_000)
    seed: int = 0
    min_prompt_tokens: int = Field(default=1, ge=1, le=MAX_TOKENS)
    max_prompt_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS)
    max_output_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS)
    max_turns: int | None = Field(default=None, ge=1, le=10_000)
    output: Literal["answer", "workload"] = "answer"


class WorkloadConfig(_Model):
    """What each user sends: seeded, so the same config replays the same requests.

    ``shared_prefix`` and ``conversation`` (both off by default) exercise the runtime's prompt cache."""

    seed: int = 0
    prompt_tokens: LengthDist = Field(default_factory=lambda: LengthDist(value=64))
    output_tokens: LengthDist = Field(default_factory=lambda: LengthDist(value=64))
    ignore_eos: bool = True
    temperature: float = Field(default=0.0, ge=0.0, le=100.0)
    prefill_probe_share: float = Field(default=0.0, ge=0.0, le=1.0)
    prefill_probe_tokens: int = Field(default=1024, ge=1, le=MAX_TOKENS)
    shared_prefix: SharedPrefixConfig | None = None
    conversation: ConversationConfig | None = None
    dataset: DatasetConfig | None = None

    @model_validator(mode="after")
    def _check_prefix_fits(self) -> WorkloadConfig:
        if self.dataset is not None and (self.shared_prefix is not None or self.conversation is not None):
            raise FieldError([("dataset", "a dataset's prompts and conversations are its own: leave shared_prefix "
                               "and conversation unset")])
        shared, dist = self.shared_prefix, self.prompt_tokens
        longest = dist.value if dist.kind == "fixed" else dist.high
        if shared is not None and shared.tokens + 5 > longest:
            raise FieldError([("shared_prefix.tokens", f"{shared.tokens} leaves no unique part in prompts of at "
                               f"most {longest} tokens (prompt_tokens): a prompt holds the prefix, a 4-token head "
                               "and at least one more token")])
        return self


class LoadgenConfig(_Model):
    """Everything the ladder walk needs. Defaults make a short session (see module docstring)."""

    lanes: list[LaneConfig] = Field(default_factory=list)
    # Lanes of one node run one after another (they share its hardware); up to this many nodes walk at once
    # (they share none). 1: every lane in turn, as listed.
    parallel_nodes: int = Field(default=1, ge=1, le=1024)
    ladder: LadderConfig = Field(default_factory=LadderConfig)
    workload: WorkloadConfig = Field(default_factory=WorkloadConfig)
    arrival: ArrivalConfig = Field(default_factory=ArrivalConfig)
    objectives: ObjectivesConfig | None = None
    trace: TraceConfig | None = None
    prefill: PrefillConfig | None = None
    agents: AgentsConfig | None = None
    warmup_s: float = Field(default=2.0, ge=0.0, le=MAX_SECONDS)
    min_window_s: float = Field(default=8.0, gt=0.0, le=MAX_SECONDS)
    max_window_s: float = Field(default=20.0, gt=0.0, le=MAX_SECONDS)
    min_requests: int = Field(default=8, ge=1, le=10_000_000)
    ci_rel_bound: float = Field(default=0.05, gt=0.0, le=1.0)
    batch_s: float | None = Field(default=None, gt=0.0, le=MAX_SECONDS)
    drain: Literal["wait", "cancel"] = "wait"
    # how long the drain follows the window's requests to their end (the load kept on); None: the request
    # timeout. A request still running then is cut off and its figures are lower bounds (``censored``).
    drain_timeout_s: float | None = Field(default=None, ge=0.0, le=MAX_SECONDS)
    # then how long requests sent after the window may take to end before they are cut off (they count for
    # nothing: this only spares their records the cut)
    drain_settle_s: float = Field(default=5.0, ge=0.0, le=MAX_SECONDS)
    # sequential measuring: where a rung's gain over the rung below straddles this gain (the policy's
    # min_gain_per_doubling: `satbench run` sets it), the window goes on, doubling, up to decide_max_window_s
    decide_gain: float | None = Field(default=None, ge=0.0, le=10.0)
    decide_max_window_s: float = Field(default=40.0, gt=0.0, le=MAX_SECONDS)
    # a rung too thin (fewer than min_requests) or too unsteady to use (its throughput interval's half-width more
    # than this share of its mean: the policy's max_throughput_ci_ratio, which `satbench run` sets) at
    # max_window_s goes on, looked at each time its window has doubled, up to hold_max_window_s (None: up to
    # decide_max_window_s), before it is given up (loadgen.stop_rule.held); None: it ends at max_window_s
    usable_ci_rel: float | None = Field(default=None, gt=0.0)  # bounded as the policy's ratio it copies
    hold_max_window_s: float | None = Field(default=None, gt=0.0, le=MAX_SECONDS)
    request_timeout_s: float = Field(default=120.0, gt=0.0, le=MAX_SECONDS)
    connect_timeout_s: float = Field(default=5.0, gt=0.0, le=MAX_SECONDS)
    max_event_bytes: int = Field(default=1 << 20, ge=1024, le=1 << 30)
    http_client: Literal["auto", "aiohttp"] = "auto"
    max_loop_lag_s: float = Field(default=0.010, gt=0.0, le=MAX_SECONDS)
    max_idle_share: float = Field(default=0.05, gt=0.0, le=1.0)
    gc_pause: bool = True
    metrics_port: int | None = Field(default=0, ge=0, le=65535)
    metrics_host: str = Field(default="127.0.0.1", min_length=1)
    metrics_linger_s: float = Field(default=0.0, ge=0.0, le=600.0)
    recommender_url: HttpUrl | None = None
    progress: bool | None = None

    @model_validator(mode="after")
    def _check_session(self) -> LoadgenConfig:
        problems = []
        if self.max_window_s < self.min_window_s:
            problems.append(("max_window_s", f"{self.max_window_s:g} s is shorter than min_window_s "
                             f"({self.min_window_s:g} s): raise max_window_s or lower min_window_s"))
        if self.max_window_s < self.warmup_s:
            problems.append(("max_window_s", f"{self.max_window_s:g} s is shorter than warmup_s "
                             f"({self.warmup_s:g} s): raise max_window_s or lower warmup_s"))
        dupes = duplicate_names(self.lanes)
        if dupes:
            problems.append(("lanes", f"duplicate lane names: {', '.join(dupes)}"))
        if self.arrival.open and self.workload.conversation is not None:
            problems.append(("workload.conversation", "a conversation needs closed-loop users; open-loop arrivals "
                             "(arrival.process) send independent requests"))
        if self.trace is not None and self.workload.conversation is not None:
            problems.append(("workload.conversation", "a trace replays independent requests at its own times; "
                             "a conversation needs closed-loop users"))
        if problems:
            raise FieldError(problems)
        return self

    def lane(self, name: str) -> LaneConfig:
        return lane_named(self.lanes, name)


def _loadgen_table(data: dict[str, Any]) -> dict[str, Any]:
    """A session file's ``[loadgen]`` table read as a load generator config, when it has no lanes of its own."""
    section = data.get("loadgen")
    return section if isinstance(section, dict) and "lanes" not in data else data


def load_config(path: Path | None, overrides: dict[str, Any] | None = None) -> LoadgenConfig:
    """Reads a TOML file (or nothing), applies dotted overrides, validates. Raises ``ConfigError``."""
    return load_toml_model(LoadgenConfig, path, overrides, what="loadgen", error=ConfigError,
                           prepare=_loadgen_table)
