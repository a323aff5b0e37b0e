"""A llama-server router stand-in replaying tests/fixtures/llamacpp/router/ by path and ``?model=``.

Unlike testkit's FixtureRuntime it routes on the query too, answers what the real router answered for a
path without ``?model=`` (HTTP 400), and records every request's query so tests can prove the exporter
never asked for an unloaded model nor let the router autoload one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROUTER = Path(__file__).resolve().parents[1] / "fixtures" / "llamacpp" / "router"
DRAFT = ROUTER.parent / "draft"
DENSE, MOE = "tiny-llama-dense", "tiny-llama-moe"


def _error(message: str) -> tuple[int, str]:
    return 400, json.dumps({"error": {"code": 400, "message": message, "type": "invalid_request_error"}})


@dataclass
class RouterRuntime:
    """``routes[(path, model)] -> (status, body)``; ``model`` "" is the path without ``?model=``."""

    routes: dict[tuple[str, str], tuple[int, str]] = field(default_factory=dict)
    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)

    @classmethod
    def recorded(cls, busy: bool = False) -> RouterRuntime:
        rt = cls()
        rt.routes[("/health", "")] = (200, '{"status":"ok"}')
        rt.set("/props", "", "props_router.json")
        rt.set("/v1/models", "", "v1_models.json")
        rt.routes[("/metrics", "")] = (400, (ROUTER / "metrics_no_model.json").read_text())
        rt.routes[("/slots", "")] = (400, (ROUTER / "slots_no_model.json").read_text())
        for model in (DENSE, MOE):
            status = 200 if model == DENSE else 400
            prefix = "busy_" if busy and model == DENSE else ""
            rt.set("/metrics", model, f"metrics_{prefix}{model}.txt", status)
            rt.set("/slots", model, f"slots_{prefix}{model}.json", status)
            rt.set("/props", model, f"props_{model}.json", status)
        return rt

    def set(self, path: str, model: str, file: str, status: int = 200) -> None:
        self.routes[(path, model)] = (status, (ROUTER / file).read_text())

    def answer(self, path: str, query: dict[str, str]) -> tuple[int, str]:
        self.requests.append((path, query))
        model = query.get("model", "")
        if (path, model) in self.routes:
            return self.routes[(path, model)]
        if path in ("/metrics", "/slots", "/props") and model:
            return _error(f"model '{model}' not found")
        return 404, '{"error":{"code":404,"message":"File Not Found"}}'

    def transport(self) -> httpx.MockTransport:
        def handler(request: httpx.Request) -> httpx.Response:
            status, body = self.answer(request.url.path, dict(request.url.params))
            return httpx.Response(status, text=body)

        return httpx.MockTransport(handler)

    def asked(self, path: str) -> list[dict[str, str]]:
        return [q for p, q in self.requests if p == path]
