"""Pure parsing of llama-server's ``/metrics``, ``/slots``, ``/props`` and ``/health`` into a RuntimeSnapshot.

llama-server's own numbers have quirks that this module corrects (see tests/fixtures/llamacpp/):

- ``llamacpp:prompt_tokens_seconds`` and ``predicted_tokens_seconds`` are averages over a bucket that the
  server resets at every ``/metrics`` call, so two scrapers see different values. They are ignored; rates
  come from the ``*_total`` counters (``prompt_tokens_total``, ``tokens_predicted_total``) with ``rate()``.
- ``llamacpp:n_busy_slots_per_decode`` is a lifetime average (busy slots summed over every
  ``llama_decode()`` call / ``n_decode_total``). Multiplying it back by ``n_decode_total`` recovers the
  cumulative busy-slot-decode count, a counter whose increase over any window, divided by the increase of
  ``n_decode_total`` and the slot count, is the decode-weighted batch occupancy of that window. The gauge is
  printed with 6 significant digits, so the recovered counter carries a relative error of about 5e-6.
- ``llamacpp:requests_deferred`` is the number of requests waiting for a slot: the queue depth.
- ``llamacpp:prompt_tokens_total`` counts only the prompt tokens that were prefilled; those the prompt cache
  served are ``prompt_tokens_cached_total`` (this build counts them apart), exported as
  ``runtime_prompt_tokens_cached_total``. Builds without it leave that series out. Other families of the
  build (``n_tokens_max``, the labelled ``spec_decode_*_per_pos``) and any unknown one are parsed and
  ignored, never an error.
- ``/slots`` gives each slot's ``is_processing`` and ``next_token[].n_decoded``: a processing slot that has
  decoded nothing yet is in prefill, otherwise in decode. (``n_prompt_tokens`` counts prompt *and* generated
  tokens of the slot's context, and ``n_prompt_tokens_processed`` only the uncached prompt, so neither tells
  the phase on its own.) Older builds send ``state`` (0 idle) and a single ``next_token`` object.
- ``spec_decode_num_draft_tokens_total``, ``..._accepted_tokens_total`` and ``..._drafts_total`` count
  speculative decoding (0 without a draft model) and become ``runtime_spec_*_total``; a build without them
  leaves those series out. A ``/metrics`` that carries none of the series read here (a renamed or foreign
  exposition) is unusable: ``runtime_metrics_up`` 0, and the runtime is still up.
- ``/slots`` also gives each slot's ``n_ctx`` and held tokens (``n_prompt_tokens``), from which
  :mod:`exporter.kvcache` derives KV-cache usage. ``/props`` of a router says ``role: "router"``.
- ``/metrics`` answers 501 without ``--metrics``; ``/slots`` answers 501 with ``--no-slots``; ``/health``
  answers 503 while the model loads. Each failure only removes what that endpoint would have told.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from satbench.exporter.kvcache import SlotKv
from satbench.exporter.snapshot import EndpointReply, RuntimeSnapshot, SlotCounts, SourceResult

__all__ = [
    "FLAVOUR",
    "PropsInfo",
    "classify_slot",
    "llamacpp_snapshot",
    "parse_exposition",
    "parse_props",
    "parse_slot_kv",
    "parse_slots",
    "reply_error",
]

FLAVOUR = "llamacpp"
_PREFIX = "llamacpp:"
_COUNTERS = {  # snapshot field -> llamacpp: series
    "prompt_tokens_total": "prompt_tokens_total",
    "prompt_tokens_cached_total": "prompt_tokens_cached_total",
    "output_tokens_total": "tokens_predicted_total",
    "decode_steps_total": "n_decode_total",
    "spec_draft_tokens_total": "spec_decode_num_draft_tokens_total",
    "spec_accepted_tokens_total": "spec_decode_num_accepted_tokens_total",
    "spec_drafts_total": "spec_decode_num_drafts_total",
}
_GAUGES = {"queue_depth": "requests_deferred", "requests_processing": "requests_processing"}


@dataclass(frozen=True)
class PropsInfo:
    """The slow-changing facts of ``/props``."""

    total_slots: int | None
    model: str
    build_info: str
    endpoint_slots: bool | None
    endpoint_metrics: bool | None
    role: str = ""


def parse_exposition(text: str) -> dict[str, float]:
    """Unlabelled samples of a Prometheus text exposition, ``name -> value`` (labelled samples are skipped).

    Raises ValueError when no sample line can be read at all (the body is not an exposition).
    """
    samples: dict[str, float] = {}
    seen_line = False
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        seen_line = True
        if "{" in line:
            continue
        parts = line.split()
        if len(parts) < 2:
            continue
        try:
            value = float(parts[1])
        except ValueError:
            continue
        samples[parts[0]] = value
    if seen_line and not samples:
        raise ValueError("no readable sample in the metrics exposition")
    if not seen_line:
        raise ValueError("empty metrics exposition")
    return samples


def _n_decoded(slot: Mapping[str, Any]) -> int:
    nxt = slot.get("next_token")
    if isinstance(nxt, list):
        return sum(int(t.get("n_decoded", 0) or 0) for t in nxt if isinstance(t, Mapping))
    if isinstance(nxt, Mapping):
        return int(nxt.get("n_decoded", 0) or 0)
    return int(slot.get("n_decoded", 0) or 0)


def classify_slot(slot: Mapping[str, Any]) -> str:
    """``idle``, ``prefill`` or ``decode`` for one element of ``/slots``."""
    if "is_processing" in slot:
        processing = bool(slot["is_processing"])
    elif "state" in slot:
        processing = int(slot["state"]) != 0
    else:
        raise ValueError("slot has neither is_processing nor state")
    if not processing:
        return "idle"
    return "decode" if _n_decoded(slot) > 0 else "prefill"


def _slot_list(body: str) -> list[Mapping[str, Any]]:
    data = json.loads(body)
    if not isinstance(data, list):
        raise ValueError("/slots did not return a JSON list")
    if not all(isinstance(slot, Mapping) for slot in data):
        raise ValueError("/slots element is not an object")
    return data


def _count_slots(slots: list[Mapping[str, Any]]) -> SlotCounts:
    counts = {"idle": 0, "prefill": 0, "decode": 0}
    for slot in slots:
        counts[classify_slot(slot)] += 1
    return SlotCounts(idle=counts["idle"], prefill=counts["prefill"], decode=counts["decode"])


def parse_slots(body: str) -> SlotCounts:
    """Slot states from a ``/slots`` body (a JSON list). Raises ValueError on anything else."""
    return _count_slots(_slot_list(body))


def _slot_kv(slots: list[Mapping[str, Any]]) -> tuple[SlotKv, ...] | None:
    out = []
    for slot in slots:
        n_ctx, tokens = slot.get("n_ctx"), slot.get("n_prompt_tokens", 0)
        if not isinstance(n_ctx, int) or not isinstance(tokens, int) or n_ctx <= 0 or tokens < 0:
            return None  # a build without these fields: KV usage unknown, the slot states still count
        out.append(SlotKv(n_ctx=n_ctx, tokens=tokens, busy=classify_slot(slot) != "idle"))
    return tuple(out) if out else None


def parse_slot_kv(body: str) -> tuple[SlotKv, ...] | None:
    """Each slot's context, held tokens and busy flag; None when a slot lacks ``n_ctx``."""
    return _slot_kv(_slot_list(body))


