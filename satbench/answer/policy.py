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

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from satbench.core.objectives import Objectives

__all__ = ["SLO", "Cost", "Policy", "objectives_of"]


def _f(default: Any, description: str, **bounds: Any) -> Any:
    return Field(default=default, description=description, **bounds)


class SLO(BaseModel):
    """Latency objectives; ``None`` means not checked.

    ``tbt_p99_s`` is the time-between-tokens objective that decode starvation is judged against, in time a
    user feels: the p99 over a rung's requests of each request's *pause excess*, how much longer than its
    own decode step another request's prefill held it (``core.stalls``). A decode that is slow everywhere
    has no excess: its cadence is the ITL objective's business (``itl_p95_s``), at c=1 as at any rung. The
    default, 0.25 s, is a hold a reader of a token stream notices (a stream at 20-50 ms per token is read as
    continuous; a quarter-second hold is a visible stutter), and it is where the serving literature's relaxed
    objectives sit: Sarathi-Serve (Agrawal et al., OSDI 2024) states P99 TBT objectives as 5x (strict) and
    25x (relaxed) a decode-only iteration, 25x of a 10 ms iteration being 250 ms; DistServe (Zhong et al.,
    OSDI 2024) uses absolute TPOT objectives of 0.1-0.2 s per token for chat. The policy's
    ``max_pause_ratio`` (5x, the strict objective) judges the same excess against the lane's own step, so a
    whole-prompt prefill that holds decodes ten times their step is starvation on a fast machine as on a
    slow one (``Policy``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    ttft_p95_s: float | None = _f(2.0, "TTFT p95 objective, seconds (null: unchecked)", gt=0)
    itl_p95_s: float | None = _f(0.2, "inter-token latency p95 objective, seconds (null: unchecked)", gt=0)
    e2e_p95_s: float | None = _f(None, "end-to-end latency p95 objective, seconds (null: unchecked)", gt=0)
    ttft_per_1k_prompt_s: float = _f(0.0, "TTFT a request may take per thousand prompt tokens beyond ttft_p95_s, "
                                          "seconds, in its own objective (goodput: core.objectives): a deadline "
                                          "that grows with the prompt, as Etalon and Andes argue; 0: one deadline",
                                     ge=0)
    tbt_p99_s: float | None = _f(0.25, "objective on the p99 over requests of each one's pause excess (how much "
                                       "longer than its decode step another request's prefill held it), seconds: "
                                       "decode starvation (null: unchecked)", gt=0)
    tpot_p95_s: float | None = _f(None, "TPOT p95 objective over requests, seconds: each request's mean pace of "
                                        "its tokens after the first (DistServe's per-request TPOT; vLLM bench "
                                        "serve's goodput tpot), held by 95 % of a rung's requests (null: "
                                        "unchecked, and goodput holds a request's TPOT to itl_p95_s)", gt=0)


class Cost(BaseModel):
    """What a node costs to run, for the cost of a million output tokens at each answer (``core.energy``): the
    price per hour of the node (its hardware amortised plus its power and hosting, or a cloud rate), in
    ``currency``. Null: no cost figures; no price is ever assumed."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    price_per_hour: float | None = _f(None, "the price of a node per hour (null: no cost figures)", gt=0)
    node_price_per_hour: dict[str, Annotated[float, Field(gt=0)]] = Field(
        default_factory=dict, description="per node name, the price per hour where it differs from price_per_hour "
                                          "(a fleet of several GPU classes)")
    currency: str = _f("USD", "the currency of the prices (a code such as USD or EUR)", min_length=1, max_length=8,
                       pattern=r"^[A-Za-z]+$")

    def price(self, node: str) -> float | None:
        """The price per hour of ``node``."""
        return self.node_price_per_hour.get(node, self.price_per_hour)


