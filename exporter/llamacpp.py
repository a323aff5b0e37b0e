"""The llama.cpp adapter: fetches ``/health``, ``/metrics``, ``/slots`` and ``/props`` of one llama-server.

The four endpoints are fetched concurrently within the scrape budget; ``/props`` (slot count, model, build)
changes only on restart, so a good answer is reused for ``props_ttl_s`` seconds instead of being fetched
on every scrape. Parsing and the llama-server quirks live in :mod:`exporter.llamacpp_parse`.
"""

from __future__ import annotations

import threading
import time

import httpx

from exporter.adapter import Clock, EndpointFetcher
from exporter.llamacpp_parse import FLAVOUR, llamacpp_snapshot
from exporter.snapshot import EndpointReply, RuntimeSnapshot

__all__ = ["PROPS_TTL_S", "LlamaCppAdapter"]

PROPS_TTL_S = 30.0
_PATHS = {"health": "/health", "metrics": "/metrics", "slots": "/slots", "props": "/props"}


class LlamaCppAdapter:
    """A :class:`~exporter.adapter.RuntimeAdapter` for llama-server (and the satbench simulator)."""

    flavour = FLAVOUR

    def __init__(
        self,
        base_url: str,
        client: httpx.Client | None = None,
        clock: Clock = time.monotonic,
        props_ttl_s: float = PROPS_TTL_S,
        fetcher: EndpointFetcher | None = None,
    ) -> None:
        self._fetcher = fetcher or EndpointFetcher(base_url, client=client, clock=clock)
        self._clock = clock
        self._props_ttl_s = props_ttl_s
        self._props: tuple[float, EndpointReply] | None = None
        self._lock = threading.Lock()

    @property
    def base_url(self) -> str:
        return self._fetcher.base_url

    @property
    def fetcher(self) -> EndpointFetcher:
        """The HTTP fetcher of this node, shared with readers of the same runtime (``/sim/gpu``)."""
        return self._fetcher

    def _cached_props(self) -> EndpointReply | None:
        with self._lock:
            if self._props is None:
                return None
            fetched_at, reply = self._props
            if self._clock() - fetched_at > self._props_ttl_s:
                return None
            return EndpointReply(reply.name, reply.status, reply.body, 0.0, None, cached=True)

    def fetch(self, budget_s: float) -> RuntimeSnapshot:
        props = self._cached_props()
        paths = dict(_PATHS)
        if props is not None:
            del paths["props"]
        replies = self._fetcher.fetch_many(paths, budget_s)
        if props is None:
            props = replies["props"]
            if props.ok:
                with self._lock:
                    self._props = (self._clock(), props)
        return llamacpp_snapshot(replies["health"], replies["metrics"], replies["slots"], props)

    def close(self) -> None:
        self._fetcher.close()
