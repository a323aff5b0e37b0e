"""llama-server's router mode, simulated: several models, one simulated engine each, loaded on demand.

Which models exist (as the real router lists them, ``GET /models`` and ``/v1/models``):

* the HF cache (``LLAMA_CACHE``, else ``HF_HUB_CACHE``, ``HUGGINGFACE_HUB_CACHE``, ``HF_HOME/hub``,
  ``XDG_CACHE_HOME/huggingface/hub``, ``~/.cache/huggingface/hub``): each ``models--ORG--REPO`` folder with a
  ``refs/`` commit and GGUF files under ``snapshots/<commit>/`` gives ``ORG/REPO:TAG`` per quantization tag
  (the file name's last ``-``/``.`` part, upper-cased; mmproj and draft files left out). Files are only
  listed, never read or written;
* ``--models-dir DIR``: each ``*.gguf`` file (by its stem) and each sub-folder holding one (by its name);
* ``--models-preset INI``: each section (``[*]`` holds defaults), merged over a same-named model;
  ``alias`` and ``tags`` keys name it further; ``dedup-cache-models = 1`` hides the cache entries of its
  ``hf-repo`` and ``spec-draft-hf`` from the listing (they stay usable). ``GET /models?reload=1`` re-reads all.
  ``-hf ORG/REPO`` naming a cached preset repo (a ``preset.ini`` at its root) is router mode with that preset.

Each model is a separate engine (``simulator.server.SimulatorApp``: its own slots, prompt cache, metrics and
conversation streams) with the command line's profile (a preset's ``ctx-size``/``c`` and ``parallel``/``np``
apply per model). Its ``status.value`` is ``unloaded``, ``loading`` (for ``--model-load-s`` seconds), then
``loaded``. A request names its model in ``model`` (the body, or ``?model=`` for GETs); an unknown one is a
400 (``model 'X' not found``), as is a missing one. With autoload (the default; ``--no-models-autoload`` or
``?autoload=0`` turn it off, and then a model not running is a 400) the request waits for its model to
load. At most ``--models-max`` models run (default 4, 0 = no limit): a load past it evicts the least
recently used idle model; when every running model is busy, requests wait in a FIFO queue, all requests
for one model sharing one entry (one eviction), and a client that leaves the queue gives up its place.
(That scheduling is ``simulator.model_scheduler.ModelScheduler``; this module holds the HTTP side.)
``POST /models/load`` and ``/models/unload`` ``{"model": ...}`` answer ``{"success": true}``; ``GET
/models/sse`` streams ``model_status`` and download events; ``POST /models {"model": "ORG/REPO:TAG"}``
simulates a download (``download_progress`` then ``download_finished`` events; the model is then listed
until the server stops; nothing is fetched or written) and ``DELETE /models?model=`` hides a cache model.
``/props`` without ``?model=`` describes the router (``role: "router"``, ``max_instances``,
``models_autoload``); ``/metrics``, ``/slots`` and the generation endpoints want a model (400 without).

Conversation streams (``simulator.streams``): a request with ``X-Conversation-Id`` is tracked from its
arrival, so ``GET /v1/stream?conv_id=...`` answers 503 while its model loads (404 when unknown) and then
reaches the owning model's session; ``DELETE /v1/stream`` stops it there (204) and, while the model still
loads, cancels the parked request (400 ``request cancelled by a stop while the model was loading``). A
session request is not cancelled by its client leaving during the load: it is generated for a later resume.

With ``LLAMA_SERVER_DEBUG_FAKE_TIMING`` set (as llama.cpp's own tests set it) each load waits 2 s before it
starts and each proxied request holds its model busy 2 s before it runs, as the real router does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import operator
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from satbench.simulator.dropin import ServerOptions
from satbench.simulator.edge import UI_PATHS
from satbench.simulator.model_cache import cache_models, hf_cache_dir, models_dir_models, read_preset
from satbench.simulator.model_scheduler import FAKE_TIMING_S, LoadCancelled, ModelScheduler, RouterModel
from satbench.simulator.profile import Profile, ProfileError, load_profile
from satbench.simulator.server import (
    JSON_HEADERS,
    SSE_HEADERS,
    SimulatorApp,
    _error,
    _json,
    base_app,
)
from satbench.simulator.state_views import BUILD_INFO

__all__ = ["FAKE_TIMING_S", "RouterApp", "RouterModel", "create_router_app"]

_TRUE = {"1", "true", "on", "yes"}


def _repo_tag(value: str) -> tuple[str, str]:
    repo, _, tag = value.partition(":")
    return repo, tag.upper()


class RouterApp(SimulatorApp):
    """The router's HTTP edge (API keys, CORS, the web UI, as ``SimulatorApp``) over one engine per model."""

    def __init__(self, profile: Profile, options: ServerOptions, env: dict[str, str] | None = None) -> None:
        super().__init__(profile, options=options)
        self.env = dict(os.environ) if env is None else env
        self.fake_timing = bool(self.env.get("LLAMA_SERVER_DEBUG_FAKE_TIMING"))
        self.scheduler = ModelScheduler(options, self.fake_timing, self._child_profile)
        self._downloaded: dict[str, RouterModel] = {}
        self._removed: set[str] = set()
        self._convs: dict[str, tuple[str, int]] = {}
        self._ticket = 0
        self.load_models()

    # -- lifecycle ----------------------------------------------------------------------------------------

    async def on_startup(self, app: web.Application) -> None:
        self.scheduler.start(app)

    async def on_shutdown(self, app: web.Application) -> None:
        await self.scheduler.shutdown()

    async def on_cleanup(self, app: web.Application) -> None:
        self.scheduler.cleanup()

    @property
    def catalogue(self) -> dict[str, RouterModel]:
        return self.scheduler.catalogue

    @catalogue.setter
    def catalogue(self, value: dict[str, RouterModel]) -> None:
        self.scheduler.catalogue = value

    # -- the catalogue ------------------------------------------------------------------------------------

    def load_models(self) -> None:
        """(Re)reads the cache, ``--models-dir`` and ``--models-preset``; a running model keeps running."""
        opts = self.options
        found: dict[str, RouterModel] = {}
        for name, _repo in cache_models(hf_cache_dir(self.env)):
            found[name] = RouterModel(name, "cache", {"hf-repo": name})
        if opts.models_dir:
            for name, path in models_dir_models(opts.models_dir):
                found[name] = RouterModel(name, "models_dir", {"model": path})
        hide: set[tuple[str, str]] = set()
        if opts.models_preset:
            defaults, sections = read_preset(opts.models_preset)
            for name, keys in sections.items():
                merged = {**defaults, **keys}
                base = found.get(name)
                m = RouterModel(name, "preset", {**(base.preset if base else {}), **merged})
                m.aliases = tuple(a.strip() for a in merged.get("alias", "").split(",") if a.strip())
                m.tags = tuple(t.strip() for t in merged.get("tags", "").split(",") if t.strip())
                found[name] = m
                if merged.get("dedup-cache-models", "").strip().lower() in _TRUE:
                    for k in ("hf-repo", "hf", "hfr", "spec-draft-hf", "hf-repo-draft"):
                        if merged.get(k):
                            hide.add(_repo_tag(merged[k]))
        for name, m in self._downloaded.items():
            found.setdefault(name, m)
        for m in found.values():
            if m.source == "cache":
                repo, tag = _repo_tag(m.name)
                m.hidden = m.name in self._removed or any(r == repo and t in ("", tag) for r, t in hide)
        for name, old in self.catalogue.items():  # keep the state of the models that stay
            new = found.get(name)
            if new is not None:
                new.status, new.child, new.loader = old.status, old.child, old.loader
                new.req_count, new.last_used, new.stopping = old.req_count, old.last_used, old.stopping
            elif old.running and self.scheduler.app is not None:
                self.scheduler.spawn(self.scheduler.unload(old))
        self.catalogue = found

    def find(self, name: str) -> RouterModel | None:
        m = self.catalogue.get(name)
        if m is not None and not (m.hidden and m.name in self._removed):
            return m
        return next((m for m in self.catalogue.values() if name in m.aliases), None)

    def _child_profile(self, m: RouterModel) -> Profile:
        """The model's engine: the command line's profile, or the preset's ``sim-profile`` (a key only the
        simulator reads: one simulated node can hold a dense and a MoE model), with the preset's
        ``parallel``/``np``, ``ctx-size``/``c``, ``batch-size``/``b`` and ``ubatch-size``/``ub``."""
        p = self.profile
        named = m.preset.get("sim-profile")
        if named:
            try:
                p = load_profile(named)
            except ProfileError:
                p = self.profile  # an unknown name keeps the command line's profile (its /props says which)
        slots = m.preset.get("parallel") or m.preset.get("np")
        ctx = m.preset.get("ctx-size") or m.preset.get("c")
        batch = m.preset.get("batch-size") or m.preset.get("b")
        ubatch = m.preset.get("ubatch-size") or m.preset.get("ub")
        try:
            n = int(slots) if slots else p.server.slots
            total = int(ctx) if ctx else p.server.ctx_tokens
            b = int(batch) if batch else p.server.batch
            ub = min(int(ubatch) if ubatch else p.server.ubatch, b)
        except ValueError:
            return p
        if (n, total, b, ub) == (p.server.slots, p.server.ctx_tokens, p.server.batch, p.server.ubatch):
            return p
        try:
            return p.with_overrides(slots=n, ctx_tokens=total, batch=b, ubatch=ub,
                                    slot_ctx_tokens=0 if n <= 1 else max(total // n, 1))
        except (ValueError, ProfileError):
            return p

    # -- proxying ---------------------------------------------------------------------------------------------

    def _validate(self, name: str, autoload: bool) -> RouterModel | web.Response:
        if not name:
            return _error(400, "model name is missing from the request", "invalid_request_error")
        m = self.find(name)
        if m is None:
            return _error(400, f"model '{name}' not found", "invalid_request_error")
        if not autoload and not m.running:
            return _error(400, "model is not loaded", "invalid_request_error")
        return m

    def _autoload(self, request: web.Request) -> bool:
        v = request.query.get("autoload", "")
        return self.options.models_autoload if not v else v in ("true", "1")

    @staticmethod
    def _client_gone(request: web.Request) -> Callable[[], bool]:
        def gone() -> bool:
            t = request.transport
            return t is None or t.is_closing()

        return gone

    async def _proxy(self, request: web.Request, m: RouterModel, route: str, post: bool) -> web.StreamResponse:
        if m.child is None or m.status != "loaded":
            return _error(503, f"model name={m.name} is not running", "unavailable_error")
        m.req_count += 1
        if post:
            m.last_used = time.monotonic()
        try:
            if self.fake_timing:
                await asyncio.sleep(FAKE_TIMING_S)
            child = m.child
            if child is None:
                return _error(503, f"model name={m.name} is not running", "unavailable_error")
            # a route is the child's attribute path (``generate``, ``tokens.tokenize``)
            handler: Callable[[web.Request], Awaitable[web.StreamResponse]] = operator.attrgetter(route)(child)
            return await handler(request)
        finally:
            m.req_count -= 1
            if post:
                m.last_used = time.monotonic()
            self.scheduler.tick()
            self.scheduler.notify()

    def proxy_get(self, route: str) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def handle(request: web.Request) -> web.StreamResponse:
            autoload = self._autoload(request)
            m = self._validate(request.query.get("model", ""), autoload)
            if isinstance(m, web.Response):
                return m
            if autoload:
                try:
                    await self.scheduler.ensure_ready(m, self._client_gone(request))
                except LoadCancelled:
                    return _error(499, "the client closed the connection", "cancelled")
            return await self._proxy(request, m, route, post=False)

        return handle

    def proxy_post(self, route: str) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def handle(request: web.Request) -> web.StreamResponse:
            body = await self._body(request)
            name = body.get("model")
            autoload = self._autoload(request)
            m = self._validate(name if isinstance(name, str) else "", autoload)
            if isinstance(m, web.Response):
                return m
            conv_id = request.headers.get("X-Conversation-Id", "")
            ticket = 0
            if conv_id:
                self._ticket += 1
                ticket = self._ticket
                self._convs[conv_id] = (m.name, ticket)
            if autoload:
                try:  # a dead socket does not cancel a session request, only a stop does
                    await self.scheduler.ensure_ready(m, None if ticket else self._client_gone(request))
                except LoadCancelled:
                    return _error(499, "the client closed the connection", "cancelled")
            if ticket and self._convs.get(conv_id, ("", 0))[1] != ticket:
                return _error(400, "request cancelled by a stop while the model was loading",
                              "invalid_request_error")
            return await self._proxy(request, m, route, post=True)

        return handle

    # -- router endpoints -------------------------------------------------------------------------------------

    async def health(self, request: web.Request) -> web.Response:
        return _json({"status": "ok"})

    async def router_props(self, request: web.Request) -> web.StreamResponse:
        if request.query.get("model"):
            return await self.proxy_get("props")(request)
        return _json({"role": "router", "max_instances": self.options.models_max,
                      "models_autoload": self.options.models_autoload, "model_alias": "llama-server",
                      "model_path": "none", "default_generation_settings": {"params": None, "n_ctx": 0},
                      "ui_settings": {}, "build_info": BUILD_INFO,
                      "cors_proxy_enabled": self.options.ui_mcp_proxy})  # fmt: skip

    async def router_models(self, request: web.Request) -> web.Response:
        if request.query.get("reload"):
            try:
                self.load_models()
            except ValueError as exc:
                return _error(500, str(exc), "server_error")
        t = int(time.time())
        data = []
        for m in self.catalogue.values():
            if m.hidden:
                continue
            status: dict[str, Any] = {"value": m.status, "args": self._child_args(m)}
            if m.preset:
                status["preset"] = f"[{m.name}]\n" + "".join(
                    f"{k} = {v}\n" for k, v in m.preset.items() if k not in ("alias", "tags", "host", "port"))
            item: dict[str, Any] = {
                "id": m.name, "aliases": list(m.aliases), "tags": list(m.tags), "object": "model",
                "owned_by": "llamacpp", "created": t, "status": status,
                "architecture": {"input_modalities": ["text"], "output_modalities": ["text"]},
                "source": m.source, "can_remove": m.source == "cache",
            }  # fmt: skip
            if m.child is not None:
                child_view = (await m.child.models(request)).text
                meta = json.loads(child_view or "{}").get("data", [{}])[0].get("meta")
                if meta is not None:
                    item["meta"] = meta
            data.append(item)
        return _json({"data": data, "object": "list"})

    def _child_args(self, m: RouterModel) -> list[str]:
        """The argv the real router lists for a model (``status.args``): what its child is started with, as
        far as the simulator models it, so a reader can tell the child's slots and KV layout."""
        p = self._child_profile(m)
        args = ["llama-server", "--host", "127.0.0.1", "--port", "0", "--alias", m.name]
        if self.options.metrics:
            args.append("--metrics")
        args += ["--ctx-size", str(p.server.ctx_tokens), "--parallel", str(p.server.slots)]
        if p.server.slots > 1 and p.server.slot_ctx_tokens == 0:
            args.append("--kv-unified")
        source = m.preset.get("model") or m.preset.get("hf-repo")
        if source:
            args += ["--model" if m.preset.get("model") else "--hf-repo", source]
        return args

    async def models_load(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        m = self.find(str(body.get("model", "")))
        if m is None:
            return _error(404, "model is not found", "not_found_error")
        if m.running:
            return _error(400, "model is already running", "invalid_request_error")
        try:
            await self.scheduler.load(m)
        except RuntimeError as exc:
            return _error(500, str(exc), "server_error")
        return _json({"success": True})

    async def models_unload(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        m = self.find(str(body.get("model", "")))
        if m is None:
            return _error(400, "model is not found", "invalid_request_error")
        if not m.running and m.status != "downloading":
            return _error(400, "model is not running", "invalid_request_error")
        await self.scheduler.unload(m)
        return _json({"success": True})

    async def models_sse(self, request: web.Request) -> web.StreamResponse:
        q: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.scheduler.subscribers.append(q)
        resp = web.StreamResponse(status=200, headers=SSE_HEADERS)
        try:
            with contextlib.suppress(ConnectionResetError):
                await resp.prepare(request)
                while True:
                    msg = await q.get()
                    await resp.write(b"data: " + json.dumps(msg, separators=(",", ":")).encode() + b"\n\n")
        finally:
            self.scheduler.subscribers.remove(q)
        return resp

    async def models_download(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        name = body.get("model")
        if not isinstance(name, str) or not name:
            return _error(400, "model must be a non-empty string", "invalid_request_error")
        repo, _ = _repo_tag(name)
        if repo.count("/") != 1:
            return _error(400, "model validation failed, unable to download", "invalid_request_error")
        existing = self.catalogue.get(name)
        if existing is not None and name not in self._removed:
            return _error(400, f"model '{name}' already exists", "invalid_request_error")
        self._removed.discard(name)
        m = RouterModel(name, "cache", {"hf-repo": name}, status="downloading")
        self.catalogue[name] = m
        self.scheduler.spawn(self._download(m))
        return _json({"success": True})

    async def _download(self, m: RouterModel, steps: int = 4) -> None:
        total = 1 << 20
        for i in range(1, steps + 1):
            await asyncio.sleep(self.options.model_load_s / steps)
            url = f"simulated://{m.name}"
            self.scheduler.event("download_progress", m.name, {"progress": {url: {"done": total * i // steps,
                                                                          "total": total}}})
        m.status = "unloaded"
        self._downloaded[m.name] = m
        self.scheduler.event("download_finished", m.name)
        self.scheduler.notify()

    async def models_delete(self, request: web.Request) -> web.Response:
        name = request.query.get("model", "")
        if not name:
            return _error(400, "model must be a non-empty string", "invalid_request_error")
        m = self.catalogue.get(name)
        if m is None or (m.hidden and name in self._removed):
            return _error(500, f"model name={name} is not found", "server_error")
        if m.source != "cache":
            return _error(500, f"model name={name} is not removable (not from cache)", "server_error")
        await self.scheduler.unload(m)
        self._downloaded.pop(name, None)
        self._removed.add(name)  # the simulator never deletes files: it only stops listing the model
        if name in self.catalogue:
            del self.catalogue[name]
        return _json({"success": True})

    # -- conversation streams ---------------------------------------------------------------------------------

    def _conv_owner(self, conv_id: str) -> tuple[RouterModel | None, RouterModel | None]:
        """(the loaded model owning a conversation, the model it is tracked to) for ``conv_id``."""
        tracked = self._convs.get(conv_id)
        m = self.find(tracked[0]) if tracked else None
        return (m if m is not None and m.status == "loaded" and m.child is not None else None), m

    async def router_stream_get(self, request: web.Request) -> web.StreamResponse:
        conv_id = request.query.get("conv_id", "")
        if not conv_id:
            return _error(400, "Missing conversation id in path", "invalid_request_error")
        owner, tracked = self._conv_owner(conv_id)
        if owner is None or owner.child is None:
            if tracked is not None and tracked.status in ("loading", "downloading", "downloaded"):
                return _error(503, "Stream owner model is loading, retry later", "unavailable_error")
            return _error(404, "Stream not found or expired", "not_found_error")
        return await owner.child.stream_get(request)

    async def router_stream_delete(self, request: web.Request) -> web.StreamResponse:
        conv_id = request.query.get("conv_id", "")
        if not conv_id:
            return _error(400, "Missing conversation id in path", "invalid_request_error")
        owner, _ = self._conv_owner(conv_id)
        if owner is not None and owner.child is not None:
            owner.child.sessions.evict_and_cancel(conv_id)
        self._convs.pop(conv_id, None)  # cancels a request parked while the model loads
        self.scheduler.notify()
        return web.Response(status=204, content_type="application/json", headers=JSON_HEADERS)

    async def router_streams_lookup(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return _json([])
        raw = body.get("conversation_ids") if isinstance(body, dict) else None
        ids = [v for v in raw if isinstance(v, str) and v] if isinstance(raw, list) else []
        out: list[dict[str, Any]] = []
        for cid in ids:
            owner, _ = self._conv_owner(cid)
            if owner is not None and owner.child is not None:
                out += owner.child.sessions.lookup([cid])
        return _json(out)


_POST_ROUTES = {
    "/completion": "generate", "/completions": "generate", "/v1/completions": "generate",
    "/chat/completions": "generate", "/v1/chat/completions": "generate",
    "/tokenize": "tokens.tokenize", "/detokenize": "tokens.detokenize", "/apply-template": "tokens.apply_template",
    "/chat/completions/input_tokens": "tokens.input_tokens",
    "/v1/chat/completions/input_tokens": "tokens.input_tokens",
    "/embedding": "tokens.embeddings", "/embeddings": "tokens.embeddings", "/v1/embeddings": "tokens.embeddings",
}  # fmt: skip
_GET_ROUTES = {"/metrics": "metrics", "/slots": "slots"}


def create_router_app(profile: Profile, options: ServerOptions, env: dict[str, str] | None = None) -> web.Application:
    router = RouterApp(profile, options, env)
    app = base_app(router)
    r = app.router
    for path, route in _POST_ROUTES.items():
        r.add_post(path, router.proxy_post(route))
    for path, route in _GET_ROUTES.items():
        r.add_get(path, router.proxy_get(route))
    r.add_get("/health", router.health)
    r.add_get("/v1/health", router.health)
    r.add_get("/props", router.router_props)
    r.add_get("/models", router.router_models)
    r.add_get("/v1/models", router.router_models)
    r.add_post("/models", router.models_download)
    r.add_delete("/models", router.models_delete)
    r.add_post("/models/load", router.models_load)
    r.add_post("/models/unload", router.models_unload)
    r.add_get("/models/sse", router.models_sse)
    r.add_get("/v1/stream", router.router_stream_get)
    r.add_delete("/v1/stream", router.router_stream_delete)
    r.add_post("/v1/streams/lookup", router.router_streams_lookup)
    if options.ui:
        for path in UI_PATHS:
            r.add_get(path, router.ui)
        r.add_get("/_app/{tail:.*}", router.ui)
    return app
