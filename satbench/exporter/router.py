"""llama-server's router mode, read as the exporter needs it: which models exist and which are loaded.

A router (``llama-server`` started without a model, tests/fixtures/llamacpp/router/) answers ``/props``
with ``role: "router"`` and ``/health`` for itself, while ``/metrics``, ``/slots`` and ``/props`` want
``?model=NAME`` (HTTP 400 ``model name is missing from the request`` without it, ``model is not loaded``
for a model not running). ``GET /v1/models`` lists every model with ``status.value`` (``loaded``,
``loading``, ``unloaded``; newer builds add ``downloading`` and a ``failed`` flag) and the argv the router
starts its child with (``status.args``), which tells the child's KV layout.

A per-model GET would make the router load that model when autoload is on (the build's
``router_validate_model``), so the exporter asks only for loaded models and always adds
``autoload=false``: a scrape never loads, and never keeps alive, a model. Pure functions here; the fetching
is in :mod:`exporter.llamacpp`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from satbench.exporter.snapshot import EndpointReply, ModelView, RuntimeSnapshot, SourceResult

__all__ = ["MODEL_STATUSES", "ROUTER_SOURCES", "model_params", "parse_models", "router_snapshot"]

MODEL_STATUSES = ("loaded", "loading", "unloaded")
ROUTER_SOURCES = ("health", "props", "models")


def model_params(model: str) -> dict[str, str]:
    """The query of a per-model GET: the model, and no autoload (httpx escapes the values)."""
    return {"model": model, "autoload": "false"}


def parse_models(body: str) -> tuple[ModelView, ...]:
    """Every model of a ``/v1/models`` body, with its status and argv. Raises ValueError on another shape."""
    data = json.loads(body)
    items = data.get("data") if isinstance(data, Mapping) else None
    if not isinstance(items, list):
        raise ValueError("/v1/models has no data list")
    out: list[ModelView] = []
    for item in items:
        if not isinstance(item, Mapping) or not isinstance(item.get("id"), str) or not item["id"]:
            raise ValueError("/v1/models entry without an id")
        status: Any = item.get("status")
        value, args = "loaded", tuple[str, ...]()  # a single-model server lists its model without a status
        if isinstance(status, Mapping):
            value = str(status.get("value") or "unknown")
            if status.get("failed") is True:
                value = "failed"
            raw = status.get("args")
            if isinstance(raw, list):
                args = tuple(str(a) for a in raw)
        meta = item.get("meta")
        out.append(ModelView(name=item["id"], status=value, args=args,
                             meta=meta if isinstance(meta, Mapping) else None))
    return tuple(out)


def _source(reply: EndpointReply, error: str | None) -> SourceResult:
    return SourceResult(reply.name, error is None, reply.status, reply.duration_s, error, reply.cached)


def router_snapshot(
    flavour: str,
    health: EndpointReply,
    props: EndpointReply,
    models: EndpointReply,
    listed: tuple[ModelView, ...] | None,
    models_error: str | None,
    per_model: Mapping[str, RuntimeSnapshot],
    only: str | None = None,
) -> RuntimeSnapshot:
    """The node's snapshot: node-wide sources plus one view per model (just ``only`` when given; a model
    the router does not list is ``unknown``, never an error)."""
    views = list(listed or ())
    if only is not None:
        views = [v for v in views if v.name == only] or [ModelView(only, "unknown")]
    out = tuple(
        ModelView(v.name, v.status, v.args, per_model.get(v.name)) for v in views
    )
    health_error = None if health.ok else (health.error or f"HTTP {health.status}")
    props_error = None if props.ok else (props.error or f"HTTP {props.status}")
    sources = (_source(health, health_error), _source(props, props_error), _source(models, models_error))
    return RuntimeSnapshot(flavour=flavour, up=health.ok, sources=sources, router=True, models=out)
