"""KV-cache usage of a llama-server, derived from ``/slots`` because llama-server publishes no such gauge.

What a slot tells (tests/fixtures/llamacpp/router/, this build): ``n_ctx`` is the slot's context and
``n_prompt_tokens`` is ``prompt.tokens.size()``, the tokens the slot holds in the KV cache: the prompt
(cached and processed) plus every token generated so far. An idle slot keeps its last task's tokens as a
prompt cache. So, per scrape::

    active   = sum(tokens of processing slots)      # what running requests occupy
    idle     = sum(tokens of idle slots)            # reusable prompt cache, free to overwrite
    capacity = sum(n_ctx)   with split KV           # each slot owns n_ctx = total / n_parallel
             = max(n_ctx)   with unified KV         # every slot shows the whole shared cache
    ratio    = active / capacity

The ratio means what vLLM's ``vllm:kv_cache_usage_perc`` means: blocks held by running requests, with
cached-but-free prefix blocks counted as free.

The layout, from what the runtime tells, never assumed (:func:`resolve_layout`). ``/slots`` alone cannot
tell the layouts apart (a split cache of 2048 over 2 slots and a unified 1024 both show 1024 per slot), and
llama.cpp's own default is the unified one (``-np`` left out is "auto": 4 slots over one unified cache), so
assuming "split" made a remote exporter read a quarter of the usage of the same ``/slots`` (0.15 against
0.61). In order: the operator (``--kv-unified yes|no``); ``/props`` where the runtime says it (the
simulator does); the runtime's command line and ``LLAMA_ARG_*`` environment read by llama-server's own rule
(``core.llama_argv.settings_from_argv``, the rule the drop-in simulator applies too); ``/slots`` itself,
where it proves the layout (one slot: both are one; busy slots holding more tokens than the largest
``n_ctx``: only split caches can). Failing all, the layout is ``unknown`` and published as such, with the
capacity a unified cache would have (the largest ``n_ctx``, the least it can be) and the ratio over it (the
most the usage can be: an alert on a full cache fires rather than stays silent). In router mode the
child's argv is the one ``/v1/models`` lists.

Limits: context shifting (``--context-shift``) discards ``n_discard`` tokens and keeps generating, so
``n_prompt_tokens`` can read below what was generated; under unified KV an idle slot's tokens may already
have been evicted by busy slots, so ``idle`` is an upper bound there; sliding-window (SWA) models keep
only the window of each sequence in their SWA layers, so the token counts overstate their memory.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from satbench.core.llama_argv import is_llama_server_argv, settings_from_argv

__all__ = ["KV_LAYOUTS", "KV_SETTINGS", "KvUsage", "SlotKv", "kv_usage", "layout_from_argv", "resolve_layout"]

KV_SETTINGS = ("auto", "yes", "no")
KV_LAYOUTS = ("unified", "split", "unknown")


@dataclass(frozen=True)
class SlotKv:
    """One slot's share of the KV cache: its context, the tokens it holds, and whether it is processing."""

    n_ctx: int
    tokens: int
    busy: bool


@dataclass(frozen=True)
class KvUsage:
    active_tokens: int
    idle_tokens: int
    capacity_tokens: int
    layout: str

    @property
    def ratio(self) -> float | None:
        if self.capacity_tokens <= 0:
            return None
        return min(1.0, max(0.0, self.active_tokens / self.capacity_tokens))


def layout_from_argv(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> str | None:
    """``unified`` or ``split`` as llama-server decides it from its command line and environment
    (``core.llama_argv``; ``environ`` None: it could not be read, so what it may set is unknown); None for
    another program, or where they do not decide it."""
    if not argv or not is_llama_server_argv(argv):
        return None
    unified = settings_from_argv(argv, environ)[0]["kv_unified"]
    return None if unified is None else "unified" if unified else "split"


def _from_props(props: Mapping[str, Any] | None) -> str | None:
    for value in ((props or {}).get("kv_unified"), ((props or {}).get("simulator") or {}).get("kv_unified")):
        if isinstance(value, bool):
            return "unified" if value else "split"
    return None


def _from_slots(slots: Sequence[SlotKv]) -> str | None:
    if len(slots) == 1:
        return "split"  # one slot: both layouts are the same cache
    if slots and sum(s.tokens for s in slots if s.busy) > max(s.n_ctx for s in slots):
        return "split"  # more than a unified cache could hold
    return None


def resolve_layout(setting: str, argv: Sequence[str] | None, *, environ: Mapping[str, str] | None = None,
                   props: Mapping[str, Any] | None = None, slots: Sequence[SlotKv] = ()) -> str:
    """The layout to compute capacity with (module docstring): ``unified``, ``split`` or ``unknown``."""
    if setting == "yes":
        return "unified"
    if setting == "no":
        return "split"
    for found in (_from_props(props), layout_from_argv(argv, environ) if argv else None, _from_slots(slots)):
        if found is not None:
            return found
    return "unknown"


def kv_usage(slots: Sequence[SlotKv], layout: str) -> KvUsage | None:
    """Active, idle and capacity tokens of one model's slots (None when there is no slot); an ``unknown``
    layout is counted as unified (the least capacity, the most usage)."""
    if not slots:
        return None
    active = sum(s.tokens for s in slots if s.busy)
    idle = sum(s.tokens for s in slots if not s.busy)
    capacity = sum(s.n_ctx for s in slots) if layout == "split" else max(s.n_ctx for s in slots)
    return KvUsage(active, idle, capacity, layout)
