"""A node that serves several lanes: one ``llama-server`` (or the simulator) in router mode.

llama.cpp's router mode (``llama-server --models-preset FILE``, no ``-m``) runs one child server per model
and routes each request by its ``model``; per-model endpoints take ``?model=`` (``/metrics`` and ``/slots``
answer 400 without it). That is how operators put a dense and a MoE model on one node, so a session can do
the same: lanes of a runtime the session starts that name the same ``node`` are served by one router.

The router is started from a preset the session writes into the run folder (``logs/router-<node>.ini``),
one section per lane: the model id is the lane's ``model`` (else its name), with the lane's serving
settings (``parallel``, ``ctx-size``, ``batch-size``, ``ubatch-size``, ``threads``) and, for a real
server, its GGUF (``model``); for the simulator its profile (``sim-profile``, a key only the simulator reads).
``--models-max`` is the number of models, so none is evicted mid-ladder. After ``/health`` answers, every
model is loaded (``POST /models/load``) and the session waits for each ``status.value`` to read ``loaded``
before the ladder starts, so no rung pays a model's load; a model whose load failed (``status.failed``)
stops the start with the router's log tail. Each lane then gets a :class:`RouterLane`: the router's URL
and process, its own model's ``/props``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from satbench.runtimes.processes import ChildProcess, ProcessSet, StartError, log_tail, wait_until_ready

__all__ = ["RouterLane", "RouterModel", "RouterNode", "preset_text", "start_router"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RouterModel:
    """One model of a router node: its id (what requests name) and the settings of its child server."""

    name: str
    gguf: Path | None = None  # a real llama-server's model file
    profile: str | None = None  # the simulator's profile
    settings: Mapping[str, int | None] = field(default_factory=dict)  # preset key -> value (None: unset)


_KEY = {"parallel": "parallel", "ctx_size": "ctx-size", "batch": "batch-size", "ubatch": "ubatch-size",
        "threads": "threads"}


def preset_text(models: Sequence[RouterModel]) -> str:
    """The ``--models-preset`` INI for ``models``: one section per model, its settings as long option names."""
    lines = ["# Written by satbench for one router-mode node; one section per lane's model."]
    for m in models:
        lines += ["", f"[{m.name}]"]
        if m.gguf is not None:
            lines.append(f"model = {m.gguf.resolve()}")
        if m.profile is not None:
            lines.append(f"sim-profile = {m.profile}")
        for key, value in m.settings.items():
            if value is not None:
                lines.append(f"{_KEY.get(key, key)} = {value}")
    return "\n".join(lines) + "\n"


@dataclass
class RouterNode:
    """A running router: its URL, process, the models it holds and each model's ``/props``."""

    node: str
    kind: str  # "llamacpp" or "simulator"
    url: str
    child: ChildProcess
    preset_path: Path
    models: tuple[RouterModel, ...]
    model_props: dict[str, dict[str, Any]] = field(default_factory=dict)
    load_s: dict[str, float] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.child.pid

    def lane(self, model: str) -> RouterLane:
        return RouterLane(self, model)


@dataclass(frozen=True, slots=True)
class RouterLane:
    """One lane of a router node; satisfies ``satbench.runtimes.RunningRuntime``."""

    router: RouterNode
    model: str

    @property
    def url(self) -> str:
        return self.router.url

    @property
    def pid(self) -> int | None:
        return self.router.pid

    @property
    def command(self) -> tuple[str, ...]:
        return tuple(self.router.child.argv)

    @property
    def props(self) -> Mapping[str, Any]:
        return self.router.model_props.get(self.model, {})

    def evidence(self) -> dict[str, Any]:
        r = self.router
        spec = next(m for m in r.models if m.name == self.model)
        props = self.props
        return {
            "runtime": r.kind,
            "router": True,
            "node": r.node,
            "model_id": self.model,
            "url": r.url,
            "pid": r.pid,
            "command": list(self.command),
            "preset": str(r.preset_path),
            "preset_text": r.preset_path.read_text(encoding="utf-8") if r.preset_path.exists() else None,
            **({"profile": spec.profile} if spec.profile else {}),
            "settings": {k: v for k, v in spec.settings.items() if v is not None},
            "load_s": r.load_s.get(self.model),
            "build_info": props.get("build_info"),
            "total_slots": props.get("total_slots"),
            "model_path": props.get("model_path"),
            "n_ctx_slot": (props.get("default_generation_settings") or {}).get("n_ctx"),
            "log": str(r.child.log_path),
        }


