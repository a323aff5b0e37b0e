"""The exporter's runtime flavours: one table, :data:`ADAPTERS`, from flavour to the adapter that reads it.

A flavour names the API a runtime node is read by (its ``/metrics``, ``/slots``, ``/props`` ...), and each
one is an entry here: a factory that builds its :class:`~exporter.adapter.RuntimeAdapter` from the settings
every adapter may take (:class:`AdapterSettings`) and the scrape's shared fetcher. ``--flavour``'s choices,
the config's validation and :func:`exporter.server.build_adapter` all read this table, so a vLLM or SGLang
adapter is one new module plus one entry here; the collector does not change.

``auto`` resolves to :data:`AUTO`: only llama.cpp exists so far, and the simulator speaks it. A runtime whose
endpoints can be told apart adds a probe for them under ``auto``.

This module stays import-light (``satbench exporter --help`` reads it): each factory imports its adapter when
called.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from satbench.exporter.adapter import EndpointFetcher, RuntimeAdapter

__all__ = ["ADAPTERS", "AUTO", "FLAVOURS", "AdapterSettings", "resolve"]


@dataclass(frozen=True, slots=True)
class AdapterSettings:
    """What the exporter's config tells any adapter: the node, its ``/props`` cache life, router mode (None:
    detect it) and the one model to publish (None: every loaded one)."""

    runtime_url: str
    props_ttl_s: float
    router: bool | None = None
    model: str | None = None


AdapterFactory = Callable[[AdapterSettings, "EndpointFetcher"], "RuntimeAdapter"]


def _llamacpp(settings: AdapterSettings, fetcher: EndpointFetcher) -> RuntimeAdapter:
    from satbench.exporter.llamacpp import LlamaCppAdapter

    return LlamaCppAdapter(settings.runtime_url, props_ttl_s=settings.props_ttl_s, fetcher=fetcher,
                           router=settings.router, model=settings.model)


ADAPTERS: dict[str, AdapterFactory] = {"llamacpp": _llamacpp}
AUTO = "llamacpp"  # what ``--flavour auto`` reads a node as
FLAVOURS = (*ADAPTERS, "auto")


def resolve(flavour: str) -> str:
    """The adapter's flavour for ``flavour`` (``auto``: :data:`AUTO`); ``KeyError`` for an unknown one."""
    name = AUTO if flavour == "auto" else flavour
    if name not in ADAPTERS:
        raise KeyError(flavour)
    return name