class Policy(BaseModel):
    """The policy as configuration and as it appears in the recommendations document."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    min_gain_per_doubling: float = _f(0.10, "least relative throughput gain a doubling must still buy", ge=0)
    slo: SLO = Field(default_factory=SLO)
    # decode starvation (bounded wait, judged against slo.tbt_p99_s)
    max_pause_ratio: float | None = _f(
        None, "bound on a prefill-held pause over the lane's decode step (the hold may reach (ratio - 1) steps, "
              "never less than min_pause_excess_s): Sarathi-Serve's strict P99 TBT objective is 5x a "
              "decode-only iteration, the relaxed one 25x; null: not bound by a ratio (a ratio moves with the "
              "hardware: a CPU's 3 ms step makes a chunked prefill's 90 ms hold 30x)", gt=1)
    min_pause_excess_s: float = _f(
        0.1, "least hold that counts as starvation when it grows with the prompt (a whole-prompt prefill), "
             "seconds: 0.1 s, the limit of a response that feels immediate (Card, Moran and Newell 1983; Nielsen "
             "1993); a hold that does not grow with the prompt (a chunked prefill) counts only past "
             "slo.tbt_p99_s", ge=0)
    unbounded_stall_elasticity: float = _f(
        0.8, "least elasticity of a prefill's hold in its prompt's length that makes the hold unbounded in the "
             "prompt (a whole-prompt prefill: about 1; one chunked at C tokens: log(C/short)/log(long/short), "
             "0.4-0.6 for 256-token chunks between 64- and 1500-token prompts)", gt=0)
    min_pause_requests: int = _f(10, "requests with a pause a rung needs for a decode-starvation verdict", ge=1)
    min_prefill_events: int = _f(3, "prefills beside a decode a rung needs for a decode-starvation verdict", ge=1)
    # prefill interference (reported and warned about; binding only when max_interference_share is set)
    interference_warn_share: float = _f(0.25, "share of decode time lost to others' prefills that is warned "
                                              "about", ge=0, le=1)
    max_interference_share: float | None = _f(None, "bound on that share (null: not binding)", ge=0, le=1)
    # prefill starvation (admission against the FIFO bound)
    max_admission_wait_ratio: float = _f(1.5, "largest queued request's wait over the bound FIFO admission "
                                              "implies (timing slack above 1)", ge=1)
    min_admission_overrun_s: float = _f(
        0.1, "least wait past the FIFO bound that counts as prefill starvation, seconds: a shorter overrun is "
             "not felt (0.1 s, as min_pause_excess_s) and is what a loaded host's late wake-up adds to a FIFO "
             "admission whose bound was a few tens of ms; a request passed over waits a whole release more",
        ge=0)
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
    memory_headroom_min_ratio: float = _f(0.05, "least free fraction of each GPU's memory at the peak; binds only "
                                                "where the rung filled it (a runtime that allocates its memory "
                                                "when it starts, as llama.cpp does, is flat across rungs: "
                                                "reported, not a concurrency limit)", ge=0, le=1)
    kv_usage_max_ratio: float = _f(0.95, "fullest the runtime's KV cache may be at a rung (tokens held by "
                                         "processing slots over its capacity): past it, admissions wait for "
                                         "KV space", gt=0, le=1)
    min_requests_per_step: int = _f(10, "requests a step window needs to count", ge=1)
    max_throughput_ci_ratio: float = _f(0.25, "largest interval half-width / mean for a stable step", gt=0)
    attainment_target: float = _f(0.9, "least share of requests that must attain every per-request objective at "
                                       "a rate for the lane to sustain it (goodput; DistServe's 90 %)", gt=0, le=1)
    drift_floor: float = _f(0.25, "least change of the node's speed during a lane's walk that counts as drift "
                                  "(core.drift): a re-measure of the lowest rung whose throughput interval lies "
                                  "beyond 1 +- this, or a doubling that lost more than 1 - 1/(1 + this) with every "
                                  "request admitted; 0.25: a 20 % drift moves no decision the rungs' own noise "
                                  "does not already leave open, a step time that grows by half is seen", gt=0)
    on_drift: Literal["withhold", "report"] = _f(
        "withhold", "what a drifted lane answers: withhold (status degraded, no recommended concurrency, the reason "
                    "names the drift: measure the lane again on a quiet node) or report (the answer kept, its drift "
                    "said beside it)")
    confidence: float = _f(0.95, "confidence level of every interval and test the verdicts use (throughput and "
                                 "gain intervals; a quantile objective is broken when significantly more "
                                 "requests than its share exceed it, at 1 - confidence)", gt=0, lt=1)
    cost: Cost = Field(default_factory=Cost, description="node prices, for the cost per million tokens at each answer")


def objectives_of(policy: Policy) -> Objectives:
    """The per-request objectives of ``policy`` (``core.objectives``): TTFT within ``slo.ttft_p95_s`` (plus
    ``ttft_per_1k_prompt_s`` per thousand prompt tokens), the request's TPOT within ``slo.tpot_p95_s`` (where it
    is unset, ``slo.itl_p95_s``: a request whose mean pace is slower than the gaps' objective), its pause
    excess within ``slo.tbt_p99_s`` and its e2e within ``slo.e2e_p95_s``: each rung-level objective held by every
    request, which is what a request-level SLO means (DistServe)."""
    slo = policy.slo
    tpot_s = slo.itl_p95_s if slo.tpot_p95_s is None else slo.tpot_p95_s
    return Objectives(ttft_s=slo.ttft_p95_s, ttft_s_per_1k_prompt=slo.ttft_per_1k_prompt_s, tpot_s=tpot_s,
                      pause_excess_s=slo.tbt_p99_s, e2e_s=slo.e2e_p95_s)
