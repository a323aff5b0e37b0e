"""The HTTP edge of the simulator: llama-server's endpoints on aiohttp (generation here; the token utility
routes in ``simulator.token_routes``, the conversation streams in ``simulator.stream_routes``, the ``/sim/*``
ground truth in ``simulator.truth_routes``).

Routes stay thin: parse the body, hand ``RequestSpec``s to the ``RealTimeRuntime``, and write what it
emits using the ``payloads`` builders. aiohttp's own server is used because it streams thousands of small
SSE writes per second on one core (one ``write`` per token, coalesced when several tokens are ready).
Faults from the ``FaultSchedule`` are applied here, at the edge, never inside the engine.

What llama-server does at its edge (API keys, CORS, unknown routes, the web UI) is ``simulator.edge``, which
``SimulatorApp`` is built on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
import uuid
from collections.abc import Sequence
from typing import Any

from aiohttp import web

from satbench.simulator.dropin import ServerOptions
from satbench.simulator.edge import UI_PATHS, SimulatorEdge
from satbench.simulator.engine import ContextLimitError, Emission, Request, RequestSpec
from satbench.simulator.faults import FaultSchedule
from satbench.simulator.generation_body import GenerationTask, whole_body
from satbench.simulator.payloads import (
    ChatIds,
    completion_chunk,
    completion_final,
    completion_progress_chunk,
    merge_settings,
    new_completion_id,
    sse,
    timings,
)
from satbench.simulator.profile import Profile
from satbench.simulator.requests import (
    RequestError,
    chat_prompt_text,
    check_media,
    check_messages,
    check_response_format,
    prompt_ids,
    split_prompts,
)
from satbench.simulator.runtime import RealTimeRuntime
from satbench.simulator.state_views import (
    BUILD_INFO,
    metrics_text,
    models_view,
    props_view,
    slots_view,
)
from satbench.simulator.stream_routes import (
    JSON_HEADERS,
    SSE_HEADERS,
    ConversationStreams,
    error_response,
    json_body,
    json_response,
    wait_finished,
)
from satbench.simulator.streams import SessionWriter
from satbench.simulator.token_routes import TokenRoutes
from satbench.simulator.tokens import BOS_ID, detokenize, ids_digest
from satbench.simulator.truth_routes import GroundTruthRoutes

__all__ = ["RUNTIME_KEY", "SimulatorApp", "base_app", "create_app"]

log = logging.getLogger(__name__)

METRICS_501 = "This server does not support metrics endpoint. Start it with `--metrics`"
SLOTS_501 = "This server does not support slots endpoint. Start it with `--slots`"
GENERATION_PATHS = (
    "/completion",
    "/completions",
    "/v1/completions",
    "/chat/completions",
    "/v1/chat/completions",
)
_NO_SEED = (-1, 4294967295)


_json = json_response
_error = error_response



class SimulatorApp(SimulatorEdge):
    def __init__(
        self, profile: Profile, runtime: RealTimeRuntime | None = None, options: ServerOptions | None = None
    ) -> None:
        self.profile = profile
        self.options = options or ServerOptions()
        self.runtime = runtime or RealTimeRuntime(profile)
        self.faults = FaultSchedule(profile.faults, profile.server.seed)
        self.runtime.pause_left = self.faults.pause_left  # engine_pause faults stop the engine's loop
        self.runtime.step_scale = self.faults.step_scale  # slowdown faults lengthen every step
        self.created = int(time.time())
        self.model_id = self.options.model_id(profile)
        self._rng = random.Random(profile.server.seed)
        self._task: asyncio.Task[None] | None = None
        self.streams = ConversationStreams()
        self.sessions = self.streams.sessions
        self.stream_get = self.streams.stream_get
        self.stream_delete = self.streams.stream_delete
        self.streams_lookup = self.streams.streams_lookup
        self.tokens = TokenRoutes(self.runtime, model_id=self.model_id, n_embd=profile.model.n_embd,
                                  embeddings_on=self.options.embeddings)
        self.ground_truth = GroundTruthRoutes(self.runtime, profile, self.faults)

    # -- lifecycle ----------------------------------------------------------------------------------------

    async def on_startup(self, app: web.Application) -> None:
        self._task = asyncio.get_running_loop().create_task(self.runtime.run())
        self._task.add_done_callback(self._engine_stopped)

    @staticmethod
    def _engine_stopped(task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("simulator engine loop stopped", exc_info=task.exception())

    async def on_shutdown(self, app: web.Application) -> None:
        self.sessions.cancel_all()
        self.runtime.stop()

    async def on_cleanup(self, app: web.Application) -> None:
        self.runtime.stop()
        if self._task is not None:
            await self._task

    def _t(self) -> float:
        return self.runtime.seconds_since_start()

    # -- generation ---------------------------------------------------------------------------------------

    _body = staticmethod(json_body)

    def _prompts(self, kind: str, body: dict[str, Any]) -> list[tuple[str, tuple[int, ...]]]:
        """(text, token ids) of each prompt of the request, after llama-server's checks."""
        check_response_format(body)
        if kind == "chat":
            check_messages(body.get("messages"))
            check_media(body["messages"], self.options.media_path)
            text = chat_prompt_text(body)
            return [(text, prompt_ids(text))]
        out = []
        for p in split_prompts(body.get("prompt")):
            ids = prompt_ids(p)
            text = p if isinstance(p, str) else p.get("prompt_string", "") if isinstance(p, dict) else detokenize(
                ids[1:] if ids and ids[0] == BOS_ID else ids)
            out.append((str(text), ids))
        return out

    def _n_predict(self, kind: str, body: dict[str, Any]) -> int:
        default = self.options.n_predict
        asked = body.get("max_tokens", body.get("max_completion_tokens", default))
        if kind == "native" or "n_predict" in body:
            asked = body.get("n_predict", asked)
        if asked is None:
            asked = default
        if isinstance(asked, bool) or not isinstance(asked, int | float):
            raise RequestError("n_predict / max_tokens must be an integer")
        return int(asked)  # -n is the default, not a cap (llama-server serves a larger n_predict as asked)

    def _text_key(self, ids: Sequence[int], body: dict[str, Any], choice: int) -> int | None:
        """Keys the generated text: reproducible for greedy sampling or a fixed seed, else per request."""
        temp = body.get("temperature", self.options.temperature)
        seed = body.get("seed")
        if not isinstance(seed, int) or isinstance(seed, bool) or seed in _NO_SEED or seed < 0:
            seed = self.options.seed
        if isinstance(temp, int | float) and not isinstance(temp, bool) and temp <= 0:
            key = ids_digest(ids)
        elif seed is not None:
            key = ids_digest(ids, int(seed) + 1)
        else:
            return None
        return (key * 1000003 + choice) & 0xFFFFFFFF if choice else key

    def _defaults(self) -> dict[str, Any]:
        out: dict[str, Any] = {"temperature": merge_settings({"temperature": self.options.temperature}, {})[
            "temperature"]}
        if self.options.seed is not None:
            out["seed"] = self.options.seed
        return out

    async def generate(self, request: web.Request) -> web.StreamResponse:
        kind = {"/completion": "native", "/completions": "native", "/v1/completions": "text"}.get(
            request.path, "chat"
        )
        body = await self._body(request)
        rid = request.headers.get("X-Request-ID") or uuid.uuid4().hex
        fault = self.faults.hit("http_5xx", self._t())
        if fault is not None:
            return _error(fault.status, "simulated server error (fault injection)", "server_error")
        try:
            prompts = self._prompts(kind, body)
            n_predict = self._n_predict(kind, body)
            n_choices = 1 if kind == "native" else body.get("n", 1)
            if not isinstance(n_choices, int) or isinstance(n_choices, bool) or not 1 <= n_choices <= 128:
                raise RequestError("\"n\" must be an integer between 1 and 128")
            id_slot = body.get("id_slot", -1)
            if not isinstance(id_slot, int) or isinstance(id_slot, bool):
                raise RequestError("\"id_slot\" must be an integer")
        except (RequestError, ValueError, TypeError) as exc:
            return _error(400, str(exc), "invalid_request_error")
        stream_on = bool(body.get("stream", False))
        settings = merge_settings(body, self._defaults())
        settings["timings_per_token"] = bool(body.get("timings_per_token", False))
        user = body.get("user")
        progress = bool(body.get("return_progress", False)) and stream_on
        tasks = [GenerationTask(text, ids, i if len(prompts) > 1 else c) for i, (text, ids) in enumerate(prompts)
                 for c in range(n_choices)]
        lo, hi = self.profile.eos_tokens
        try:
            for t in tasks:
                key = self._text_key(t.ids, body, t.index if n_choices > 1 else 0)
                spec = RequestSpec(
                    request_id=rid if len(tasks) == 1 else f"{rid}-{t.index}",
                    prompt_tokens=len(t.ids),
                    max_tokens=n_predict,
                    ignore_eos=bool(body.get("ignore_eos", False)),
                    user=str(user) if user is not None else None,
                    prompt_ids=t.ids,
                    cache_prompt=bool(body.get("cache_prompt", True)),
                    stop_at=None if key is None else lo + key % (hi - lo + 1),
                    text_key=key,
                    progress=progress,
                    id_slot=id_slot if id_slot >= 0 else -1,
                    params={**settings, "stream": stream_on},
                )
                t.stream = self.runtime.submit(spec)
        except ContextLimitError as exc:
            self._cancel(tasks)
            return _error(400, str(exc), "exceed_context_size_error", n_prompt_tokens=exc.n_prompt_tokens,
                          n_ctx=exc.n_ctx)
        except ValueError as exc:
            self._cancel(tasks)
            return _error(400, str(exc), "invalid_request_error")
        ids = ChatIds(new_completion_id(self._rng), int(time.time()), self.model_id, BUILD_INFO)
        extra = {"X-Request-ID": rid}
        streams = [t.stream for t in tasks if t.stream is not None]
        handed_off = False
        try:
            if not stream_on:
                try:
                    for s in streams:
                        if not await wait_finished(request, s):
                            return _error(499, "the client closed the connection", "cancelled")
                except ConnectionResetError:
                    return _error(503, "simulator shutting down", "unavailable_error")
                return _json(whole_body(kind, body, tasks, ids, self.model_id, self.options.verbose), headers=extra)
            opts = body.get("stream_options")
            include_usage = isinstance(opts, dict) and bool(opts.get("include_usage"))
            # vLLM's per-chunk counts, honoured where the simulator streams as vLLM does (several tokens an
            # event); llama-server ignores the option
            continuous = self.profile.server.stream_interval > 1 and isinstance(opts, dict) \
                and bool(opts.get("continuous_usage_stats"))
            conv_id = request.headers.get("X-Conversation-Id", "")
            if conv_id:  # a resumable session: generated into its buffer, whatever becomes of this client
                per_token = settings["timings_per_token"]
                handed_off = True
                return await self.streams.start(
                    request, conv_id,
                    lambda w: self._stream(request, w, tasks, kind, ids, include_usage, per_token, continuous),
                    lambda: self._cancel(tasks), extra)
            resp = web.StreamResponse(status=200, headers={**SSE_HEADERS, **extra})
            with contextlib.suppress(ConnectionResetError):  # the client went away: its slot is freed below
                await self._stream(request, resp, tasks, kind, ids, include_usage, settings["timings_per_token"],
                                   continuous)
            return resp
        finally:
            if not handed_off:
                self._cancel(tasks)

    def _cancel(self, tasks: Sequence[GenerationTask]) -> None:
        for t in tasks:
            if t.stream is not None:
                self.runtime.cancel(t.stream)

    async def _stream(
        self,
        request: web.Request,
        resp: web.StreamResponse | SessionWriter,
        tasks: Sequence[GenerationTask],
        kind: str,
        ids: ChatIds,
        include_usage: bool,
        per_token: bool,
        continuous: bool = False,
    ) -> None:
        """Streams the tasks' emissions; with ``[server] stream_interval`` k > 1 an event carries k tokens (the
        first token alone, at once; the last event what is left), as vLLM's and SGLang's ``--stream-interval``."""
        await resp.prepare(request)
        interval = self.profile.server.stream_interval
        streams = [t.stream for t in tasks if t.stream is not None]
        reqs = [s.request for s in streams]
        wake = asyncio.Event()
        for s in streams:
            s.event = wake
        t = self._t()
        drop = self.faults.hit("drop_stream", t)
        stall = self.faults.hit("stall", t)
        bad = self.faults.hit("malformed_sse", t)
        sent = 0
        done = [False] * len(streams)
        shown = [0] * len(streams)  # tokens each stream's events carried so far
        while True:
            batch: list[tuple[int, Emission]] = []
            while not batch:
                for i, s in enumerate(streams):
                    if s.pending:
                        batch += [(i, e) for e in s.pending]
                        s.pending = []
                    elif s.closed and not done[i]:
                        raise ConnectionResetError("simulator shutting down")
                if not batch:
                    wake.clear()
                    await wake.wait()
            parts: list[bytes] = []
            carried: list[tuple[int, int]] = []  # (request seq, tokens) of this write's token events
            for i, e in batch:
                req, index = e.request, tasks[i].index
                if e.progress >= 0:
                    parts.append(self._progress_chunk(kind, ids, req, e, index))
                    continue
                held = e.n_out > 1 and e.n_out - shown[i] < interval and not e.finished
                if e.n_out > shown[i] and not held:
                    carried.append((req.seq, e.n_out - shown[i]))
                    first, shown[i] = shown[i] + 1, e.n_out
                    timing = timings(req, e.n_out, e.at) if per_token else None
                    if kind == "chat" and e.n_out == 1:
                        parts.append(ids.chat_role_chunk(index))
                    if kind == "native":
                        parts.append(completion_chunk(req, e.n_out, index, timing, first))
                    elif kind == "text":
                        parts.append(ids.text_chunk(req, e.n_out, index, timing, first, continuous))
                    else:
                        parts.append(ids.chat_chunk(req, e.n_out, index, timing, first, continuous))
                    sent += 1
                    if bad is not None and sent == bad.after_tokens:
                        parts.append(b'data: {"index":0,"content":\n\n')
                    if drop is not None and sent >= drop.after_tokens:
                        await resp.write(b"".join(parts))
                        self._abort(request)
                        return
                if e.finished:
                    done[i] = True
                    if kind == "native":
                        parts.append(sse(completion_final(req, self.model_id, tasks[i].prompt_text, True,
                                                          index=index)))
            final = all(done)
            if final and kind != "native":
                if kind == "text":
                    parts += [sse(ids.text_final(reqs, True)), b"data: [DONE]\n\n"]
                else:
                    finals = ids.chat_finals(reqs, include_usage)
                    parts += [*(sse(c) for c in finals), b"data: [DONE]\n\n"]
            await resp.write(b"".join(parts))
            if carried:
                at = self.runtime.clock()
                self.runtime.write_history.extend((at, seq, n) for seq, n in carried)
            if stall is not None and sent >= stall.after_tokens:
                await asyncio.sleep(stall.delay_s)
                stall = None
            if final:
                await resp.write_eof()
                return

    @staticmethod
    def _progress_chunk(kind: str, ids: ChatIds, req: Request, e: Emission, index: int) -> bytes:
        if kind == "native":
            return completion_progress_chunk(req, e.progress, e.at, index)
        if kind == "text":
            return ids.text_progress_chunk(req, e.progress, e.at, index)
        return ids.chat_progress_chunk(req, e.progress, e.at, index)

    @staticmethod
    def _abort(request: web.Request) -> None:
        transport = request.transport
        if transport is not None:
            transport.abort()

    # -- llama-server status endpoints --------------------------------------------------------------------

    async def health(self, request: web.Request) -> web.Response:
        if self._task is not None and self._task.done():
            return _error(503, "simulator engine loop stopped", "unavailable_error")
        return _json({"status": "ok"})

    def _slots_on(self, t: float) -> bool:
        return self.options.slots and self.faults.active("slots_disabled", t) is None

    def _metrics_on(self, t: float) -> bool:
        return self.options.metrics and self.faults.active("metrics_disabled", t) is None

    async def props(self, request: web.Request) -> web.Response:
        t = self._t()
        return _json(props_view(self.profile, self._slots_on(t), self._metrics_on(t), self.options))

    async def slots(self, request: web.Request) -> web.Response:
        if not self._slots_on(self._t()):
            return _error(501, SLOTS_501, "not_supported_error")
        engine = self.runtime.engine
        if request.query.get("fail_on_no_slot") and engine.busy_slots >= len(engine.slots):
            return _error(503, "no slot available", "unavailable_error")
        return _json(slots_view(engine, self.runtime.last_in_slot))

    async def metrics(self, request: web.Request) -> web.Response:
        t = self._t()
        if not self._metrics_on(t):
            return _error(501, METRICS_501, "not_supported_error")
        slow = self.faults.active("slow_metrics", t)
        if slow is not None:
            await asyncio.sleep(slow.delay_s)
        return web.Response(
            body=metrics_text(self.runtime.engine).encode(),
            headers={**JSON_HEADERS, "Content-Type": "text/plain; version=0.0.4",
                     "Process-Start-Time-Unix": str(self.created)},
        )

    async def models(self, request: web.Request) -> web.Response:
        return _json(models_view(self.profile, self.created, self.options))

