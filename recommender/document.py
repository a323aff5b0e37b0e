"""The recommendations document (schema ``satbench.recommendations/v1``) as plain JSON-ready dicts.

This module only arranges what the analysis found; it decides nothing. The field names are the contract of
DESIGN.md with capability reporting (``lanes.<lane>.recommended_concurrency`` is what consumers read);
fields beyond that contract are additions, never renames. ``mark_stale`` turns a last good document into the
one served while Prometheus is unreachable: every lane says ``stale`` and how old the answer is.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Mapping
from typing import Any

from recommender.analysis import LaneAnalysis
from recommender.policy import Policy

__all__ = ["SCHEMA_ID", "build_document", "iso_utc", "json_safe", "lane_fragment", "mark_stale"]

SCHEMA_ID = "satbench.recommendations/v1"


def json_safe(value: Any) -> Any:
    """``value`` with every non-finite float replaced by ``None`` (JSON has no NaN or infinity)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


def iso_utc(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def lane_fragment(analysis: LaneAnalysis, *, run_id: str, measured_at: float | None) -> dict[str, Any]:
    knee = analysis.knee
    pair = analysis.indistinguishable
    return {
        "status": analysis.status,
        "reason": analysis.reason,
        "recommended_concurrency": analysis.recommended_concurrency,
        "saturation_concurrency": analysis.saturation_concurrency,
        "binding_constraint": analysis.binding_constraint,
        "throughput_at_recommended_tok_s": analysis.throughput_at_recommended_tok_s,
        "fairness": analysis.fairness_summary(),
        "starvation": analysis.starvation_summary(),
        "knee": None if knee is None else {
            "method": knee.method, "concurrency": knee.concurrency, "difference": knee.difference},
        "indistinguishable": None if pair is None else {"smaller": pair[0], "larger": pair[1]},
        "next_rung_constraints": list(analysis.next_rung_constraints),
        "notes": list(analysis.notes),
        "run_id": run_id,
        "measured_at": None if measured_at is None else iso_utc(measured_at),
        "steps": analysis.steps_as_dicts(),
    }


def build_document(
    *,
    run_id: str,
    generated_at: float,
    source: Mapping[str, Any],
    policy: Policy,
    lanes: Mapping[str, dict[str, Any]],
    notes: list[str] | None = None,
) -> dict[str, Any]:
    """The whole document. ``lanes`` maps lane name to a ``lane_fragment``."""
    return {
        "schema": SCHEMA_ID,
        "generated_at": iso_utc(generated_at),
        "run_id": run_id,
        "source": dict(source),
        "policy": policy.model_dump(),
        "lanes": json_safe(dict(lanes)),
        "notes": list(notes or []),
        "stale": False,
        "age_s": None,
    }


def mark_stale(document: Mapping[str, Any], *, age_s: float, reason: str) -> dict[str, Any]:
    """A copy of a last good document, served while its source is unreachable."""
    stale = copy.deepcopy(dict(document))
    stale["stale"] = True
    stale["age_s"] = round(age_s, 3)
    for lane in stale["lanes"].values():
        lane["last_status"] = lane["status"]
        lane["status"] = "stale"
        lane["reason"] = f"{reason}; serving the answer of {stale['generated_at']} ({age_s:.0f} s old)"
        lane["age_s"] = round(age_s, 3)
    return stale
