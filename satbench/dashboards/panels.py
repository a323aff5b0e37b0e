"""The overview dashboard's panels, one factory per panel, by section: the answer (stat panels), the figures
at the recommended rung, per rung of the selected run (bar charts), the live series, and node vs client
(the exporter's relay mode). Every query is built in ``satbench.dashboards.shapes``/``core.promql``.

Every per-lane query keeps ``node`` beside ``lane`` (``BY_LANE``, ``by_lane``) and is filtered by the ``node``
and ``lane`` variables (``NODE``, ``LANE``); the exporter's own series also by ``instance`` (``INSTANCE``, the
scrape target). ``lane_target`` names the node of node-less lanes ``local`` in the result, so legends read
``{{node}}/{{lane}}``."""

from __future__ import annotations

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
    error_ratio,
    lane_target,
    objectives,
    only_relay_lanes,
    quantile_targets,
    rung_chart,
    stat_panel,
    state_mappings,
    timeseries_panel,
    validity,
)

__all__ = [
    "attainment_rate_panel",
    "decode_stall_panel",
    "e2e_panel",
    "fairness_panel",
    "goodput_rate_panel",
    "itl_at_n_panel",
    "itl_panel",
    "itl_rung_panel",
    "jain_at_n_panel",
    "kv_cache_panel",
    "max_rate_stat_panel",
    "memory_panel",
    "node_e2e_panel",
    "node_itl_panel",
    "node_queue_panel",
    "node_requests_panel",
    "node_ttft_panel",
    "occupancy_panel",
    "pause_at_n_panel",
    "pause_rung_panel",
    "queue_depth_panel",
    "queue_time_panel",
    "recommendation_panel",
    "recommended_stat_panel",
    "requests_at_n_panel",
    "requests_panel",
    "rung_panel",
    "runtime_up_panel",
    "saturation_stat_panel",
    "slot_states_panel",
    "stale_stat_panel",
    "status_stat_panel",
    "throughput_at_n_panel",
    "throughput_panel",
    "throughput_rung_panel",
    "ttft_at_n_panel",
    "ttft_panel",
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


# --- live series --------------------------------------------------------------------------------------------


def throughput_panel() -> dict[str, Any]:
    return timeseries_panel(
        "Throughput (output tokens/s)",
        [
            lane_target(promql.selector("lane:loadgen_output_tokens:rate10s", NODE, LANE), "received (client)"),
            lane_target(promql.sum_rate_by("runtime_output_tokens_total", BY_LANE, NODE, LANE, INSTANCE),
                        "generated (runtime)"),
        ],
        "suffix:tok/s",
        "Output tokens per second per node and lane: received by the load generator (10 s rate), generated by "
        "the runtime (the selected exporter instances).",
    )


def requests_panel() -> dict[str, Any]:
    return timeseries_panel(
        "Requests/s by outcome",
        [
            lane_target(promql.sum_rate_by("loadgen_requests_total", by_lane("outcome"), NODE, LANE), "{{outcome}}"),
            lane_target(error_ratio("loadgen_requests_total", NODE, LANE), "error ratio",
                        unit="percentunit", axis="right", max_value=1.0, objective=objectives().get("errors")),
        ],
        "reqps",
        "Finished requests per second; anything but outcome=ok is an error. The error ratio (right axis) has "
        "the policy's max_error_ratio as its dashed line.",
    )


def ttft_panel() -> dict[str, Any]:
    return timeseries_panel(
        "Time to first token",
        quantile_targets("loadgen_ttft_seconds"),
        "s",
        "TTFT quantiles (client side) per node and lane; the dashed line is the policy's p95 objective slo.ttft_p95_s.",
        objective=objectives().get("ttft"),
    )


def itl_panel() -> dict[str, Any]:
    return timeseries_panel(
        "Inter-token latency",
        quantile_targets("loadgen_itl_seconds"),
        "s",
        "Gaps between successive content tokens, quantiles per node and lane; the dashed line is slo.itl_p95_s.",
        objective=objectives().get("itl"),
    )


def e2e_panel() -> dict[str, Any]:
    return timeseries_panel(
        "End-to-end latency", quantile_targets("loadgen_e2e_seconds"), "s",
        "Request sent to last byte, per node and lane (a dashed line where the policy sets slo.e2e_p95_s).",
        objective=objectives().get("e2e"),
    )


def queue_time_panel() -> dict[str, Any]:
    return timeseries_panel(
        "Queue time",
        quantile_targets("loadgen_queue_seconds"),
        "s",
        "TTFT minus prompt processing: the wait for a slot and for the running batch step to end.",
    )


def queue_depth_panel() -> dict[str, Any]:
    return timeseries_panel(
        "Queue depth",
        [
            lane_target(promql.sum_by("runtime_queue_depth", BY_LANE, NODE, LANE, INSTANCE), "waiting (runtime)"),
            lane_target(promql.selector("lane:loadgen_in_flight:sum", NODE, LANE), "in flight (client)"),
        ],
        "short",
        "Requests waiting for a slot (runtime, the selected exporter instances) and requests in flight (load "
        "generator), per node and lane.",
    )


def occupancy_panel() -> dict[str, Any]:
    return timeseries_panel(
        "Batch occupancy",
        [
            lane_target(promql.selector("lane:runtime_batch_occupancy_ratio:avg10s", NODE, LANE), "busy slots / slots"),
            lane_target(promql.selector("lane:runtime_decode_occupancy_ratio:rate10s", NODE, LANE), "per decode step"),
        ],
        "percentunit",
        "Busy slots / total slots (scrape-time average) and busy slots per batched decode step.",
        max_value=1.0,
    )


def kv_cache_panel() -> dict[str, Any]:
    hits = promql.sum_rate_by("loadgen_cached_prompt_tokens_total", BY_LANE, NODE, LANE)
    prompts = promql.sum_rate_by("loadgen_prompt_tokens_total", BY_LANE, NODE, LANE)
    return timeseries_panel(
        "KV cache and prompt cache",
        [
            lane_target(promql.aggregate("avg", BY_LANE,
                                         promql.selector("runtime_kv_cache_usage_ratio", NODE, LANE, INSTANCE)),
                        "KV in use (runtime)"),
            lane_target(f"{hits} / {prompts}", "prompt cache hit share (client)"),
        ],
        "percentunit",
        "KV cache in use by running requests over its capacity (the exporter, from /slots; an idle slot's cached "
        "prompt counts as free), and the share of prompt tokens the runtime's prompt cache served, from the "
        "load generator's records (cached_tokens / prompt tokens of finished requests).",
        max_value=1.0,
    )


def slot_states_panel() -> dict[str, Any]:
    return timeseries_panel(
        "Slot states",
        [lane_target(promql.sum_by("runtime_slots", by_lane("state"), NODE, LANE, INSTANCE), "{{state}}")],
        "short",
        "Slots idle, in prefill and in decode (the selected exporter instances), stacked per node and lane.",
        stack=True,
    )


def memory_panel() -> dict[str, Any]:
    return timeseries_panel(
        "Memory",
        [
            lane_target(promql.sum_by("gpu_memory_used_bytes", BY_LANE, NODE, LANE, INSTANCE), "GPU used"),
            lane_target(promql.sum_by("gpu_memory_total_bytes", BY_LANE, NODE, LANE, INSTANCE), "GPU total"),
            lane_target(promql.sum_by("runtime_process_resident_memory_bytes", BY_LANE, NODE, LANE, INSTANCE),
                        "runtime RSS"),
        ],
        "bytes",
        "GPU memory (NVML, or the simulator's model of it: label simulated) and the runtime process's RSS per "
        "node and lane, summed over the selected exporter instances.",
    )


def fairness_panel() -> dict[str, Any]:
    return timeseries_panel(
        "Fairness (Jain's index over users)",
        [lane_target(promql.selector("lane:loadgen_output_tokens:jain_index30s", NODE, LANE))],
        "percentunit",
        "Jain's index of per-user output token rates over 30 s: 100 % is perfectly fair, 1/n is one user "
        "served (a dashed line where the policy sets jain_min).",
        max_value=1.0,
        objective=objectives().get("jain"),
    )


def decode_stall_panel() -> dict[str, Any]:
    return timeseries_panel(
        "Decode stalls",
        [
            *quantile_targets("loadgen_decode_stall_seconds"),
            lane_target(promql.sum_rate_by("loadgen_decode_stall_seconds_count", BY_LANE, NODE, LANE), "stalls/s",
                        unit="cps", axis="right"),
        ],
        "s",
        "Longest inter-token gaps of decoding requests while another request was in prefill (p99, left) and "
        "how many per second (right); the dashed line is slo.tbt_p99_s, the objective each request's "
        "longest pause is judged against.",
        objective=objectives().get("pause"),
    )


def rung_panel() -> dict[str, Any]:
    return timeseries_panel(
        "Current rung (concurrency)",
        [
            lane_target(promql.max_by("loadgen_step_concurrency", BY_LANE, NODE, LANE)),
        ],
        "short",
        "Concurrency of the step window in progress (0 outside a window).",
    )


def recommendation_panel() -> dict[str, Any]:
    return timeseries_panel(
        "Recommended and saturation concurrency",
        [
            lane_target(promql.max_by("satbench_recommended_concurrency", BY_LANE, NODE, LANE), "recommended"),
            lane_target(promql.max_by("satbench_saturation_concurrency", BY_LANE, NODE, LANE), "saturation"),
        ],
        "short",
        "The recommender's answer per node and lane over time (GET /recommendations).",
    )


# --- node vs client: the exporter's relay mode ----------------------------------------------------------------


def _node_vs_client(metric: str) -> list[Target]:
    """Node-side quantiles (exporter relay mode) and the client's p95 of the same latency, same buckets, both
    only for lanes with relay data."""
    node = promql.selector(promql.quantile_rule(f"runtime_{metric}_seconds"), NODE, LANE)
    client = promql.selector(promql.quantile_rule(f"loadgen_{metric}_seconds"), NODE, LANE, quantile="0.95")
    return [lane_target(node, "node p{{quantile}}"), lane_target(only_relay_lanes(client), "client p0.95")]


_GENERATION = promql.Matcher("route", "!=", "other")  # the relay's generation routes
_RELAY_NOTE = " Only lanes whose exporter relays (lane option relay = true, or satbench exporter --relay) appear."


def node_ttft_panel() -> dict[str, Any]:
    return timeseries_panel(
        "TTFT at the node vs the client",
        _node_vs_client("ttft"),
        "s",
        "Time to first token measured at the relay (--relay), beside the load generator's p95: the gap is "
        "what lies between them (network, client)." + _RELAY_NOTE,
        objective=objectives().get("ttft"),
    )


def node_itl_panel() -> dict[str, Any]:
    return timeseries_panel(
        "Inter-token latency at the node vs the client",
        _node_vs_client("itl"),
        "s",
        "Token gaps as the relay forwarded them, beside the load generator's p95." + _RELAY_NOTE,
        objective=objectives().get("itl"),
    )


def node_e2e_panel() -> dict[str, Any]:
    return timeseries_panel(
        "End-to-end latency at the node vs the client",
        _node_vs_client("e2e"),
        "s",
        "Request received to last byte forwarded at the relay, beside the load generator's p95." + _RELAY_NOTE,
        objective=objectives().get("e2e"),
    )


def node_queue_panel() -> dict[str, Any]:
    return timeseries_panel(
        "Queue time at the node vs the client",
        _node_vs_client("queue"),
        "s",
        "Time waiting for a slot (server timings) for every request through the relay, beside the load "
        "generator's p95 for its own requests." + _RELAY_NOTE,
    )


def node_requests_panel() -> dict[str, Any]:
    return timeseries_panel(
        "Requests/s at the node vs the client",
        [
            lane_target(
                promql.sum_rate_by("runtime_relay_requests_total", by_lane("outcome"), NODE, LANE, INSTANCE,
                                   _GENERATION),
                "node {{outcome}}",
            ),
            lane_target(error_ratio("runtime_relay_requests_total", NODE, LANE, INSTANCE, _GENERATION),
                        "node error ratio", unit="percentunit", axis="right", max_value=1.0,
                        objective=objectives().get("errors")),
            lane_target(only_relay_lanes(promql.selector("lane:loadgen_requests:rate10s", NODE, LANE)),
                        "client finished"),
        ],
        "reqps",
        "Generation requests through the relay by outcome (cancelled: the client left first), beside the "
        "requests the load generator finished; more at the node means other clients share it. The error "
        "ratio is on the right axis." + _RELAY_NOTE,
    )
