"""The consumers' records by format name, declared once: the command line's ``--format`` choices and
``GET /capabilities?format=`` both read ``RECORD_FORMATS`` (``recommender.keda`` for the autoscalers,
``recommender.consumer_records`` for the routers). ``json``, ``prometheus`` and ``litellm`` are
``recommender.capabilities``' own."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from satbench.answer.models import RecommendationsDocument
from satbench.recommender.aibrix import aibrix_profiles
from satbench.recommender.capabilities import FORMATS as CAPABILITY_FORMATS
from satbench.recommender.consumer_records import epp_thresholds, llmd_calibration, variant_capacities
from satbench.recommender.keda import AutoscalerOptions, keda_scaled_objects, kserve_scaling

__all__ = ["ALL_FORMATS", "LANE_FORMATS", "RECORD_FORMATS", "lane_record", "render_record", "unknown_format"]

Renderer = Callable[[RecommendationsDocument, AutoscalerOptions], dict[str, Any]]

RECORD_FORMATS: dict[str, tuple[Renderer, str]] = {
    "keda": (keda_scaled_objects, "a KEDA ScaledObject per model (a v1 List)"),
    "kserve": (kserve_scaling, "LLMInferenceService spec.scaling.keda.triggers per model (a v1 List)"),
    "llm-d": (lambda doc, _: llmd_calibration(doc), "llm-d's prefill calibration record per lane"),
    "epp": (lambda doc, _: epp_thresholds(doc), "the endpoint picker's saturation thresholds per lane"),
    "wva": (lambda doc, _: variant_capacities(doc), "the variant autoscaler's capacities per lane"),
    "aibrix": (aibrix_profiles, "AIBrix's GPU optimizer profile per model and node kind (requests/s by length)"),
}
ALL_FORMATS = (*CAPABILITY_FORMATS, *RECORD_FORMATS)
LANE_FORMATS = {"llm-d": "records", "epp": "endpoints", "wva": "variants"}  # keyed per lane: one can be taken


def unknown_format(name: str) -> str:
    """The one line that refuses format ``name``, naming the ones there are."""
    return f"format {name!r} is not one of: {', '.join(ALL_FORMATS)}"


def render_record(document: RecommendationsDocument, fmt: str, options: AutoscalerOptions | None = None
                  ) -> dict[str, Any]:
    """The record of ``fmt`` (one of ``RECORD_FORMATS``) for ``document`` (``ValueError``: another name)."""
    if fmt not in RECORD_FORMATS:
        raise ValueError(unknown_format(fmt))
    return RECORD_FORMATS[fmt][0](document, options or AutoscalerOptions())


def lane_record(record: dict[str, Any], fmt: str, key: str) -> dict[str, Any]:
    """Lane ``key``'s own record of a per-lane format (llm-d's ``prefillCalibrationFile`` is one lane's
    record); ``ValueError`` in one line naming the lane, or the format, that has none."""
    if fmt not in LANE_FORMATS:
        raise ValueError(f"--lane {key!r}: only the per-lane formats ({', '.join(LANE_FORMATS)}) take one, "
                         f"not {fmt!r}")
    lanes: dict[str, Any] = record[LANE_FORMATS[fmt]]
    if key not in lanes:
        raise ValueError(f"--lane {key!r}: no such lane in the document (its lanes: {', '.join(sorted(lanes))})")
    return dict(lanes[key])
