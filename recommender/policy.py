"""The recommendation policy: every threshold the analysis applies, as configuration.

Nothing the recommender decides is a constant in code. The policy says how much throughput a doubling of
concurrency must still buy (``min_gain_per_doubling``), which latency percentiles must hold (``slo``), how
fair and starvation-free a step must be, how many errors and how little memory headroom are tolerated, and
how much data a step needs before it may count. Ratios are plain fractions (0.10 = 10 %).

``Policy`` is one frozen pydantic model: it checks the bounds wherever a policy is built (settings, files,
HTTP, code), it is the value the pure analysis receives, and its ``model_dump()`` is the ``policy`` the
recommendations document embeds.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["SLO", "Policy"]


def _f(default: Any, description: str, **bounds: Any) -> Any:
    return Field(default=default, description=description, **bounds)


class SLO(BaseModel):
    """Latency objectives on the 95th percentile; ``None`` means not checked."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ttft_p95_s: float | None = _f(2.0, "TTFT p95 objective, seconds (null: unchecked)", gt=0)
    itl_p95_s: float | None = _f(0.2, "inter-token latency p95 objective, seconds (null: unchecked)", gt=0)
    e2e_p95_s: float | None = _f(None, "end-to-end latency p95 objective, seconds (null: unchecked)", gt=0)


class Policy(BaseModel):
    """The policy as configuration and as it appears in the recommendations document."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    min_gain_per_doubling: float = _f(0.10, "least relative throughput gain a doubling must still buy", ge=0)
    slo: SLO = Field(default_factory=SLO)
    jain_min: float = _f(0.9, "least Jain's index over per-user output tokens", ge=0, le=1)
    max_min_share_max: float | None = _f(None, "largest best/worst user token ratio (null: unchecked)", ge=1)
    queue_p99_max_s: float | None = _f(None, "bound on the queue-wait p99, seconds (null: unchecked)", gt=0)
    decode_stall_max_ratio: float = _f(5.0, "longest decode stall during another's prefill / ITL p50", gt=0)
    prefill_wait_max_s: float | None = _f(10.0, "bound on the longest wait for a first token, seconds", gt=0)
    max_error_ratio: float = _f(0.01, "largest tolerated failed/all requests", ge=0, le=1)
    memory_headroom_min_ratio: float = _f(0.05, "least free fraction of GPU memory at the peak", ge=0, le=1)
    min_requests_per_step: int = _f(10, "requests a step window needs to count", ge=1)
    max_throughput_ci_ratio: float = _f(0.25, "largest interval half-width / mean for a stable step", gt=0)
    confidence: float = _f(0.95, "confidence level of throughput intervals", gt=0, lt=1)
