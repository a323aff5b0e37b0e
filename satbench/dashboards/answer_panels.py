"""The overview dashboard's panels about the selected run's answer, by section: the answer itself (stat
panels), the figures at the recommended rung against the policy, per rung of the run (bar charts), and its
open-loop rates. The live series and the relay's node-vs-client panels are ``satbench.dashboards.panels``;
every query is built in ``satbench.dashboards.shapes``/``core.promql``, with ``node`` kept beside ``lane``."""


from typing import Any

from satbench.core import promql
from satbench.dashboards.shapes import (
    BY_LANE,
    INSTANCE,
    LANE,
    NODE,
    VALIDITY_UNKNOWN,
    Objective,
    Target,
    at_recommended,
    by_lane,
    lane_target,
    objectives,
    rung_chart,
    stat_panel,
    state_mappings,
    validity,
)

__all__ = [
    "agents_per_kw_panel",
    "agents_stat_panel",
    "attainment_rate_panel",
    "goodput_rate_panel",
    "itl_at_n_panel",
    "itl_rung_panel",
    "jain_at_n_panel",
    "max_rate_stat_panel",
    "pause_at_n_panel",
    "pause_rung_panel",
    "recommended_stat_panel",
    "requests_at_n_panel",
    "runtime_up_panel",
    "saturation_stat_panel",
    "stale_stat_panel",
    "status_stat_panel",
    "throughput_at_n_panel",
    "throughput_rung_panel",
    "ttft_at_n_panel",
    "ttft_rate_panel",
    "ttft_rung_panel",
    "validity_stat_panel",
    "verdicts_stat_panel",
]


# --- the answer: stat panels --------------------------------------------------------------------------------


def recommended_stat_panel() -> dict[str, Any]:
    return stat_panel(
        "Recommended concurrency",
        [lane_target(promql.max_by("satbench_recommended_concurrency", BY_LANE, NODE, LANE))],
        "short",
        "The recommender's answer per node and lane (GET /recommendations): the most requests in flight that "
        "still buy throughput while every objective and verdict held. Cap the router's in-flight limit here, "
        "while \"Answer validity\" says valid.",
        decimals=0,
    )


def validity_stat_panel() -> dict[str, Any]:
    return stat_panel(
        "Answer validity",
        [lane_target(validity())],
        "short",
        "Per node and lane, whether the answer still holds for what the node runs now: valid (the live "
        "fingerprint matches the measured one), changed (measured on something else: another build, model, "
        "slot count or GPU; the answer is served stale until the lane is measured again), or unknown (nothing "
        "to compare) (satbench_recommendation_valid, satbench_recommendation_validity).",
        mappings=state_mappings(("1", "valid", "green"), ("0", "changed", "red"),
                                (f"{VALIDITY_UNKNOWN:g}", "unknown", "text")),
    )


def saturation_stat_panel() -> dict[str, Any]:
    return stat_panel(
        "Saturation concurrency",
        [lane_target(promql.max_by("satbench_saturation_concurrency", BY_LANE, NODE, LANE))],
        "short",
        "Where throughput stopped paying per doubling. No value: the ladder ended before saturation (status "
        "unsaturated), and the recommended figure is a lower bound.",
        decimals=0,
    )


def status_stat_panel() -> dict[str, Any]:
    return stat_panel(
        "Answer per lane",
        [lane_target(promql.max_by("satbench_recommendation_status", by_lane("status", "binding_constraint"),
                                   NODE, LANE),
                     "{{status}}, bound by {{binding_constraint}}", separator=": ", instant=True)],  # the current one
        "short",
        "The document's status per node and lane (ok: settled; unsaturated: a lower bound, the ladder ended while "
        "throughput still grew; insufficient_data, degraded, stale) and the constraint that binds the answer "
        "(satbench_recommendation_status).",
        text_mode="name",
    )


def verdicts_stat_panel() -> dict[str, Any]:
    return stat_panel(
        "Verdicts",
        [lane_target(promql.aggregate("min", by_lane("check"), promql.selector("satbench_verdict_ok", NODE, LANE)),
                     "{{check}}")],
        "short",
        "Per node, lane and check, whether every measured rung passed: decode starvation (each request's longest "
        "pause, p99, against slo.tbt_p99_s), prefill starvation (queued waits against the FIFO bound), "
        "fairness (users' waits and pace, significant and material) (satbench_verdict_ok).",
        mappings=state_mappings(("1", "ok", "green"), ("0", "flagged", "red")),
    )


def stale_stat_panel() -> dict[str, Any]:
    return stat_panel(
        "Answer state",
        [Target(promql.selector("satbench_recommendations_stale"), "recommender")],
        "short",
        "Whether the recommender serves a fresh answer or its last good one while Prometheus is unreachable "
        "(satbench_recommendations_stale).",
        mappings=state_mappings(("0", "fresh", "green"), ("1", "stale", "red")),
    )


def runtime_up_panel() -> dict[str, Any]:
    return stat_panel(
        "Runtime up",
        [lane_target(promql.max_by("runtime_up", by_lane("instance"), NODE, LANE, INSTANCE), "{{instance}}")],
        "short",
        "Per lane's exporter (its scrape target, instance): up when it could read the runtime at its last "
        "scrape.",
        mappings=state_mappings(("0", "down", "red"), ("1", "up", "green")),
    )


# --- at the recommended rung: stat panels against the policy -------------------------------------------------


def _at_n(title: str, figure: str, unit: str, description: str, objective: Objective | None = None,
          decimals: int | None = None) -> dict[str, Any]:
    target = lane_target(at_recommended(figure), "(c={{concurrency}})", instant=True)
    return stat_panel(title, [target], unit, description, objective=objective, decimals=decimals, width=4)


