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
    """Latency objectives; ``None`` means not checked.

    ``tbt_p99_s`` is the time-between-tokens objective that decode starvation is judged against: the p99
    over a rung's requests of each request's longest pause between two tokens. Its default, 0.25 s, is a
    pause a reader of a token stream notices (a stream at 20-50 ms per token is read as continuous; a
    quarter-second hold is a visible stutter), and it is where the serving literature's relaxed objectives
    sit: Sarathi-Serve (Agrawal et al., OSDI 2024) states P99 TBT objectives as 5x (strict) and 25x
    (relaxed) a decode-only iteration, 25x of a 10 ms iteration being 250 ms; DistServe (Zhong et al., OSDI
    2024) uses absolute TPOT objectives of 0.1-0.2 s per token for chat, and a single pause may be longer
    than a mean. A few tens of milliseconds is never starvation, whatever its ratio to a fast step.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    ttft_p95_s: float | None = _f(2.0, "TTFT p95 objective, seconds (null: unchecked)", gt=0)
    itl_p95_s: float | None = _f(0.2, "inter-token latency p95 objective, seconds (null: unchecked)", gt=0)
    e2e_p95_s: float | None = _f(None, "end-to-end latency p95 objective, seconds (null: unchecked)", gt=0)
    tbt_p99_s: float | None = _f(0.25, "objective on the p99 over requests of each one's longest pause between "
                                       "tokens, seconds: decode starvation (null: unchecked)", gt=0)


class Policy(BaseModel):
    """The policy as configuration and as it appears in the recommendations document."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    min_gain_per_doubling: float = _f(0.10, "least relative throughput gain a doubling must still buy", ge=0)
    slo: SLO = Field(default_factory=SLO)
    # decode starvation (bounded wait, judged against slo.tbt_p99_s)
    max_pause_ratio: float | None = _f(
        None, "bound on the pause p99 over the lane's decode-only iteration (its c=1 ITL p50); Sarathi-Serve's "
              "5 (strict) or 25 (relaxed); null: reported, not binding", gt=1)
    min_pause_requests: int = _f(10, "requests with a pause a rung needs for a decode-starvation verdict", ge=1)
    min_prefill_events: int = _f(3, "prefills beside a decode a rung needs for a decode-starvation verdict", ge=1)
    # prefill interference (reported and warned about; binding only when max_interference_share is set)
    interference_warn_share: float = _f(0.25, "share of decode time lost to others' prefills that is warned "
                                              "about", ge=0, le=1)
    max_interference_share: float | None = _f(None, "bound on that share (null: not binding)", ge=0, le=1)
    # prefill starvation (admission against the FIFO bound)
    max_admission_wait_ratio: float = _f(1.5, "largest queued request's wait over the bound FIFO admission "
                                              "implies (timing slack above 1)", ge=1)
    min_queued_requests: int = _f(3, "queued requests a rung needs for a prefill-starvation verdict", ge=1)
    prefill_wait_max_s: float | None = _f(None, "absolute bound on the longest wait for a first token, seconds "
                                                "(null: unchecked)", gt=0)
    # fairness (users' waits: significant and material)
    fairness_alpha: float = _f(0.001, "significance level of the test that users' waits differ", gt=0, lt=1)
    max_user_wait_ratio: float = _f(1.5, "largest worst user's mean wait over the lane's mean, where the "
                                         "difference is significant", ge=1)
    min_user_wait_gap_s: float = _f(0.1, "least excess of the worst user's mean wait over the lane's, seconds, "
                                         "for it to be unfair: 0.1 s, the limit of a reply that feels immediate "
                                         "(Nielsen 1993); a few ms between users in lock-step is not unfair", ge=0)
    min_user_itl_gap_s: float = _f(0.005, "least excess of the slowest user's decode pace (mean of its requests' "
                                          "median gaps) over the fastest's, seconds: 5 ms a token is a quarter "
                                          "second over a 50-token answer", ge=0)
    max_user_itl_ratio: float = _f(1.5, "largest slowest user's decode pace over the fastest's, where the "
                                        "difference is significant", ge=1)
    jain_min: float | None = _f(None, "least Jain's index over per-user output tokens (null: reported, not "
                                      "binding: request lengths move it)", ge=0, le=1)
    max_min_share_max: float | None = _f(None, "largest best/worst user token ratio (null: unchecked)", ge=1)
    queue_p99_max_s: float | None = _f(None, "bound on the queue-wait p99, seconds (null: unchecked)", gt=0)
    max_error_ratio: float = _f(0.01, "largest tolerated failed/all requests", ge=0, le=1)
    memory_headroom_min_ratio: float = _f(0.05, "least free fraction of GPU memory at the peak", ge=0, le=1)
    min_requests_per_step: int = _f(10, "requests a step window needs to count", ge=1)
    max_throughput_ci_ratio: float = _f(0.25, "largest interval half-width / mean for a stable step", gt=0)
    confidence: float = _f(0.95, "confidence level of throughput intervals", gt=0, lt=1)