def _props_object(body: str) -> Mapping[str, Any]:
    data = json.loads(body)
    if not isinstance(data, Mapping):
        raise ValueError("/props did not return a JSON object")
    return data


def parse_props(body: str) -> PropsInfo:
    return _props_info(_props_object(body))


def _props_info(data: Mapping[str, Any]) -> PropsInfo:
    total = data.get("total_slots")
    model = str(data.get("model_alias") or data.get("model_path") or "")
    if "/" in model:
        model = PurePosixPath(model).name

    def flag(name: str) -> bool | None:
        value = data.get(name)
        return bool(value) if isinstance(value, bool) else None

    return PropsInfo(
        total_slots=int(total) if isinstance(total, int | float) and total > 0 else None,
        model=model,
        build_info=str(data.get("build_info") or ""),
        endpoint_slots=flag("endpoint_slots"),
        endpoint_metrics=flag("endpoint_metrics"),
        role=str(data.get("role") or ""),
    )


def reply_error(reply: EndpointReply) -> str | None:
    """A short reason why a reply is unusable (the server's own error message when it sent one)."""
    if reply.error is not None:
        return reply.error
    if reply.status == 200:
        return None
    message = ""
    try:
        data = json.loads(reply.body)
        if isinstance(data, Mapping) and isinstance(data.get("error"), Mapping):
            message = str(data["error"].get("message", ""))
    except ValueError:
        message = reply.body[:120]
    return f"HTTP {reply.status}" + (f": {message}" if message else "")


