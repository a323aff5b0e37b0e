"""The HTTP edge of the simulator: llama-server's endpoints on aiohttp, plus the ``/sim/*`` ground truth.

Routes stay thin: parse the body, hand a ``RequestSpec`` to the ``RealTimeRuntime``, and write what it
emits using the ``payloads`` builders. aiohttp's own server is used because it streams thousands of small
SSE writes per second on one core (one ``write`` per token, coalesced when several tokens are ready).
Faults from the ``FaultSchedule`` are applied here, at the edge, never inside the engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
import uuid
from typing import Any

from aiohttp import web

from simulator.capacity import CapacityError, capacity_curve
from simulator.engine import ContextLimitError, RequestSpec
from simulator.faults import FaultSchedule, faults_from_json
from simulator.payloads import (
    ChatIds,
    completion_chunk,
    completion_final,
    error_body,
    new_completion_id,
    sse,
)
from simulator.profile import Profile, ProfileError
from simulator.runtime import RealTimeRuntime, Stream
from simulator.state_views import (
    BUILD_INFO,
    active_record_json,
    gpu_view,
    metrics_text,
    models_view,
    props_view,
    slots_view,
    truth_record_json,
)
from simulator.tokens import count_prompt_tokens, render_chat, tokenize

__all__ = ["RUNTIME_KEY", "SimulatorApp", "create_app"]

log = logging.getLogger(__name__)

SSE_HEADERS = {
    "Server": "llama.cpp",
    "Access-Control-Allow-Origin": "",
    "X-Accel-Buffering": "no",
    "Content-Type": "text/event-stream",
}
METRICS_501 = "This server does not support metrics endpoint. Start it with `--metrics`"
GENERATION_PATHS = (
    "/completion",
    "/completions",
    "/v1/completions",
    "/chat/completions",
    "/v1/chat/completions",
)
JSON_HEADERS = {"Server": "llama.cpp", "Access-Control-Allow-Origin": ""}


def _json(obj: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    body = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    return web.Response(
        text=body, status=status, content_type="application/json", headers={**JSON_HEADERS, **(headers or {})}
    )


def _error(code: int, message: str, kind: str) -> web.Response:
    return _json(error_body(code, message, kind), status=code)


class SimulatorApp:
    def __init__(self, profile: Profile, runtime: RealTimeRuntime | None = None) -> None:
        self.profile = profile
        self.runtime = runtime or RealTimeRuntime(profile)
        self.faults = FaultSchedule(profile.faults, profile.server.seed)
        self.created = int(time.time())
        self._rng = random.Random(profile.server.seed)
        self._task: asyncio.Task[None] | None = None

    # -- lifecycle ----------------------------------------------------------------------------------------

    async def on_startup(self, app: web.Application) -> None:
        self._task = asyncio.get_running_loop().create_task(self.runtime.run())
        self._task.add_done_callback(self._engine_stopped)

    @staticmethod
    def _engine_stopped(task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("simulator engine loop stopped", exc_info=task.exception())

    async def on_shutdown(self, app: web.Application) -> None:
        self.runtime.stop()

    async def on_cleanup(self, app: web.Application) -> None:
        self.runtime.stop()
        if self._task is not None:
            await self._task

    def _t(self) -> float:
        return self.runtime.seconds_since_start()

    # -- generation ---------------------------------------------------------------------------------------

    async def _body(self, request: web.Request) -> dict[str, Any]:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise web.HTTPBadRequest(
                text=json.dumps(error_body(400, f"invalid JSON body: {exc}", "invalid_request_error")),
                content_type="application/json",
            ) from exc
        if not isinstance(body, dict):
            raise web.HTTPBadRequest(
                text=json.dumps(error_body(400, "body must be a JSON object", "invalid_request_error")),
                content_type="application/json",
            )
        return body

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
            if kind == "chat":
                prompt_text = render_chat(body.get("messages"))
                n_prompt = count_prompt_tokens(prompt_text)
            else:
                prompt = body.get("prompt")
                n_prompt = count_prompt_tokens(prompt)
                prompt_text = prompt if isinstance(prompt, str) else ""
            default_max = body.get("max_tokens", body.get("max_completion_tokens", -1))
            n_predict = int(body.get("n_predict", default_max) if kind == "native" else default_max)
            if kind != "native" and "n_predict" in body:
                n_predict = int(body["n_predict"])
        except (ValueError, TypeError) as exc:
            return _error(400, str(exc), "invalid_request_error")
        user = body.get("user")
        spec = RequestSpec(
            request_id=rid,
            prompt_tokens=n_prompt,
            max_tokens=n_predict,
            ignore_eos=bool(body.get("ignore_eos", False)),
            user=str(user) if user is not None else None,
        )
        try:
            stream = self.runtime.submit(spec)
        except ContextLimitError as exc:
            return _error(400, str(exc), "exceed_context_size_error")
        ids = ChatIds(new_completion_id(self._rng), int(time.time()), self.profile.model.name, BUILD_INFO)
        extra = {"X-Request-ID": rid}
        try:
            if not body.get("stream", False):
                try:
                    while not stream.finished:
                        await stream.next()
                except ConnectionResetError:
                    return _error(503, "simulator shutting down", "unavailable_error")
                req = stream.request
                if kind == "native":
                    body_out = completion_final(req, self.profile.model.name, prompt_text, False)
                    return _json(body_out, headers=extra)
                if kind == "text":
                    return _json(ids.text_final(req, False), headers=extra)
                return _json(ids.chat_body(req), headers=extra)
            opts = body.get("stream_options")
            include_usage = isinstance(opts, dict) and bool(opts.get("include_usage"))
            resp = web.StreamResponse(status=200, headers={**SSE_HEADERS, **extra})
            with contextlib.suppress(ConnectionResetError):  # the client went away: its slot is freed below
                await self._stream(request, resp, stream, kind, ids, prompt_text, include_usage)
            return resp
        finally:
            self.runtime.cancel(stream)

    async def _stream(
        self,
        request: web.Request,
        resp: web.StreamResponse,
        stream: Stream,
        kind: str,
        ids: ChatIds,
        prompt_text: str,
        include_usage: bool,
    ) -> None:
        await resp.prepare(request)
        req = stream.request
        t = self._t()
        drop = self.faults.hit("drop_stream", t)
        stall = self.faults.hit("stall", t)
        bad = self.faults.hit("malformed_sse", t)
        sent = 0
        while True:
            emissions = await stream.next()
            parts: list[bytes] = []
            final = False
            for e in emissions:
                if e.n_out > 0:
                    if kind == "chat" and e.n_out == 1:
                        parts.append(ids.chat_role_chunk())
                    if kind == "native":
                        parts.append(completion_chunk(req, e.n_out))
                    elif kind == "text":
                        parts.append(ids.text_chunk(req, e.n_out))
                    else:
                        parts.append(ids.chat_chunk(req, e.n_out))
                    sent += 1
                    if bad is not None and sent == bad.after_tokens:
                        parts.append(b'data: {"index":0,"content":\n\n')
                    if drop is not None and sent >= drop.after_tokens:
                        await resp.write(b"".join(parts))
                        self._abort(request)
                        return
                final = final or e.finished
            if final:
                parts.extend(self._finals(req, kind, ids, prompt_text, include_usage))
            await resp.write(b"".join(parts))
            if stall is not None and sent >= stall.after_tokens:
                await asyncio.sleep(stall.delay_s)
                stall = None
            if final:
                await resp.write_eof()
                return

    def _finals(
        self, req: Any, kind: str, ids: ChatIds, prompt_text: str, include_usage: bool
    ) -> list[bytes]:
        if kind == "native":
            return [sse(completion_final(req, self.profile.model.name, prompt_text, True))]
        if kind == "text":
            return [sse(ids.text_final(req, True)), b"data: [DONE]\n\n"]
        return [*(sse(c) for c in ids.chat_finals(req, include_usage)), b"data: [DONE]\n\n"]

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

    async def props(self, request: web.Request) -> web.Response:
        t = self._t()
        return _json(
            props_view(
                self.profile,
                self.faults.active("slots_disabled", t) is None,
                self.faults.active("metrics_disabled", t) is None,
            )
        )

    async def slots(self, request: web.Request) -> web.Response:
        if self.faults.active("slots_disabled", self._t()) is not None:
            return _error(501, "This server does not support slots endpoint.", "not_supported_error")
        engine = self.runtime.engine
        if request.query.get("fail_on_no_slot") and engine.busy_slots >= len(engine.slots):
            return _error(503, "no slot available", "unavailable_error")
        return _json(slots_view(engine, self.runtime.last_in_slot))

    async def metrics(self, request: web.Request) -> web.Response:
        t = self._t()
        if self.faults.active("metrics_disabled", t) is not None:
            return _error(501, METRICS_501, "not_supported_error")
        slow = self.faults.active("slow_metrics", t)
        if slow is not None:
            await asyncio.sleep(slow.delay_s)
        return web.Response(
            body=metrics_text(self.runtime.engine).encode(),
            headers={**JSON_HEADERS, "Content-Type": "text/plain; version=0.0.4"},
        )

    async def models(self, request: web.Request) -> web.Response:
        return _json(models_view(self.profile, self.created))

    async def tokenize_route(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        return _json({"tokens": tokenize(str(body.get("content", "")))})

    # -- simulator ground truth ---------------------------------------------------------------------------

    async def truth(self, request: web.Request) -> web.Response:
        q = request.query
        tm = self.runtime.time_map
        try:
            since = float(q.get("since", "0"))
            limit = int(q.get("limit", "100000"))
            capacity = self._capacity(q) if q.get("capacity", "1") != "0" else None
        except (ValueError, CapacityError) as exc:
            return _error(400, str(exc), "invalid_request_error")
        engine = self.runtime.engine
        records = [truth_record_json(r, tm) for r in engine.truth_since(since - tm.offset)]
        truncated = len(records) > limit
        history_full = len(engine.truth) == engine.truth.maxlen
        return _json(
            {
                "simulated": True,
                "profile": self.profile.name,
                "now": round(time.time(), 6),
                "started_at": tm.unix(tm.started_mono),
                "since": since,
                "history_limit": engine.truth.maxlen,
                "history_full": history_full,
                "truncated": truncated,
                "waiting": len(engine.waiting),
                "in_flight": engine.busy_slots,
                "timing": self.runtime.timing_stats().to_json(),
                "requests": records[-limit:] if truncated else records,
                "active": [
                    active_record_json(r, tm)
                    for r in [*(s for s in engine.slots if s is not None), *engine.waiting]
                ],
                "capacity": capacity,
            }
        )

    def _capacity(self, q: Any) -> dict[str, Any]:
        p = int(q.get("prompt_tokens", "64"))
        o = int(q.get("output_tokens", "64"))
        conc = [int(x) for x in q.get("concurrency", "1,2,4,8").split(",") if x.strip()]
        if not conc or len(conc) > 64 or any(c <= 0 or c > 4096 for c in conc):
            raise ValueError("concurrency must be a comma list of 1..64 positive integers <= 4096")
        points = capacity_curve(self.profile, p, o, conc)
        return {"prompt_tokens": p, "output_tokens": o, "points": [pt.to_json() for pt in points]}

    async def capacity(self, request: web.Request) -> web.Response:
        try:
            return _json(self._capacity(request.query))
        except (ValueError, CapacityError) as exc:
            return _error(400, str(exc), "invalid_request_error")

    async def gpu(self, request: web.Request) -> web.Response:
        return _json(gpu_view(self.runtime.engine, time.time()))

    async def get_faults(self, request: web.Request) -> web.Response:
        return _json({"now_s": round(self._t(), 6), "faults": self.faults.to_json()})

    async def post_faults(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        try:
            faults, append = faults_from_json(body, self._t())
        except (ValueError, ProfileError) as exc:
            return _error(400, str(exc), "invalid_request_error")
        self.faults.set(faults, append=append)
        return await self.get_faults(request)


RUNTIME_KEY = web.AppKey("simulator", SimulatorApp)


def create_app(profile: Profile, runtime: RealTimeRuntime | None = None) -> web.Application:
    sim = SimulatorApp(profile, runtime)
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app[RUNTIME_KEY] = sim
    app.on_startup.append(sim.on_startup)
    app.on_shutdown.append(sim.on_shutdown)
    app.on_cleanup.append(sim.on_cleanup)
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
    r.add_post("/tokenize", sim.tokenize_route)
    r.add_get("/sim/truth", sim.truth)
    r.add_get("/sim/capacity", sim.capacity)
    r.add_get("/sim/gpu", sim.gpu)
    r.add_get("/sim/faults", sim.get_faults)
    r.add_post("/sim/faults", sim.post_faults)
    return app
