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
cached-but-free prefix blocks counted as free. ``/slots`` cannot tell the two layouts apart (a split cache
of 2048 over 2 slots and a unified 1024 both show 1024 per slot), so the layout comes from the operator
(``--kv-unified yes|no``) or from the runtime's command line (:func:`layout_from_argv`: ``-kvu``,
``-no-kvu``, and ``-np`` absent or -1, for which the build's help says "default: enabled if number of
slots is auto"; only a llama-server or ``satbench sim`` argv counts); failing both, split is assumed and
said so (``assumed_split``). In router mode the child's argv is the one ``/v1/models`` lists.

Limits: context shifting (``--context-shift``) discards ``n_discard`` tokens and keeps generating, so
``n_prompt_tokens`` can read below what was generated; under unified KV an idle slot's tokens may already
have been evicted by busy slots, so ``idle`` is an upper bound there; sliding-window (SWA) models keep
only the window of each sequence in their SWA layers, so the token counts overstate their memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["KV_LAYOUTS", "KV_SETTINGS", "KvUsage", "SlotKv", "kv_usage", "layout_from_argv", "resolve_layout"]

KV_SETTINGS = ("auto", "yes", "no")
KV_LAYOUTS = ("unified", "split", "assumed_split")
_ON = {"-kvu", "--kv-unified"}
_OFF = {"-no-kvu", "--no-kv-unified"}
_PARALLEL = {"-np", "--parallel"}


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


def _is_llama_server(argv: Sequence[str]) -> bool:
    """llama-server (``llama-server``, the unified ``llama`` binary) or the satbench simulator, which takes
    llama-server's flags; any other program's flags (a test runner serving replayed payloads) tell nothing."""
    program = argv[0].replace("\\", "/").rsplit("/", 1)[-1]
    if program.startswith("llama"):
        return True
    head = argv[:4]
    return any("satbench" in a for a in head) and "sim" in head


def layout_from_argv(argv: Sequence[str]) -> str | None:
    """``unified`` or ``split`` as llama-server decides it from its command line; None for another program."""
    if not argv or not _is_llama_server(argv):
        return None
    explicit: str | None = None
    parallel: str | None = None
    for i, arg in enumerate(argv):
        name, _, inline = arg.partition("=")
        if arg in _ON:
            explicit = "unified"
        elif arg in _OFF:
            explicit = "split"
        elif name in _PARALLEL:
            parallel = inline if inline else (argv[i + 1] if i + 1 < len(argv) else None)
    if explicit is not None:
        return explicit
    try:
        slots = int(parallel) if parallel is not None else -1
    except ValueError:
        return None
    return "unified" if slots == -1 else "split"


def resolve_layout(setting: str, argv: Sequence[str] | None) -> str:
    """The layout to compute capacity with: the operator's ``yes``/``no``, else the argv's, else assumed."""
    if setting == "yes":
        return "unified"
    if setting == "no":
        return "split"
    found = layout_from_argv(argv) if argv else None
    return found if found is not None else "assumed_split"


def kv_usage(slots: Sequence[SlotKv], layout: str) -> KvUsage | None:
    """Active, idle and capacity tokens of one model's slots (None when there is no slot)."""
    if not slots:
        return None
    active = sum(s.tokens for s in slots if s.busy)
    idle = sum(s.tokens for s in slots if not s.busy)
    capacity = max(s.n_ctx for s in slots) if layout == "unified" else sum(s.n_ctx for s in slots)
    return KvUsage(active, idle, capacity, layout)
