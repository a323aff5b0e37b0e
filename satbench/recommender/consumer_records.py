"""The answers as the routers that place requests read them: llm-d's prefill calibration record, the endpoint
picker's saturation thresholds and the variant autoscaler's capacities (``satbench capabilities --format
llm-d|epp|wva``; the autoscalers' KEDA and KServe objects are ``recommender.keda``, AIBrix's GPU profiles
``recommender.aibrix``).

Each of these consumers is today given its numbers by hand. Here every record is cut from the served
document's answers, and every one carries the same ``satbench`` stamp (``lane_stamp``): the fingerprint digest
it is valid for, the run that measured it and when, its age, its validity (``valid``, ``changed``,
``unknown``), ``stale`` (true: the node is no longer what was measured, the fingerprint changed),
``source_stale`` (true: the recommender serves its last good answer while its source is unreachable; the
number was measured on this very node and keeps, only its age grows) and ``usable`` with the reason where it
is not, and the interval the answer was read in (``concurrency_interval``:
the answer and the next rung measured above it, where the limit lies; ``rate_interval``: the rate answer's
bracket). A lane that is stale, never measured, or listed by its node without an answer is still published,
saying so: a record that vanished would leave the consumer on its last value with nobody told.

- **llm-d** (llm-d-router PR #2938, ``prefixcacheaffinity``'s ``CalibrationRecord``): ``schema_version`` 1,
  ``status``, ``fingerprint``, ``model_revision``, ``engine_image_digest``, ``chunk_tokens``,
  ``valid_samples``, ``median_ttft_seconds``, ``peak_prefill_tokens_per_second``, ``applied``. The consumer
  applies a record only with ``status: "OK"``, a positive finite throughput and median TTFT, a positive
  chunk, at least 10 samples, and a ``fingerprint`` equal to its ``prefillCalibrationFingerprint``: here the
  lane's satbench digest, which the exporter publishes live (``runtime_fingerprint_info``). The throughput
  is the lane's measured peak prefill (``LaneModel.prefill``: long prompts, one output token, rising
  concurrency until prompt tokens/s stop gaining; ``loadgen.prefill_walk``), ``valid_samples`` and
  ``median_ttft_seconds`` its peak rung's requests and median TTFT: ``status: "OK"``. A lane whose run did
  not walk it (or whose walk gave no peak of 10 requests) is ``"NOT_RUN"`` with the throughput fields null,
  and ``"STALE"`` where the node changed: both statuses the consumer refuses, keeping its own value, as it
  should. An unsaturated or undecided peak is a lower bound (the walk ended still gaining, or undecided): it
  is served, saying so in ``satbench.status_reason``, since a lower bound errs to a longer predicted TTFT.
  The identity fields come from the fingerprint: ``model_revision`` the model file's sha256 (else its
  path), ``engine_image_digest`` the runtime binary's sha256, ``chunk_tokens`` the logical batch (``-b``) a
  prompt is processed in.
- **epp** (the Gateway API Inference Extension's endpoint picker, now llm-d-router's ``utilization-detector``
  plugin, ``saturationdetector/utilization/config.go``): ``queueDepthThreshold`` (waiting requests per
  endpoint before it counts as saturated; must be > 0) is the requests the answer keeps in flight beyond the
  node's slots, at least 1 (at the answer nothing more should wait). ``kvCacheUtilThreshold`` is left out:
  satbench does not measure the KV use at which a lane saturates, and the plugin's default (0.8) applies.
  A lane without a usable answer gets ``queueDepthThreshold: 1``, the least the plugin takes.
- **wva** (llm-d's variant autoscaler): its saturation thresholds (``queueLengthThreshold``, which its docs
  ask to equal the picker's ``queueDepthThreshold``) and the lane's capacities, as rates and as a stock:
  ``max_concurrency`` (the answer), ``max_rate_rps`` (the rate answer, where the run walked rates),
  ``decode_tokens_per_second`` (output tokens/s measured at the answer) and ``kv_capacity_tokens`` (the KV
  cache the runtime holds, from the fingerprint's slots and per-slot context: one slot's context when the
  cache is unified, else their product), so an autoscaler takes the smaller of what compute and memory allow.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from satbench.answer.models import LaneModel, PrefillModel, RecommendationsDocument
from satbench.recommender.capabilities import all_lanes, lane_place_of, unusable_why
from satbench.recommender.metrics import validity_state

__all__ = [
    "LLMD_MIN_SAMPLES",
    "LLMD_SCHEMA_VERSION",
    "LaneStamp",
    "epp_thresholds",
    "lane_stamp",
    "llmd_calibration",
    "queue_threshold",
    "variant_capacities",
]

LLMD_SCHEMA_VERSION = 1
LLMD_MIN_SAMPLES = 10  # the consumer applies a record of at least 10 samples (PR #2938's usable())
_NOT_MEASURED = ("satbench has not measured this lane's peak prefill throughput (long prompts, one output token, "
                 "rising concurrency)")


# -- the stamp every record carries ---------------------------------------------------------------------------
def _concurrency_interval(lane: LaneModel) -> list[int | None] | None:
    """``[answer, next rung measured above it]`` (None above: no rung was measured above the answer)."""
    answer = lane.recommended_concurrency
    if answer is None:
        return None
    above = sorted(s.concurrency for s in lane.steps if s.concurrency > answer)
    return [answer, above[0] if above else None]


@dataclass(frozen=True, slots=True)
class LaneStamp:
    """What a record of one lane is valid for and how far to trust it (module docstring); its fields in the
    order every record writes them (``as_json``)."""

    lane_key: str
    node: str | None
    lane: str
    fingerprint_digest: str | None
    run_id: str | None
    measured_at: str | None
    age_s: float | None
    validity: str
    stale: bool
    source_stale: bool
    usable: bool
    reason: str | None
    concurrency_interval: Any
    rate_interval: Any

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def lane_stamp(document: RecommendationsDocument, key: str, lane: LaneModel | None) -> LaneStamp:
    """What a record of lane ``key`` is valid for and how far to trust it (module docstring)."""
    node, name = lane_place_of(document, key, lane)
    why = unusable_why(document, key, lane)
    if lane is None:
        return LaneStamp(lane_key=key, node=node, lane=name, fingerprint_digest=None, run_id=None, measured_at=None,
                         age_s=None, validity="unknown", stale=False, source_stale=document.stale, usable=False,
                         reason=why, concurrency_interval=None, rate_interval=None)
    state = validity_state(lane)
    return LaneStamp(
        lane_key=key, node=node, lane=name,
        fingerprint_digest=None if lane.fingerprint is None else lane.fingerprint.digest,
        run_id=lane.run_id, measured_at=lane.measured_at,
        age_s=lane.age_s if lane.age_s is not None else document.age_s,
        validity=state, stale=state == "changed", source_stale=document.stale, usable=why is None,
        reason=why or lane.reason,
        concurrency_interval=_concurrency_interval(lane),
        rate_interval=None if lane.rate is None else lane.rate.interval,
    )


def _settings(lane: LaneModel | None) -> dict[str, Any]:
    fingerprint = None if lane is None else lane.fingerprint
    return dict(fingerprint.settings or {}) if fingerprint is not None else {}


def _int_setting(lane: LaneModel | None, name: str) -> int | None:
    value = _settings(lane).get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


# -- llm-d ----------------------------------------------------------------------------------------------------
def _model_revision(lane: LaneModel | None) -> str | None:
    if lane is None or lane.fingerprint is None or not lane.fingerprint.model:
        return None
    model = lane.fingerprint.model_facts
    digests = model.sha256s
    if digests:
        return digests[0] if len(digests) == 1 else "+".join(digests)
    return str(model.path) if model.path else None


def _image_digest(lane: LaneModel | None) -> str | None:
    runtime = None if lane is None or lane.fingerprint is None else lane.fingerprint.runtime
    binary = (runtime or {}).get("binary_sha256")
    return f"sha256:{binary}" if binary and not str(binary).startswith("sha256:") else binary


def _llmd_status(stamp: LaneStamp, prefill: PrefillModel | None) -> tuple[str, str]:
    """``OK`` where the lane's peak prefill was measured (a peak, its median TTFT, at least ``LLMD_MIN_SAMPLES``
    requests) on a node that is still what was measured; ``STALE`` where it changed; else ``NOT_RUN``."""
    if stamp.stale:
        return "STALE", str(stamp.reason)
    if prefill is None:
        return "NOT_RUN", _NOT_MEASURED
    if prefill.peak_prompt_tok_s is None or not prefill.peak_prompt_tok_s > 0 or prefill.median_ttft_s is None \
            or prefill.requests < LLMD_MIN_SAMPLES:
        return "NOT_RUN", f"the peak prefill walk gave no usable peak ({prefill.status}: {prefill.reason})"
    bound = " (a lower bound)" if prefill.status != "settled" else ""
    return "OK", f"peak prefill {prefill.status}{bound}: {prefill.reason}"


def llmd_calibration(document: RecommendationsDocument) -> dict[str, Any]:
    """``{"records": {lane key: record}}``: llm-d's prefill calibration record per lane (module docstring)."""
    records: dict[str, Any] = {}
    for key, lane in all_lanes(document):
        stamp = lane_stamp(document, key, lane)
        prefill = None if lane is None else lane.prefill
        status, why = _llmd_status(stamp, prefill)
        measured = status == "OK" and prefill is not None
        records[key] = {
            "schema_version": LLMD_SCHEMA_VERSION,
            "status": status,
            "fingerprint": stamp.fingerprint_digest or "",
            "model_revision": _model_revision(lane) or "",
            "engine_image_digest": _image_digest(lane) or "",
            "chunk_tokens": (prefill.batch_tokens if prefill is not None else None) or _int_setting(lane, "batch"),
            "valid_samples": prefill.requests if measured and prefill is not None else 0,
            "median_ttft_seconds": prefill.median_ttft_s if measured and prefill is not None else None,
            "peak_prefill_tokens_per_second": prefill.peak_prompt_tok_s if measured and prefill is not None
            else None,
            "applied": False,
            "satbench": {**stamp.as_json(), "ubatch_tokens": _int_setting(lane, "ubatch"), "status_reason": why,
                         "prefill_status": None if prefill is None else prefill.status,
                         "prefill_interval": None if prefill is None else prefill.interval,
                         "prefill_concurrency": None if prefill is None else prefill.concurrency,
                         "prompt_tokens": None if prefill is None else prefill.prompt_tokens},
        }
    return {"records": records}


