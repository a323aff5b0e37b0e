"""``core.figures``' lists derived from the declarations on ``StepFigures``' fields (``figure``).

Truth: the lists as they were written by hand before the declarations, copied here once. Their order is
observable (the ``loadgen_step_figure`` series, ``steps.json``'s keys), so each derived list must equal its
literal, order and all; ``_COUNTS`` was only ever asked ``name in _COUNTS``, so it is held as a set.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from satbench.core import figures
from satbench.core.energy import EnergyFigures
from satbench.core.figures import FIGURES, MemoryFigures, Quantiles, StepFigures, Tail

QUANTILE_FIGURES = ("latency_s", "ttft_s", "itl_s", "tpot_s", "queue_s", "pause_s", "pause_excess_s",
                    "ttft_visible_s", "schedule_lag_s", "ttft_intended_s", "latency_intended_s")
TAIL_FIGURES = ("latency_tail", "ttft_tail", "pause_excess_tail", "pause_step_tail")
OPTIONAL_NUMBERS = (
    "pause_requests", "prefill_events", "interference_share", "stall_per_prompt_s", "stall_ms_per_prompt_token",
    "queued_requests", "admission_wait_max_s", "admission_wait_bound_s", "user_wait_p_value", "user_wait_ratio",
    "user_itl_p_value", "user_itl_ratio", "user_wait_excess_s", "user_itl_excess_s", "input_throughput_tok_s",
    "cache_hit_share", "cached_prompt_tokens", "cache_reported_prompt_tokens", "spec_acceptance_rate",
    "draft_tokens", "draft_accepted_tokens", "throughput_se_tok_s", "throughput_dof", "decode_step_s",
    "decode_step_gaps", "censored_requests", "admission_overruns", "admission_overrun_max_ratio", "users_unserved",
    "users_starved", "reasoning_requests", "tokens_per_event", "event_tokens_estimated", "turn_mean",
    "stall_prompt_elasticity", "rate_rps", "offered_rps",
    "backlog_growth_rps", "backlog_growth_se", "backlog_growth_dof", "judged_requests", "attained_requests",
    "goodput_rps", "goodput_tok_s", "attainment", "attainment_se", "attainment_dof", "waits_settled",
)
CLIENT_FIGURES = (
    "window_s", "requests", "errors", "throughput_tok_s", "requests_per_s", "latency_s", "ttft_s", "itl_s",
    "tpot_s", "queue_s", "jain", "max_min_share", "decode_stall_max_ratio", "decode_stall_max_s",
    "prefill_wait_max_s", "pause_s", "pause_excess_s", "ttft_visible_s", *TAIL_FIGURES[:3], *OPTIONAL_NUMBERS,
    "errors_by_outcome", "throughput_ci_tok_s", "schedule_lag_s", "ttft_intended_s", "latency_intended_s",
    "objective_misses", "decided_early", "itl_p95_low_s", "itl_p95_high_s", "itl_p95_dof", "pause_step_tail",
    "pause_steps_per_request",
)
COUNTS = ("requests", "errors", "errors_by_outcome", "pause_requests", "prefill_events", "queued_requests",
          "cached_prompt_tokens", "cache_reported_prompt_tokens", "draft_tokens", "draft_accepted_tokens",
          "decode_step_gaps", "censored_requests", "admission_overruns", "users_unserved", "users_starved",
          "reasoning_requests", "event_tokens_estimated", "judged_requests", "attained_requests", "objective_misses",
          "waits_settled", "decided_early")
# the step's own fields, not figures: which lane and rung, its memory (``MemoryFigures``), whether it counts
NOT_FIGURES = {"lane", "concurrency", "memory_bytes", "energy", "valid", "reason"}


def test_the_derived_lists_equal_the_hand_written_ones() -> None:
    assert figures.QUANTILE_FIGURES == QUANTILE_FIGURES
    assert figures.TAIL_FIGURES == TAIL_FIGURES
    assert figures.CLIENT_FIGURES == CLIENT_FIGURES
    assert set(COUNTS) == figures._COUNTS
    # the optional numbers ``from_dict`` read as they are, and the eight it named one by one
    assert set(figures._AS_READ) == {*OPTIONAL_NUMBERS, "occupancy_ratio", "queue_depth_avg", "jain",
                                     "max_min_share", "decode_stall_max_ratio", "decode_stall_max_s",
                                     "prefill_wait_max_s", "drift_reference", "decided_early", "itl_p95_low_s",
                                     "itl_p95_high_s", "itl_p95_dof", "pause_steps_per_request"}


def test_every_field_is_declared_and_every_rank_taken_once() -> None:
    names = {f.name for f in dataclasses.fields(StepFigures)}
    assert names - set(FIGURES) == NOT_FIGURES
    published = sorted(f.published for f in FIGURES.values() if f.published is not None)
    columns = sorted(f.column for f in FIGURES.values() if f.column is not None)
    assert published == list(range(len(published)))
    assert columns == list(range(len(columns)))
    kinds = {n: f.kind for n, f in FIGURES.items()}
    assert all(kinds[n] == "quantile" for n in QUANTILE_FIGURES) and all(kinds[n] == "tail" for n in TAIL_FIGURES)
    assert [n for n, k in kinds.items() if k in ("quantile", "tail")] == [
        n for n in FIGURES if n in QUANTILE_FIGURES or n in TAIL_FIGURES]


def _filled(f: dataclasses.Field[Any], i: int) -> Any:
    """A value for field ``f`` unlike its default (distinct per field, so a swapped field shows)."""
    kind = FIGURES[f.name].kind if f.name in FIGURES else None
    if kind == "quantile":
        return Quantiles(0.1 + i, 0.2 + i, 0.3 + i, 0.15 + i)
    if kind == "tail":
        return Tail(3 + i, (2.0 + i, 1.0 + i))
    if kind == "interval":
        return (1.0 + i, 2.0 + i)
    if f.type in ("int", "int | None"):
        return 7 + i
    if f.type == "dict[str, int]":
        return {"http": i}
    return {"lane": "a", "valid": False, "reason": "why",
            "memory_bytes": MemoryFigures(gpu_max=1.0, gpu_names="x"),
            "energy": EnergyFigures(gpu_joules=900.0, gpu_watts=30.0, gpu_source="samples", scope="gpu",
                                    joules_per_token=0.3, tokens_per_joule=1 / 0.3)}.get(f.name, 0.5 + i)


def test_every_field_survives_a_round_trip_through_the_document_form() -> None:
    step = StepFigures(**{f.name: _filled(f, i) for i, f in enumerate(dataclasses.fields(StepFigures))})
    data = step.to_dict()
    assert list(data) == [f.name for f in dataclasses.fields(StepFigures)]  # steps.json's key order
    assert StepFigures.from_dict(data) == step