def _result(reply: EndpointReply, parse_error: str | None = None) -> SourceResult:
    error = reply_error(reply) or parse_error
    return SourceResult(
        name=reply.name,
        up=error is None,
        http_status=reply.status,
        duration_s=reply.duration_s,
        error=error,
        cached=reply.cached,
    )


def _finite(samples: Mapping[str, float], name: str) -> float | None:
    value = samples.get(_PREFIX + name)
    return value if value is not None and math.isfinite(value) and value >= 0 else None


def model_meta(models: EndpointReply | None) -> Mapping[str, Any] | None:
    """The ``meta`` of the first model a single-model server lists in ``/v1/models`` (its tensors' size,
    parameters, ftype: what a remote exporter can tell of the model), None when it lists none."""
    if models is None or not models.ok:
        return None
    try:
        data = json.loads(models.body)
    except ValueError:
        return None
    items = data.get("data") if isinstance(data, Mapping) else None
    first = items[0] if isinstance(items, list) and items and isinstance(items[0], Mapping) else {}
    meta = first.get("meta")
    return meta if isinstance(meta, Mapping) else None


def llamacpp_snapshot(
    health: EndpointReply,
    metrics: EndpointReply,
    slots: EndpointReply,
    props: EndpointReply,
    models: EndpointReply | None = None,
) -> RuntimeSnapshot:
    """Combines the replies of one scrape; each unusable reply only removes its own fields."""
    sources: list[SourceResult] = [_result(health)]
    fields: dict[str, Any] = {}
    info: dict[str, str] = {"flavour": FLAVOUR}

    props_info: PropsInfo | None = None
    props_error = None
    if props.ok:
        try:
            props_data = _props_object(props.body)
            props_info = _props_info(props_data)
        except ValueError as exc:
            props_error = f"unreadable /props: {exc}"
    sources.append(_result(props, props_error))
    if props_info is not None:
        fields["props"] = props_data  # whole, for the fingerprint (exporter.live_fingerprint)
        fields["slots_configured"] = props_info.total_slots
        info["model"] = props_info.model
        info["build_info"] = props_info.build_info

    metrics_error = None
    if metrics.ok:
        try:
            samples = parse_exposition(metrics.body)
        except ValueError as exc:
            metrics_error = f"unreadable /metrics: {exc}"
        else:
            read = {attr: _finite(samples, name) for attr, name in {**_GAUGES, **_COUNTERS}.items()}
            fields.update(read)
            decodes = read["decode_steps_total"]
            per_decode = _finite(samples, "n_busy_slots_per_decode")
            if decodes is not None and per_decode is not None:
                fields["busy_slot_decodes_total"] = per_decode * decodes
            if all(v is None for v in read.values()) and per_decode is None:
                metrics_error = "/metrics carries none of the llamacpp: series this exporter reads"
    sources.append(_result(metrics, metrics_error))

    slots_error = None
    if slots.ok:
        try:
            slot_list = _slot_list(slots.body)
            counts = _count_slots(slot_list)
        except (ValueError, TypeError) as exc:
            slots_error = f"unreadable /slots: {exc}"
        else:
            fields["slots"] = counts
            fields["slot_kv"] = _slot_kv(slot_list)
            if counts.total:
                fields["slots_configured"] = counts.total
    sources.append(_result(slots, slots_error))

    meta = model_meta(models)
    if meta is not None:
        fields["model_meta"] = meta
    health_up = sources[0].up
    return RuntimeSnapshot(
        flavour=FLAVOUR,
        up=health_up,
        sources=tuple(sources),
        info=tuple(sorted(info.items())),
        **fields,
    )
