"""The llama.cpp adapter: one llama-server, serving one model or, in router mode, several.

Single model: ``/health``, ``/metrics``, ``/slots`` and ``/props`` are fetched concurrently within the scrape
budget; ``/props`` (slot count, model, build) and ``/v1/models`` (the model's ``meta``: what a remote
exporter can tell of the model, for the fingerprint) change only on restart, so a good answer is reused for
``props_ttl_s`` seconds instead of being fetched on every scrape.

Router mode (:mod:`exporter.router`) is told (``router=True``) or detected from ``/props`` ``role:
"router"`` (``router=None``; re-checked whenever the cached ``/props`` expires). A scrape then fetches
``/health``, ``/props`` (cached) and ``/v1/models`` (every scrape: it is the router's own answer, cheap, and
says which models are loaded right now), and in a second round ``/metrics``, ``/slots`` and ``/props``
(cached per model) of each loaded model with ``?model=NAME&autoload=false``, all concurrently, in what is
left of the budget. ``fetch(model=NAME)`` (or ``model=`` here, the ``--model`` flag) narrows that round to
one model. Until the mode is known a scrape fetches both sets, so the first scrape is already complete.
Parsing and the llama-server quirks live in :mod:`exporter.llamacpp_parse`.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Mapping

import httpx

from satbench.exporter.adapter import Clock, EndpointFetcher, Path
from satbench.exporter.llamacpp_parse import FLAVOUR, llamacpp_snapshot, reply_error
from satbench.exporter.router import model_params, parse_models, router_snapshot
from satbench.exporter.snapshot import EndpointReply, ModelView, RuntimeSnapshot

__all__ = ["PROPS_TTL_S", "LlamaCppAdapter"]

PROPS_TTL_S = 30.0
_PATHS = {"health": "/health", "metrics": "/metrics", "slots": "/slots", "props": "/props"}
_MODELS_KEY = "#models"  # the cached /v1/models of a single-model node
_PER_MODEL = ("metrics", "slots", "props")


def _role(props: EndpointReply) -> str | None:
    """``router`` or ``single`` from a usable ``/props``; None when it cannot tell."""
    if not props.ok:
        return None
    try:
        data = json.loads(props.body)
    except ValueError:
        return None
    if not isinstance(data, Mapping):
        return None
    return "router" if data.get("role") == "router" else "single"


def _restarted(health: EndpointReply, slots: EndpointReply, props: EndpointReply) -> bool:
    """Whether the runtime behind a cached ``/props`` looks restarted: its ``/health`` did not answer 200 (down,
    or loading its model), or ``/slots`` lists another slot count than ``total_slots``. The cache saves a
    request per scrape; it must not hide a restart with other settings from the fingerprint for 30 s."""
    if not health.ok:
        return True
    if not slots.ok:
        return False
    try:
        listed = json.loads(slots.body)
        total = json.loads(props.body).get("total_slots")
    except (ValueError, AttributeError):
        return False
    return isinstance(listed, list) and isinstance(total, int) and len(listed) != total


class _PropsCache:
    """Good ``/props`` answers by key (``""``: the node), each reused for ``ttl_s`` seconds."""

    def __init__(self, clock: Clock, ttl_s: float) -> None:
        self._clock = clock
        self._ttl_s = ttl_s
        self._entries: dict[str, tuple[float, EndpointReply]] = {}
        self._lock = threading.Lock()

    def get(self, key: str) -> EndpointReply | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or self._clock() - entry[0] > self._ttl_s:
                return None
            reply = entry[1]
            return EndpointReply(reply.name, reply.status, reply.body, 0.0, None, cached=True)

    def put(self, key: str, reply: EndpointReply) -> None:
        """Keeps a good answer, and a 404 of ``/v1/models`` (an older build has none: asking every scrape
        would not change that until a restart)."""
        if reply.ok or (key == _MODELS_KEY and reply.status == 404 and reply.error is None):
            with self._lock:
                self._entries[key] = (self._clock(), reply)

    def drop(self, key: str) -> None:
        with self._lock:
            self._entries.pop(key, None)

    def keep_only(self, keys: set[str]) -> None:
        """Forgets the models not loaded any more: a reloaded model may come back with other props."""
        with self._lock:
            for key in [k for k in self._entries if k and k != _MODELS_KEY and k not in keys]:
                del self._entries[key]


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
        router: bool | None = None,
        model: str | None = None,
    ) -> None:
        self._fetcher = fetcher or EndpointFetcher(base_url, client=client, clock=clock)
        self._clock = clock
        self._props = _PropsCache(clock, props_ttl_s)
        self._router = router
        self._detected: bool | None = None
        self._model = model

    @property
    def base_url(self) -> str:
        return self._fetcher.base_url

    @property
    def fetcher(self) -> EndpointFetcher:
        """The HTTP fetcher of this node, shared with readers of the same runtime (``/sim/gpu``)."""
        return self._fetcher

    def fetch(self, budget_s: float, model: str | None = None) -> RuntimeSnapshot:
        start = self._clock()
        router = self._router if self._router is not None else self._detected
        props = self._props.get("")
        models = self._props.get(_MODELS_KEY)
        paths: dict[str, Path] = {"health": _PATHS["health"]}
        if props is None:
            paths["props"] = _PATHS["props"]
        if router is not False or models is None:
            paths["models"] = "/v1/models"
        if router is not True:
            paths["metrics"], paths["slots"] = _PATHS["metrics"], _PATHS["slots"]
        replies = self._fetcher.fetch_many(paths, budget_s)
        if props is None:
            props = replies["props"]
            self._props.put("", props)
        if self._router is None:
            role = _role(props)
            if role is not None:
                self._detected = role == "router"
            router = self._detected
        left = budget_s - (self._clock() - start)
        if not router:
            if "metrics" not in replies:
                replies.update(self._fetcher.fetch_many({k: _PATHS[k] for k in ("metrics", "slots")}, left))
            if models is None and "models" in replies:
                models = replies["models"]
                self._props.put(_MODELS_KEY, models)
            if props.cached and _restarted(replies["health"], replies["slots"], props):
                self._props.drop("")  # what it says may have changed with the restart: ask again now
                self._props.drop(_MODELS_KEY)
                again = self._fetcher.fetch_many({"props": _PATHS["props"], "models": "/v1/models"},
                                                 budget_s - (self._clock() - start))
                props, models = again["props"], again["models"]
                self._props.put("", props)
                self._props.put(_MODELS_KEY, models)
            return llamacpp_snapshot(replies["health"], replies["metrics"], replies["slots"], props, models)
        if "models" not in replies:
            replies.update(self._fetcher.fetch_many({"models": "/v1/models"}, left))
            left = budget_s - (self._clock() - start)
        return self._router_snapshot(replies, props, model or self._model, left)

    def _router_snapshot(
        self, replies: dict[str, EndpointReply], props: EndpointReply, only: str | None, left: float
    ) -> RuntimeSnapshot:
        models = replies["models"]
        listed: tuple[ModelView, ...] | None = None
        models_error = reply_error(models)
        if models_error is None:
            try:
                listed = parse_models(models.body)
            except (ValueError, TypeError) as exc:
                models_error = f"unreadable /v1/models: {exc}"
        loaded = [v.name for v in listed or () if v.loaded]
        if listed is not None:
            self._props.keep_only(set(loaded))
        targets = [name for name in loaded if only is None or name == only]
        meta = {v.name: v.meta for v in listed or ()}
        per_model = {name: dataclasses.replace(snap, model_meta=meta.get(name))
                     for name, snap in self._fetch_models(targets, replies["health"], left).items()}
        return router_snapshot(FLAVOUR, replies["health"], props, models, listed, models_error, per_model, only)

    def _fetch_models(
        self, names: list[str], health: EndpointReply, budget_s: float
    ) -> dict[str, RuntimeSnapshot]:
        cached = {name: self._props.get(name) for name in names}
        paths: dict[str, Path] = {}
        for i, name in enumerate(names):
            for source in _PER_MODEL:
                if source != "props" or cached[name] is None:
                    paths[f"{source}:{i}"] = (_PATHS[source], model_params(name))
        replies = self._fetcher.fetch_many(paths, budget_s) if paths else {}
        out: dict[str, RuntimeSnapshot] = {}
        for i, name in enumerate(names):
            got = {s: dataclasses.replace(r, name=s) for s in _PER_MODEL if (r := replies.get(f"{s}:{i}"))}
            props = cached[name] or got["props"]
            self._props.put(name, props)
            out[name] = llamacpp_snapshot(health, got["metrics"], got["slots"], props)
        return out

    def close(self) -> None:
        self._fetcher.close()