def _statuses(client: httpx.Client, url: str) -> dict[str, dict[str, Any]]:
    resp = client.get(f"{url}/v1/models")
    resp.raise_for_status()
    return {str(m.get("id")): (m.get("status") or {}) for m in resp.json().get("data") or []
            if isinstance(m, dict)}


def _load_all(router: RouterNode, timeout_s: float, client: httpx.Client) -> None:
    """Loads every model and waits until each one's status reads ``loaded`` (raises ``StartError``)."""
    names = [m.name for m in router.models]
    started = time.monotonic()
    for name in names:
        resp = client.post(f"{router.url}/models/load", json={"model": name})
        if resp.status_code >= 400 and "already" not in resp.text:
            raise StartError(f"node {router.node}: loading model {name} answered HTTP {resp.status_code}: "
                             f"{resp.text[:200]}")
    deadline = started + timeout_s
    pending = set(names)
    while pending:
        if not router.child.alive():
            raise StartError(f"node {router.node}: the router exited with code {router.child.popen.returncode}: "
                             f"{log_tail(router.child.log_path) or 'no output'}")
        statuses = _statuses(client, router.url)
        for name in sorted(pending):
            status = statuses.get(name, {})
            if status.get("failed"):
                raise StartError(f"node {router.node}: model {name} failed to load (exit code "
                                 f"{status.get('exit_code')}): {log_tail(router.child.log_path)}")
            if status.get("value") == "loaded":
                pending.discard(name)
                router.load_s[name] = round(time.monotonic() - started, 3)
        if pending and time.monotonic() > deadline:
            raise StartError(f"node {router.node}: models {', '.join(sorted(pending))} not loaded within "
                             f"{timeout_s:.0f} s (log: {router.child.log_path})")
        if pending:
            time.sleep(0.1)


def _props(client: httpx.Client, url: str, model: str) -> dict[str, Any]:
    try:
        resp = client.get(f"{url}/props", params={"model": model})
        resp.raise_for_status()
        data = resp.json()
    except (httpx.HTTPError, ValueError) as exc:
        return {"error": f"GET /props?model={model} failed: {type(exc).__name__}: {exc}"}
    return data if isinstance(data, dict) else {"error": "GET /props did not return an object"}


def start_router(
    processes: ProcessSet,
    node: str,
    kind: str,
    models: Sequence[RouterModel],
    *,
    argv_prefix: Sequence[str],
    port: int,
    host: str = "127.0.0.1",
    ready_timeout_s: float = 30.0,
    load_timeout_s: float = 120.0,
) -> RouterNode:
    """Writes the preset, starts ``argv_prefix`` + the router flags, loads every model; ``StartError`` if not.

    ``argv_prefix`` is the server without its model: ``[llama-server]`` or ``[python, -m, satbench.cli, sim]``.
    """
    processes.log_dir.mkdir(parents=True, exist_ok=True)
    preset = processes.log_dir / f"router-{node}.ini"
    preset.write_text(preset_text(models), encoding="utf-8")
    argv = [*argv_prefix, "--models-preset", str(preset), "--models-max", str(len(models)),
            "--host", host, "--port", str(port), "--metrics", "--slots"]
    if kind == "simulator":
        argv.insert(len(argv_prefix), "--router")
    child = processes.start(f"router-{node}", argv)
    url = f"http://{host}:{port}"
    wait_until_ready(child, f"{url}/health", timeout_s=ready_timeout_s)
    router = RouterNode(node=node, kind=kind, url=url, child=child, preset_path=preset, models=tuple(models))
    try:
        with httpx.Client(timeout=10.0) as client:
            _load_all(router, load_timeout_s, client)
            router.model_props = {m.name: _props(client, url, m.name) for m in models}
    except (httpx.HTTPError, ValueError) as exc:
        raise StartError(f"node {node}: the router did not answer its model API: {type(exc).__name__}: {exc}") \
            from exc
    return router