def throughput_at_n_panel() -> dict[str, Any]:
    return _at_n("Output tok/s at the answer", "throughput_tok_s", "suffix:tok/s",
                 "Output tokens per second the recommended rung of the selected run measured (its records).")


def requests_at_n_panel() -> dict[str, Any]:
    return _at_n("Requests/s at the answer", "requests_per_s", "reqps",
                 "Requests finished per second at the recommended rung.")


def ttft_at_n_panel() -> dict[str, Any]:
    return _at_n("TTFT p95 at the answer", "ttft_s.p95", "s",
                 "Time to first token, p95 over the recommended rung's requests; red past the policy's "
                 "slo.ttft_p95_s.", objectives().get("ttft"))


def itl_at_n_panel() -> dict[str, Any]:
    return _at_n("ITL p95 at the answer", "itl_s.p95", "s",
                 "Inter-token latency p95 at the recommended rung; red past slo.itl_p95_s.", objectives().get("itl"))


def pause_at_n_panel() -> dict[str, Any]:
    return _at_n("Longest pause p99 at the answer", "pause_s.p99", "s",
                 "Each request's longest pause between two tokens, p99 over the recommended rung's requests: the "
                 "decode-starvation verdict's figure; red past slo.tbt_p99_s.", objectives().get("pause"))


def jain_at_n_panel() -> dict[str, Any]:
    return _at_n("Jain's index at the answer", "jain", "percentunit",
                 "Jain's index of the users' output tokens at the recommended rung (1 is perfectly fair); "
                 "coloured against jain_min when the policy sets one.", objectives().get("jain"), decimals=1)


# --- per rung of the selected run: bar charts ----------------------------------------------------------------


def throughput_rung_panel() -> dict[str, Any]:
    return rung_chart("Output throughput per rung", "throughput_tok_s", "suffix:tok/s",
                       "Output tokens per second of each rung of the selected run (run_id), per node and lane: "
                       "where the bars stop growing is saturation.")


def ttft_rung_panel() -> dict[str, Any]:
    return rung_chart("TTFT p95 per rung", "ttft_s.p95", "s",
                       "Time to first token p95 of each rung; the dashed line is the policy's slo.ttft_p95_s.",
                       objectives().get("ttft"))


def itl_rung_panel() -> dict[str, Any]:
    return rung_chart("ITL p95 per rung", "itl_s.p95", "s",
                       "Inter-token latency p95 of each rung; the dashed line is slo.itl_p95_s.",
                       objectives().get("itl"))


def pause_rung_panel() -> dict[str, Any]:
    return rung_chart("Longest pause p99 per rung", "pause_s.p99", "s",
                       "Each request's longest pause between tokens, p99 over the rung's requests; the dashed line "
                       "is slo.tbt_p99_s, the decode-starvation objective.", objectives().get("pause"))


# --- concurrent agents ---------------------------------------------------------------------------------------


def agents_stat_panel() -> dict[str, Any]:
    return stat_panel(
        "Concurrent agents at the tier",
        [lane_target(promql.max_by("satbench_max_agent_sessions", BY_LANE, NODE, LANE))],
        "short",
        "The agent answer per node and lane: the most concurrent agent session trees held at the tier (the p95 of "
        "the turns' TTFT within its ceiling, the p25 of their output speed above its floor), played end to start "
        "(satbench_max_agent_sessions). Only where the run walked agent sessions (satbench run --agents).",
        decimals=0,
    )


def agents_per_kw_panel() -> dict[str, Any]:
    return stat_panel(
        "Agent output tok/s per kW",
        [lane_target(promql.max_by("satbench_answer_tokens_per_s_per_kw", BY_LANE, NODE, LANE, answer="agents"))],
        "short",
        "Output tokens per second per kilowatt drawn at the agent answer's rung (the draw read over its window; "
        "scope: the lane's GPUs, else the CPU package). Absent without an energy reading.",
        decimals=0,
    )


# --- open-loop rates of the selected run -------------------------------------------------------------------


def max_rate_stat_panel() -> dict[str, Any]:
    return stat_panel(
        "Max rate within objectives",
        [lane_target(promql.max_by("satbench_max_rate_rps", BY_LANE, NODE, LANE))],
        "reqps",
        "The rate answer per node and lane: the highest open-loop request rate served with at least the "
        "policy's attainment_target of requests meeting every objective (satbench_max_rate_rps; x 60 is "
        "LiteLLM's rpm). Only where the run walked open-loop rates (satbench run --arrival).",
        decimals=2,
    )


def attainment_rate_panel() -> dict[str, Any]:
    return rung_chart("Attainment per offered rate", "attainment", "percentunit",
                      "Share of each open-loop rung's requests that met every objective (TTFT and e2e from the "
                      "intended send time, TPOT, pause), per rate asked (rate_rps); the dashed line is the "
                      "policy's attainment_target.", objectives().get("attainment"), x="rate_rps")


def ttft_rate_panel() -> dict[str, Any]:
    return rung_chart("TTFT p95 from the intended send, per rate", "ttft_intended_s.p95", "s",
                      "Open loop: time to first token counted from when each request was meant to be sent, so a "
                      "client or server stall cannot hide it (coordinated omission); the dashed line is "
                      "slo.ttft_p95_s.", objectives().get("ttft"), x="rate_rps")


def goodput_rate_panel() -> dict[str, Any]:
    return rung_chart("Goodput per offered rate", "goodput_rps", "reqps",
                      "Requests per second that met every objective, per open-loop rung (rate_rps): where it "
                      "stops following the rate asked, the lane is past its rate answer.", x="rate_rps")
