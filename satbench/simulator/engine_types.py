"""What the continuous-batching engine (``simulator.engine``) takes and gives: a request's spec, a request in
flight with its timings, one emission, a step's plan and result, the truth record of a finished request and the
engine's counters. Plain data; the engine is the one that changes them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ContextLimitError",
    "Emission",
    "EngineCounters",
    "Request",
    "RequestSpec",
    "StepPlan",
    "StepResult",
    "TruthRecord",
]


class ContextLimitError(ValueError):
    """The prompt does not fit in one slot's context (llama-server answers 400 exceed_context_size_error)."""

    def __init__(self, message: str, n_prompt_tokens: int = 0, n_ctx: int = 0) -> None:
        super().__init__(message)
        self.n_prompt_tokens = n_prompt_tokens
        self.n_ctx = n_ctx


@dataclass(frozen=True)
class RequestSpec:
    """One request as the engine sees it.

    ``prompt_ids`` (the prompt's token ids) enable the prompt cache unless ``cache_prompt`` is false;
    ``stop_at`` fixes where EOS falls (otherwise a seeded draw from ``[generation] eos_tokens``);
    ``text_key`` keys the generated tokens (otherwise the request's sequence number); ``progress`` asks for
    one emission per prefill chunk; ``id_slot`` pins the request to one slot (-1: any). ``params`` is
    opaque to the engine (the HTTP layer's generation settings, shown by ``/slots``).
    """

    request_id: str
    prompt_tokens: int
    max_tokens: int = -1
    ignore_eos: bool = False
    user: str | None = None
    prompt_ids: tuple[int, ...] | None = field(default=None, repr=False)
    cache_prompt: bool = True
    stop_at: int | None = None
    text_key: int | None = None
    progress: bool = False
    id_slot: int = -1
    params: Mapping[str, Any] | None = field(default=None, compare=False, hash=False, repr=False)


@dataclass(frozen=True)
class TruthRecord:
    """What the engine did with one request; times are model time (the server maps them to Unix seconds)."""

    request_id: str
    user: str | None
    slot: int | None
    prompt_tokens: int
    output_tokens: int
    arrival: float
    admitted: float | None
    first_token: float | None
    last_token: float | None
    finish_reason: str


@dataclass(eq=False)
class Request:
    seq: int
    spec: RequestSpec
    n_predict: int
    target: int
    arrival: float
    state: str = "waiting"  # waiting | prefill | decode | done | cancelled
    slot: int | None = None
    admitted: float | None = None
    prompt_done: int = 0
    prompt_start: float | None = None
    prompt_end: float | None = None
    first_token: float | None = None
    last_token: float | None = None
    output: int = 0
    finish_reason: str = ""
    cache_n: int = 0
    ctx_limited: bool = False  # n_predict was cut to what the slot's context leaves

    @property
    def text_key(self) -> int:
        return self.spec.text_key if self.spec.text_key is not None else self.seq

    @property
    def prompt_n(self) -> int:
        """Prompt tokens evaluated so far (the cached ones excluded)."""
        return self.prompt_done - self.cache_n

    @property
    def truncated(self) -> bool:
        """Generation stopped because the slot's context was full (llama-server's ``truncated``)."""
        return self.ctx_limited and self.output >= self.n_predict and self.finish_reason == "length"

    @property
    def prompt_ms(self) -> float:
        if self.prompt_start is None or self.prompt_end is None:
            return 0.0
        return (self.prompt_end - self.prompt_start) * 1000.0

    @property
    def predicted_ms(self) -> float:
        if self.first_token is None or self.last_token is None:
            return 0.0
        return (self.last_token - self.first_token) * 1000.0

    @property
    def kv_tokens(self) -> int:
        return self.prompt_done + self.output


@dataclass(frozen=True)
class Emission:
    """``n_out`` tokens so far (the newest is new) at model time ``at``; ``progress >= 0`` marks a prompt
    progress report instead (prompt tokens processed, cached ones included), sent only when asked."""

    request: Request
    n_out: int
    finished: bool
    progress: int = -1
    at: float = 0.0


@dataclass(frozen=True)
class StepPlan:
    start: float
    end: float
    n_decode: int
    n_prompt: int
    decoding: tuple[Request, ...]
    prompting: tuple[tuple[Request, int], ...]


@dataclass(frozen=True)
class StepResult:
    start: float
    end: float
    n_decode: int
    n_prompt: int
    emissions: tuple[Emission, ...]


@dataclass
class EngineCounters:
    """The counters behind llama-server's ``/metrics`` (``bucket_*`` are reset at every scrape)."""

    prompt_tokens_total: int = 0
    prompt_tokens_cached_total: int = 0
    prompt_seconds_total: float = 0.0
    tokens_predicted_total: int = 0
    tokens_predicted_seconds_total: float = 0.0
    n_decode_total: int = 0
    n_busy_slots_total: int = 0
    n_tokens_max: int = 0
    bucket_prompt_tokens: int = 0
    bucket_prompt_ms: float = 0.0
    bucket_predicted_tokens: int = 0
    bucket_predicted_ms: float = 0.0
    requests_total: int = 0
    steps_prompt_tokens: int = 0
    steps_decode_tokens: int = 0
