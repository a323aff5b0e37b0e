"""The simulator's HTTP edge, as llama-server's: API keys (``401 authentication_error``; ``/health``,
``/models`` and the web UI stay public), CORS (the preflight answers every ``OPTIONS``; the origin is
reflected when ``--cors-origins`` allows it), a JSON ``404 not_found_error`` for unknown routes, the
placeholder web UI and ``--ui-mcp-proxy``. ``SimulatorEdge`` is what ``simulator.server.SimulatorApp`` (and
its options) is built on; the generation routes are the server's."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable

from aiohttp import web

from satbench.simulator.dropin import ServerOptions
from satbench.simulator.state_views import BUILD_INFO
from satbench.simulator.stream_routes import JSON_HEADERS, error_response, json_response

__all__ = ["PUBLIC_PATHS", "UI_HTML", "UI_PATHS", "SimulatorEdge", "not_found"]

PUBLIC_PATHS = {"/health", "/v1/health", "/models", "/v1/models", "/api/tags"}
UI_PATHS = ("/", "/index.html", "/sw.js", "/manifest.webmanifest")
_LOCAL_ORIGIN = re.compile(r"^https?://(localhost|127\.0\.0\.1|\[::1\])(:\d+)?$")
UI_HTML = (
    "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>satbench simulator</title></head>"
    "<body><p>satbench simulator: a simulated llama-server. Its API is llama-server's; there is no chat "
    "UI here.</p></body></html>\n"
)

_json = json_response
_error = error_response


def not_found() -> web.Response:
    # field order as llama-server's (message, type, code)
    return _json({"error": {"message": "File Not Found", "type": "not_found_error", "code": 404}}, status=404)


class SimulatorEdge:
    """The edge's handlers and middleware over ``options`` (module docstring)."""

    options: ServerOptions

    # -- the edge: API keys, CORS, unknown routes ----------------------------------------------------------

    def _public(self, request: web.Request) -> bool:
        path = request.path
        if path in PUBLIC_PATHS or path.startswith("/sim/"):
            return True
        return self.options.ui and request.method == "GET" and (path in UI_PATHS or path.startswith("/_app/"))

    def _authorised(self, request: web.Request) -> bool:
        auth = request.headers.get("Authorization", "")
        key = auth[len("Bearer "):] if auth.startswith("Bearer ") else request.headers.get("X-Api-Key", "")
        return key in self.options.api_keys

    def cors_origin(self, origin: str | None) -> str | None:
        """The ``Access-Control-Allow-Origin`` value for a request's ``Origin`` (None: leave it out)."""
        if origin is None:
            return ""
        allowed = self.options.cors_origins
        if allowed is None or "*" in allowed or origin in allowed:
            return origin
        if "localhost" in allowed and _LOCAL_ORIGIN.match(origin):
            return origin
        return None

    def preflight(self, request: web.Request) -> web.Response:
        headers = {"Server": "llama.cpp", "Access-Control-Allow-Credentials": "true",
                   "Access-Control-Allow-Methods": "GET, POST, DELETE, OPTIONS",
                   "Access-Control-Allow-Headers": "*"}  # fmt: skip
        return web.Response(status=200, body=b"", content_type="text/html", headers=headers)

    async def on_prepare(self, request: web.Request, response: web.StreamResponse) -> None:
        value = self.cors_origin(request.headers.get("Origin"))
        if value is None:
            response.headers.popall("Access-Control-Allow-Origin", None)
        else:
            response.headers["Access-Control-Allow-Origin"] = value

    @web.middleware
    async def edge(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if request.method == "OPTIONS":
            return self.preflight(request)
        if self.options.api_keys and not self._public(request) and not self._authorised(request):
            return _json({"error": {"message": "Invalid API Key", "type": "authentication_error", "code": 401}},
                         status=401)
        try:
            return await handler(request)
        except (web.HTTPNotFound, web.HTTPMethodNotAllowed):
            return not_found()

    # -- the web UI -----------------------------------------------------------------------------------------

    async def ui(self, request: web.Request) -> web.Response:
        path = request.path
        if path in ("/", "/index.html"):
            return web.Response(text=UI_HTML, content_type="text/html", headers=JSON_HEADERS)
        if path == "/sw.js":
            return web.Response(text="// satbench simulator\n", content_type="application/javascript",
                                headers=JSON_HEADERS)
        if path == "/manifest.webmanifest":
            return _json({"name": "satbench simulator", "short_name": "satbench", "start_url": "/"})
        return _json({"version": BUILD_INFO})

    async def cors_proxy(self, request: web.Request) -> web.StreamResponse:
        """``--ui-mcp-proxy``: GET ``?url=``, forwarding only the ``x-llama-server-proxy-header-*`` headers."""
        import aiohttp

        url = request.query.get("url", "")
        if not url.startswith(("http://", "https://")):
            return _error(400, "\"url\" must be an http(s) URL", "invalid_request_error")
        prefix = "x-llama-server-proxy-header-"
        headers = {k[len(prefix):]: v for k, v in request.headers.items() if k.lower().startswith(prefix)}
        try:
            async with aiohttp.ClientSession() as session, session.get(
                url, headers=headers, timeout=aiohttp.ClientTimeout(total=30), skip_auto_headers=("User-Agent",)
            ) as upstream:
                data = await upstream.read()
                ctype = upstream.headers.get("Content-Type", "application/octet-stream")
                return web.Response(status=upstream.status, body=data, headers={**JSON_HEADERS, "Content-Type": ctype})
        except (TimeoutError, aiohttp.ClientError) as exc:
            return _error(502, f"proxy request failed: {exc}", "server_error")