# -- the endpoint picker and the variant autoscaler -----------------------------------------------------------
def queue_threshold(lane: LaneModel | None, usable: bool) -> int:
    """Waiting requests per endpoint at the answer, at least 1: the answer beyond the node's slots (module
    docstring); 1 where there is no usable answer or the slot count is unknown and the answer fits none."""
    answer = None if lane is None else lane.recommended_concurrency
    slots = _int_setting(lane, "slots")
    if not usable or answer is None or slots is None:
        return 1
    return max(1, answer - slots)


def epp_thresholds(document: RecommendationsDocument) -> dict[str, Any]:
    """``{"endpoints": {lane key: {"type": "utilization-detector", "parameters": {...}, "satbench": stamp}}}``."""
    endpoints: dict[str, Any] = {}
    for key, lane in all_lanes(document):
        stamp = lane_stamp(document, key, lane)
        endpoints[key] = {"type": "utilization-detector",
                          "parameters": {"queueDepthThreshold": queue_threshold(lane, stamp.usable)},
                          "satbench": stamp.as_json()}
    return {"endpoints": endpoints}


def _kv_capacity_tokens(lane: LaneModel | None) -> int | None:
    settings = _settings(lane)
    per_slot, slots = _int_setting(lane, "ctx_per_slot"), _int_setting(lane, "slots")
    if per_slot is None:
        return None
    if settings.get("kv_unified") is True:
        return per_slot
    return None if slots is None else per_slot * slots


def variant_capacities(document: RecommendationsDocument) -> dict[str, Any]:
    """``{"variants": {lane key: {...capacities, "saturation": {...}, "satbench": stamp}}}`` (module docstring).
    A lane without a usable answer carries null capacities (its stamp says why) and the least thresholds."""
    variants: dict[str, Any] = {}
    for key, lane in all_lanes(document):
        stamp = lane_stamp(document, key, lane)
        usable = stamp.usable and lane is not None
        rate = None if lane is None else lane.rate
        variants[key] = {
            "max_concurrency": lane.recommended_concurrency if usable and lane is not None else None,
            "max_rate_rps": rate.max_rate_rps if usable and rate is not None
            and rate.status in ("settled", "unsaturated") else None,
            "decode_tokens_per_second": lane.throughput_at_recommended_tok_s if usable and lane is not None
            else None,
            "kv_capacity_tokens": _kv_capacity_tokens(lane),
            "saturation": {"queueLengthThreshold": queue_threshold(lane, stamp.usable)},
            "satbench": stamp.as_json(),
        }
    return {"variants": variants}
