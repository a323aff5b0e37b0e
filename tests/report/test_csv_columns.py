"""``steps.csv``'s figure columns, read from ``StepFigures``' declarations (``report.exports``).

Truth: the columns as they were listed by hand before the declarations (column, attribute, scale: seconds
as ms), copied here once; the column order is the file's, so it must not move.
"""

from __future__ import annotations

from satbench.report import exports

QUANTILES = (("ttft", "ttft_s"), ("itl", "itl_s"), ("tpot", "tpot_s"), ("e2e", "latency_s"), ("queue", "queue_s"),
             ("pause", "pause_s"))
STATS = ("mean", "p50", "p95", "p99")
STEP_SCALARS = (
    ("occupancy_ratio", "occupancy_ratio", 1.0), ("queue_depth_avg", "queue_depth_avg", 1.0), ("jain", "jain", 1.0),
    ("max_min_share", "max_min_share", 1.0), ("decode_stall_max_ms", "decode_stall_max_s", 1000.0),
    ("decode_stall_max_ratio", "decode_stall_max_ratio", 1.0), ("prefill_wait_max_ms", "prefill_wait_max_s", 1000.0),
    ("pause_requests", "pause_requests", 1.0), ("prefill_events", "prefill_events", 1.0),
    ("interference_share", "interference_share", 1.0), ("stall_per_prompt_ms", "stall_per_prompt_s", 1000.0),
    ("stall_ms_per_prompt_token", "stall_ms_per_prompt_token", 1.0), ("queued_requests", "queued_requests", 1.0),
    ("admission_wait_max_ms", "admission_wait_max_s", 1000.0),
    ("admission_wait_bound_ms", "admission_wait_bound_s", 1000.0), ("user_wait_p_value", "user_wait_p_value", 1.0),
    ("user_wait_ratio", "user_wait_ratio", 1.0), ("user_wait_excess_ms", "user_wait_excess_s", 1000.0),
    ("user_itl_p_value", "user_itl_p_value", 1.0), ("user_itl_ratio", "user_itl_ratio", 1.0),
    ("user_itl_excess_ms", "user_itl_excess_s", 1000.0), ("cache_hit_share", "cache_hit_share", 1.0),
    ("cached_prompt_tokens", "cached_prompt_tokens", 1.0),
    ("cache_reported_prompt_tokens", "cache_reported_prompt_tokens", 1.0),
    ("spec_acceptance_rate", "spec_acceptance_rate", 1.0), ("draft_tokens", "draft_tokens", 1.0),
    ("draft_accepted_tokens", "draft_accepted_tokens", 1.0),
)


def test_the_figure_columns_are_the_hand_listed_ones_in_their_order() -> None:
    expected: list[tuple[str, str, str | None, float]] = [
        (f"{short}_ms_{stat}", attr, stat, 1000.0) for short, attr in QUANTILES for stat in STATS]
    expected += [(column, attr, None, scale) for column, attr, scale in STEP_SCALARS]
    assert list(exports._FIGURE_COLUMNS) == expected
    cols = exports.STEPS_COLUMNS
    start = cols.index("requests_per_s") + 1
    assert cols[start:start + len(expected)] == tuple(c for c, _, _, _ in expected)
    assert cols[start + len(expected)] == "gpu_mem_max_bytes"
