"""The recommendation policy: every threshold the analysis applies, as configuration.

Nothing the recommender decides is a constant in code. The policy says how much throughput a doubling of
concurrency must still buy (``min_gain_per_doubling``), which latency percentiles must hold (``slo``), how
fair and starvation-free a step must be, how many errors and how little memory headroom are tolerated, and
how much data a step needs before it may count. ``PolicyModel`` validates it at the edge (settings, files,
HTTP); ``Policy`` is the frozen value the pure analysis receives.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["SLO", "Policy", "PolicyModel", "SLOModel"]


@dataclass(frozen=True, slots=True)
class SLO:
    """Latency objectives on the 95th percentile; ``None`` means not checked."""

    ttft_p95_s: float | None = 2.0
    itl_p95_s: float | None = 0.2
    e2e_p95_s: float | None = None

    def to_dict(self) -> dict[str, float | None]:
        return {"ttft_p95_s": self.ttft_p95_s, "itl_p95_s": self.itl_p95_s, "e2e_p95_s": self.e2e_p95_s}


@dataclass(frozen=True, slots=True)
class Policy:
    """Thresholds of the analysis. Ratios are plain fractions (0.10 = 10 %)."""

    min_gain_per_doubling: float = 0.10
    slo: SLO = field(default_factory=SLO)
    jain_min: float = 0.9
    max_min_share_max: float | None = None
    queue_p99_max_s: float | None = None
    decode_stall_max_ratio: float = 5.0
    prefill_wait_max_s: float | None = 10.0
    max_error_ratio: float = 0.01
    memory_headroom_min_ratio: float = 0.05
    min_requests_per_step: int = 10
    max_throughput_ci_ratio: float = 0.25
    confidence: float = 0.95

    def to_dict(self) -> dict[str, Any]:
        return {
            "min_gain_per_doubling": self.min_gain_per_doubling,
            "slo": self.slo.to_dict(),
            "jain_min": self.jain_min,
            "max_min_share_max": self.max_min_share_max,
            "queue_p99_max_s": self.queue_p99_max_s,
            "decode_stall_max_ratio": self.decode_stall_max_ratio,
            "prefill_wait_max_s": self.prefill_wait_max_s,
            "max_error_ratio": self.max_error_ratio,
            "memory_headroom_min_ratio": self.memory_headroom_min_ratio,
            "min_requests_per_step": self.min_requests_per_step,
            "max_throughput_ci_ratio": self.max_throughput_ci_ratio,
            "confidence": self.confidence,
        }


def _f(default: Any, description: str, **bounds: Any) -> Any:
    return Field(default=default, description=description, **bounds)


class SLOModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    ttft_p95_s: float | None = _f(2.0, "TTFT p95 objective, seconds (null: unchecked)", gt=0)
    itl_p95_s: float | None = _f(0.2, "inter-token latency p95 objective, seconds (null: unchecked)", gt=0)
    e2e_p95_s: float | None = _f(None, "end-to-end latency p95 objective, seconds (null: unchecked)", gt=0)

    def to_slo(self) -> SLO:
        return SLO(ttft_p95_s=self.ttft_p95_s, itl_p95_s=self.itl_p95_s, e2e_p95_s=self.e2e_p95_s)


class PolicyModel(BaseModel):
    """The policy as configuration and as it appears in the recommendations document."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    min_gain_per_doubling: float = _f(0.10, "least relative throughput gain a doubling must still buy", ge=0)
    slo: SLOModel = Field(default_factory=SLOModel)
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

    def to_policy(self) -> Policy:
        data = self.model_dump()
        data["slo"] = self.slo.to_slo()
        return Policy(**data)

    @classmethod
    def from_policy(cls, policy: Policy) -> PolicyModel:
        return cls.model_validate(policy.to_dict())