RUNTIME_KEY = web.AppKey("simulator", SimulatorApp)


def base_app(owner: Any) -> web.Application:
    """The aiohttp application around ``owner`` (a single-model ``SimulatorApp`` or the router): its edge
    middleware, its lifecycle hooks and its response hook; routes are the caller's."""
    app = web.Application(client_max_size=64 * 1024 * 1024, middlewares=[owner.edge])
    app[RUNTIME_KEY] = owner
    app.on_startup.append(owner.on_startup)
    app.on_shutdown.append(owner.on_shutdown)
    app.on_cleanup.append(owner.on_cleanup)
    app.on_response_prepare.append(owner.on_prepare)
    return app


def create_app(
    profile: Profile, runtime: RealTimeRuntime | None = None, options: ServerOptions | None = None
) -> web.Application:
    sim = SimulatorApp(profile, runtime, options)
    app = base_app(sim)
    r = app.router
    for path in GENERATION_PATHS:
        r.add_post(path, sim.generate)
    r.add_get("/health", sim.health)
    r.add_get("/v1/health", sim.health)
    r.add_get("/props", sim.props)
    r.add_get("/slots", sim.slots)
    r.add_get("/metrics", sim.metrics)
    r.add_get("/v1/models", sim.models)
    r.add_get("/models", sim.models)
    r.add_post("/tokenize", sim.tokens.tokenize)
    r.add_post("/detokenize", sim.tokens.detokenize)
    r.add_post("/apply-template", sim.tokens.apply_template)
    r.add_post("/chat/completions/input_tokens", sim.tokens.input_tokens)
    r.add_post("/v1/chat/completions/input_tokens", sim.tokens.input_tokens)
    for path in ("/embedding", "/embeddings", "/v1/embeddings"):
        r.add_post(path, sim.tokens.embeddings)
    if sim.options.ui:
        for path in UI_PATHS:
            r.add_get(path, sim.ui)
        r.add_get("/_app/{tail:.*}", sim.ui)
    if sim.options.ui_mcp_proxy:
        r.add_get("/cors-proxy", sim.cors_proxy)
    r.add_get("/v1/stream", sim.stream_get)
    r.add_delete("/v1/stream", sim.stream_delete)
    r.add_post("/v1/streams/lookup", sim.streams_lookup)
    truth = sim.ground_truth
    r.add_get("/sim/truth", truth.truth)
    r.add_get("/sim/capacity", truth.capacity)
    r.add_get("/sim/gpu", truth.gpu)
    r.add_get("/sim/faults", truth.get_faults)
    r.add_post("/sim/faults", truth.post_faults)
    return app
