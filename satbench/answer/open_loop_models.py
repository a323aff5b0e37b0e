"""The open-loop answers of the recommendations document: the rate search's (``RateModel`` and its rungs) and the
trace replay's (``TraceModel``: the factor search's rungs, the window replayed, the trace's evidence), as
``answer.rate_analysis`` and ``answer.trace_analysis`` state them. Part of the document's one shape
(``answer.models``, which re-exports them and lays them into ``LaneModel``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from satbench.answer.energy import EnergyModel

__all__ = ["RateModel", "RatePointModel", "TraceEvidenceModel", "TraceModel", "TracePointModel", "TraceWindowModel"]


class RatePointModel(BaseModel):
    """One rate rung of the rate search, judged (``answer.rate_analysis``)."""

    rate_rps: float
    offered_rps: float | None
    valid: bool
    sustained: bool | None = Field(description="not above the closed ladder's capacity and the backlog did not "
                                               "grow by more than a tenth of the rate")
    attainment: float | None = Field(description="share of the window's requests that attained every objective")
    attainment_interval: list[float] | None = Field(description="its interval at the policy's confidence (batch "
                                                                "means over intended time, at least Wilson's)")
    goodput_rps: float | None
    goodput_tok_s: float | None
    passed: bool | None = Field(description="sustained and attainment at least the target; null: not judged")
    missed_most: str | None = Field(description="the objective its requests missed most (ttft, tpot, pause, e2e, "
                                                "error)")
    latency_mean_s: float | None = Field(description="mean e2e latency from the intended send time")
    ttft_p95_s: float | None = Field(description="TTFT p95 from the intended send time")
    judged_requests: int = Field(default=0, description="requests meant to be sent in the window, judged")
    reason: str | None = Field(default=None, description="the verdict in words (core.attainment.rate_verdict)")


class RateModel(BaseModel):
    """The rate answer: the highest request rate the lane sustains with at least ``attainment_target`` of its
    requests within every objective (goodput), from open-loop rungs; absent without them."""

    status: Literal["settled", "unsaturated", "undecided", "none"] = Field(
        description="settled: bracketed by a failing rate, its interval within 10 % of the answer; unsaturated: "
                    "every rate passed (a lower bound); undecided: the interval is wider (the reason says why); none")
    reason: str | None
    max_rate_rps: float | None = Field(description="what an autoscaler or rate limiter reads (requests/s)")
    max_rate_rpm: int | None = Field(description="the same per minute (LiteLLM rpm)")
    interval: list[float | None] | None = Field(description="where the crossing can lie: from the highest offered "
                                                            "rate whose attainment interval lies at or above the "
                                                            "target to the lowest whose interval lies below it "
                                                            "(null: no bound above)")
    goodput_rps: float | None
    goodput_tok_s: float | None
    attainment: float | None
    attainment_target: float
    binding_objective: str | None = Field(description="what failed first above the answer: sustained (the "
                                                      "backlog grew), ttft, tpot, pause, e2e or error")
    curve: list[RatePointModel]
    littles_law: dict[str, Any] | None = Field(description="the closed rung at the concurrency answer's c / W "
                                                           "against the rate answer, with the in-flight count")
    notes: list[str] = Field(default_factory=list)
    energy: EnergyModel | None = Field(None, description="energy and cost at the highest passing rate rung at or "
                                                         "below the answer (core.energy)")


class TracePointModel(BaseModel):
    """One trace rung of the speed-factor search, judged as a rate rung (``answer.trace_analysis``)."""

    speed_factor: float = Field(description="the recorded traffic's pace it was replayed at (1: as recorded)")
    rate_rps: float = Field(description="the trace window's recorded rate times the factor (requests/s)")
    offered_rps: float | None
    attainment: float | None = Field(description="share of the window's requests that attained every objective")
    attainment_interval: list[float] | None = Field(description="its interval at the policy's confidence")
    passed: bool | None = Field(description="sustained and attainment at least the target; null: not judged")
    sustained: bool | None = Field(description="the backlog did not grow by more than a tenth of the rate")
    goodput_rps: float | None
    reason: str | None = Field(default=None, description="the verdict in words (core.attainment.rate_verdict)")


class TraceWindowModel(BaseModel):
    """The part of the trace replayed: from ``offset_s`` for ``length_s`` seconds of recorded time."""

    model_config = ConfigDict(extra="allow")

    offset_s: float | None = None
    length_s: float | None = None
    requests: int | None = None


class TraceEvidenceModel(BaseModel):
    """Which traffic the trace answer is for: the manifest's ``traces`` entry of the lane
    (``loadgen.traces.Trace.evidence``); a field the manifest did not say reads as null."""

    model_config = ConfigDict(extra="allow")

    path: str | None = Field(None, description="the trace file as the run was given it")
    format: str | None = Field(None, description="mooncake, burstgpt or azure")
    sha256: str | None = Field(None, description="sha256 of the trace file")
    size_bytes: int | None = None
    window: TraceWindowModel | None = None
    recorded_rate_rps: float | None = None
    skipped_rows: int | None = None
    synthesised: str | None = Field(None, description="what satbench made up: the prompt text, and how")
    block_tokens: int | None = None
    implied_cache_share: float | None = Field(None, description="prompt tokens an unbounded prefix cache "
                                                                "would serve, as the trace's block ids imply")
    speed_factors: list[float] = Field(default_factory=list, description="the factors walked, in order")


class TraceModel(BaseModel):
    """The trace answer: the largest speed factor of a recorded trace the lane takes sustainably with at least
    ``attainment_target`` of its requests within every objective ("this node takes N x the recorded
    traffic"); absent where the lane replayed no trace."""

    status: Literal["settled", "unsaturated", "undecided", "none"] = Field(
        description="settled: bracketed by a failing factor, its interval within 10 % of the answer; "
                    "unsaturated: every factor passed (a lower bound); undecided: the interval is wider (the "
                    "reason says why); none")
    reason: str | None
    max_factor: float | None = Field(description="N in \"this node takes N x the recorded traffic\"")
    interval: list[float | None] | None = Field(description="where the crossing can lie, in factors: from the "
                                                            "highest factor whose pass-paired attainment interval "
                                                            "lies at or above the target to the lowest whose "
                                                            "interval lies below it (null: no bound above)")
    recorded_rate_rps: float = Field(description="the replayed window's recorded rate (requests/s)")
    max_rate_rps: float | None = Field(description="max_factor x recorded_rate_rps")
    binding_objective: str | None = Field(description="what failed first above the answer: sustained, ttft, "
                                                      "tpot, pause, e2e or error")
    attainment_target: float
    sentence: str = Field(description="the answer in words")
    curve: list[TracePointModel] = Field(description="attainment against the speed factor, one point a rung")
    trace: TraceEvidenceModel = Field(description="the trace replayed (file sha256, size, window, synthesised)")
    notes: list[str] = Field(default_factory=list)
