"""What one scrape learns about a runtime node, as frozen values shared by every adapter.

An adapter (llama.cpp today; vLLM or SGLang later) turns its runtime's endpoints into one
:class:`RuntimeSnapshot`. Every field that the runtime could not tell us this time is ``None``: the collector
publishes what is known and leaves the rest out, and the per-source :class:`SourceResult` rows say why
(``runtime_<source>_up`` 0, the HTTP status, the error). Nothing here does I/O.

A llama-server in router mode serves several models behind one port; its snapshot has ``router`` set, the
node-wide sources (``health``, the router's ``props``, ``models``) and one :class:`ModelView` per model,
whose own snapshot (``metrics``, ``slots``, ``props`` of that model) exists only while the model is loaded.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from satbench.exporter.kvcache import SlotKv

__all__ = ["EndpointReply", "ModelView", "RuntimeSnapshot", "SlotCounts", "SourceResult"]


@dataclass(frozen=True)
class EndpointReply:
    """The raw answer of one runtime endpoint: ``status`` None means no HTTP answer (refused, timed out)."""

    name: str
    status: int | None
    body: str
    duration_s: float
    error: str | None = None
    cached: bool = False

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.error is None


@dataclass(frozen=True)
class SourceResult:
    """Whether one source (``health``, ``metrics``, ``slots``, ``props``) gave a usable answer this scrape."""

    name: str
    up: bool
    http_status: int | None
    duration_s: float
    error: str | None = None
    cached: bool = False


@dataclass(frozen=True)
class SlotCounts:
    """Slots by state at scrape time: a busy slot is in ``prefill`` (no token decoded yet) or ``decode``."""

    idle: int
    prefill: int
    decode: int

    @property
    def total(self) -> int:
        return self.idle + self.prefill + self.decode

    @property
    def busy(self) -> int:
        return self.prefill + self.decode


@dataclass(frozen=True)
class RuntimeSnapshot:
    """One scrape of a runtime node, normalised across runtimes. ``None`` = unknown this scrape.

    Counters (``*_total``) are cumulative since the runtime started. ``busy_slot_decodes_total`` is the sum,
    over every batched decode step, of the slots that took part; divided by ``decode_steps_total`` it is the
    mean batch size, and divided again by the slot count, the decode-weighted occupancy. ``props`` is the
    ``/props`` object this snapshot read (cached or not), kept whole for the fingerprint.
    """

    flavour: str
    up: bool
    sources: tuple[SourceResult, ...]
    slots: SlotCounts | None = None
    slots_configured: int | None = None
    queue_depth: float | None = None
    requests_processing: float | None = None
    prompt_tokens_total: float | None = None
    prompt_tokens_cached_total: float | None = None
    output_tokens_total: float | None = None
    decode_steps_total: float | None = None
    busy_slot_decodes_total: float | None = None
    spec_draft_tokens_total: float | None = None
    spec_accepted_tokens_total: float | None = None
    spec_drafts_total: float | None = None
    slot_kv: tuple[SlotKv, ...] | None = None
    info: tuple[tuple[str, str], ...] = ()
    props: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)  # the /props object
    model_meta: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)  # /v1/models meta
    router: bool = False
    models: tuple[ModelView, ...] = ()

    def source(self, name: str) -> SourceResult | None:
        return next((s for s in self.sources if s.name == name), None)

    @property
    def busy_slots(self) -> float | None:
        """Busy slots now: from the slot list when known, else the runtime's ``requests_processing``."""
        if self.slots is not None:
            return float(self.slots.busy)
        return self.requests_processing

    @property
    def occupancy_ratio(self) -> float | None:
        """Busy slots / configured slots at scrape time (None when either is unknown)."""
        busy = self.busy_slots
        total = self.slots.total if self.slots is not None and self.slots.total else self.slots_configured
        if busy is None or not total:
            return None
        return min(1.0, max(0.0, busy / total))


@dataclass(frozen=True)
class ModelView:
    """One model of a router node: its ``/v1/models`` status, the argv the router starts it with, and its
    own snapshot when it was loaded and fetched this scrape (``status`` ``unknown``: not listed)."""

    name: str
    status: str
    args: tuple[str, ...] = ()
    snapshot: RuntimeSnapshot | None = None
    meta: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)  # /v1/models meta

    @property
    def loaded(self) -> bool:
        return self.status == "loaded"
