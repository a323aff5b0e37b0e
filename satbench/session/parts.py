"""Starting a session's parts: each lane's runtime (a server of its own through its launcher, or its node's
router, started once), one exporter per server (lanes of one router node or one external URL share it, each
scraped with its own model), and the recommender. Every child is a process group of the session's
ProcessSet.

Secrets reach a child through its environment or a file it reads, never its command line (which every user
of the host can read): a lane's runtime API key (the value of its ``api_key_env``, which the load generator
sends) goes to the lane's exporter as ``SATBENCH_EXPORTER_RUNTIME_API_KEY``, so it can read the ``/metrics``,
``/slots`` and ``/props`` a runtime started with ``--api-key`` guards; the recommender gets the write token in
its environment and the Prometheus password as ``--prometheus-password-file`` (the session's
``[prometheus] password_file``).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from satbench.core.manifest import write_json_atomic
from satbench.core.net import free_port
from satbench.exporter.cli import RUNTIME_API_KEY_ENV
from satbench.exporter.flavours import resolve
from satbench.recommender.settings import WRITE_TOKEN_ENV
from satbench.runtimes import RunningRuntime
from satbench.runtimes.external import check_external, is_this_host
from satbench.runtimes.llamacpp import (
    LlamaServer,
    LlamaServerError,
    LlamaServerNotReadyError,
    LlamaServerSpec,
    find_llama_server,
)
from satbench.runtimes.processes import ProcessSet, StartError, wait_until_ready
from satbench.runtimes.registry import kind_of
from satbench.runtimes.router import RouterModel, RouterNode, start_router
from satbench.runtimes.simulator import start_simulator
from satbench.session.config import LaneRuntime, SessionConfig, nodes_of

Say = Callable[[str], None]


@dataclass
class LaneEndpoint:
    lane: LaneRuntime
    runtime: RunningRuntime
    exporter_url: str | None = None
    relay_url: str | None = None  # the lane's relay (lane option relay), which the load generator sends to

    @property
    def url(self) -> str:
        return self.runtime.url

    @property
    def client_url(self) -> str:
        """Where the load generator sends: the lane's relay when it has one, else the runtime."""
        return self.relay_url or self.url


def python_cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "satbench.cli", *args]


Launcher = Callable[[LaneRuntime, SessionConfig, ProcessSet, contextlib.ExitStack], RunningRuntime]


def _simulator(lane: LaneRuntime, config: SessionConfig, processes: ProcessSet,
               stack: contextlib.ExitStack) -> RunningRuntime:
    return start_simulator(processes, lane.name, lane.profile, port=free_port(), timeout_s=config.start_timeout_s,
                           slots=lane.parallel, batch=lane.batch, ubatch=lane.ubatch, ctx_size=lane.ctx_size)


def _external(lane: LaneRuntime, config: SessionConfig, processes: ProcessSet,
              stack: contextlib.ExitStack) -> RunningRuntime:
    assert lane.url is not None  # the config refuses an external lane without one
    return check_external(lane.key, lane.url)


def _llamacpp(lane: LaneRuntime, config: SessionConfig, processes: ProcessSet,
              stack: contextlib.ExitStack) -> RunningRuntime:
    assert config.model_dir is not None and lane.model_file is not None  # the config refuses them missing
    spec = LlamaServerSpec(model=config.model_dir / lane.model_file, parallel=lane.setting("parallel"),
                           ctx_size=lane.setting("ctx_size"), batch=lane.setting("batch"),
                           ubatch=lane.setting("ubatch"), threads=lane.threads, extra_args=tuple(lane.server_args),
                           api_key=lane.api_key())
    try:
        return stack.enter_context(LlamaServer(spec, processes.log_dir / f"llamacpp-{lane.name}.log",
                                               ready_timeout_s=config.start_timeout_s))
    except LlamaServerNotReadyError as exc:  # one line that names the setting to raise; the log has the rest
        last = " ".join(exc.last.split())
        raise StartError(f"lane {lane.name}: llama-server at {exc.url} not ready within start_timeout_s = "
                         f"{exc.timeout_s:g} s (last /health: {last}; log: {exc.log_path})") from exc
    except (LlamaServerError, OSError, ValueError) as exc:
        raise StartError(f"lane {lane.name}: llama-server did not start: {exc}") from exc


# how the session starts each runtime of satbench.runtimes.registry.RUNTIMES (a test holds the keys equal)
LAUNCHERS: dict[str, Launcher] = {"simulator": _simulator, "external": _external, "llamacpp": _llamacpp}


def _start_runtime(
    lane: LaneRuntime, config: SessionConfig, processes: ProcessSet, stack: contextlib.ExitStack, say: Say
) -> LaneEndpoint:
    runtime = LAUNCHERS[lane.runtime](lane, config, processes, stack)
    kind = kind_of(lane.runtime)
    what = f"{kind.server} ({lane.serves})" if kind.server and lane.serves is not None else f"{lane.runtime} runtime"
    say(f"  lane {lane.name}: {what} at {runtime.url}")
    return LaneEndpoint(lane, runtime)


def _start_node(node: str, lanes: list[LaneRuntime], config: SessionConfig, processes: ProcessSet,
                say: Say) -> RouterNode:
    """One router-mode server for the lanes that name ``node`` (``satbench.runtimes.router``)."""
    kind = lanes[0].runtime
    models = []
    for lane in lanes:
        if kind == "llamacpp":
            assert config.model_dir is not None and lane.model_file is not None  # refused by the config
            settings = {k: lane.setting(k) for k in ("parallel", "ctx_size", "batch", "ubatch")}
            models.append(RouterModel(name=lane.model_id, gguf=config.model_dir / lane.model_file,
                                      settings={**settings, "threads": lane.threads}))
        else:
            models.append(RouterModel(name=lane.model_id, profile=lane.profile, settings={
                "parallel": lane.parallel, "ctx_size": lane.ctx_size, "batch": lane.batch, "ubatch": lane.ubatch}))
    try:
        prefix = [str(find_llama_server())] if kind == "llamacpp" else python_cli("sim")
    except LlamaServerError as exc:
        raise StartError(f"node {node}: {exc}") from exc
    router = start_router(processes, node, kind, models, argv_prefix=prefix, port=free_port(),
                          ready_timeout_s=config.start_timeout_s, load_timeout_s=max(config.start_timeout_s, 120.0))
    held = ", ".join(f"{m.name} ({m.profile or (m.gguf.name if m.gguf else '')})" for m in models)
    say(f"  node {node}: {kind_of(kind).server} router at {router.url} "
        f"holding {held}")
    return router


def start_runtimes(config: SessionConfig, processes: ProcessSet, stack: contextlib.ExitStack,
                    say: Say, unreachable: dict[str, str] | None = None) -> list[LaneEndpoint]:
    """Every lane's runtime, in config order: a server of its own, or its node's router (started once).

    With ``unreachable`` given, an external lane of a fleet node whose runtime does not answer is left out
    and recorded there (key -> why), so the other nodes are still measured; otherwise it stops the session.
    """
    nodes = nodes_of(config.lanes)
    routers: dict[str, RouterNode] = {}
    endpoints = []
    for lane in config.lanes:
        if lane.node not in nodes:  # a server of its own (an external lane of a fleet node too)
            try:
                endpoints.append(_start_runtime(lane, config, processes, stack, say))
            except StartError as exc:
                if unreachable is None or lane.node is None or lane.started:
                    raise
                unreachable[lane.key] = str(exc)
                say(f"  node {lane.node}: lane {lane.name} is not measured: {exc}")
            continue
        if lane.node not in routers:
            routers[lane.node] = _start_node(lane.node, nodes[lane.node], config, processes, say)
        endpoints.append(LaneEndpoint(lane, routers[lane.node].lane(lane.model_id)))
    return endpoints


def shares_runtime(endpoint: LaneEndpoint, endpoints: Sequence[LaneEndpoint]) -> bool:
    """Whether another lane sends to the same server (a router node): its series are then per model."""
    return endpoint.lane.node in nodes_of([endpoint.lane]) or any(
        other is not endpoint and other.url == endpoint.url for other in endpoints)


def start_exporters(endpoints: list[LaneEndpoint], processes: ProcessSet, timeout_s: float,
                    scrape_interval_s: float | None = None) -> None:
    """One exporter per server: lanes of one router node (or one external URL) share it, each scraped with
    its own ``model`` (``ScrapeTarget.params``). Given the scrape interval, each shares one read of its node
    among the scrapes within half of it (``--read-max-age-s``), so every scrape of the session's Prometheus
    reads afresh while extra scrapers cost the node nothing."""
    started: dict[str, str] = {}
    for ep in endpoints:
        if ep.lane.exporter_url is None and not ep.lane.relay and ep.url in started:
            ep.exporter_url = started[ep.url]
            continue
        _start_exporter(ep, processes, timeout_s, scrape_interval_s)
        if ep.lane.exporter_url is None and not ep.lane.relay and ep.exporter_url is not None:
            started[ep.url] = ep.exporter_url


def _start_exporter(endpoint: LaneEndpoint, processes: ProcessSet, timeout_s: float,
                    scrape_interval_s: float | None) -> None:
    if endpoint.lane.exporter_url is not None:  # one runs already (compose, the node's own): use it
        endpoint.exporter_url = endpoint.lane.exporter_url
        return
    port = free_port()
    argv = python_cli("exporter", "--runtime-url", endpoint.url, "--host", "127.0.0.1", "--port", str(port))
    if scrape_interval_s is not None:
        argv += ["--read-max-age-s", repr(scrape_interval_s / 2)]
    if endpoint.runtime.pid is not None:
        argv += ["--runtime-pid", str(endpoint.runtime.pid)]
    kind = kind_of(endpoint.lane.runtime)
    if kind.modelled or (not endpoint.lane.started and not is_this_host(endpoint.url)):
        # this host is not the node (satbench.runtimes.external), or the node is modelled: a simulator's GPUs
        # and draw are its /sim/gpu, in router mode none, never this host's
        argv += ["--gpu", "none", "--cpu-energy", "none"]
    flavour = kind.exporter_flavour
    if flavour != resolve("auto"):  # what the exporter would not read the runtime as by itself
        argv += ["--flavour", flavour]
    relay_port = free_port() if endpoint.lane.relay else None
    if relay_port is not None:  # relay mode: the load generator then sends through it (LaneEndpoint.client_url)
        argv += ["--relay", f"127.0.0.1:{relay_port}"]
    router = nodes_of([endpoint.lane])
    name = next(iter(router)) if router else endpoint.lane.key  # one exporter per router node, else per lane
    key = endpoint.lane.api_key()  # the lane's runtime key, read now from its api_key_env, never in argv
    env = {**os.environ, RUNTIME_API_KEY_ENV: key} if key else None
    child = processes.start(f"exporter-{name.replace('/', '-')}", argv, env=env)
    endpoint.exporter_url = f"http://127.0.0.1:{port}"
    wait_until_ready(child, f"{endpoint.exporter_url}/metrics", timeout_s=timeout_s)
    if relay_port is not None:
        relay_url = f"http://127.0.0.1:{relay_port}"
        wait_until_ready(child, f"{relay_url}/health", timeout_s=timeout_s)  # the runtime's, through the relay
        endpoint.relay_url = relay_url


def start_recommender(
    config: SessionConfig, prom_url: str, run_dir: Path, processes: ProcessSet, port: int, *,
    write_token: str | None = None,
) -> tuple[str, Any]:
    """The session's recommender; ``write_token`` (the bearer its writes need) is handed to it in its
    environment, never on its command line (which every user of the host can read). A Prometheus given by
    URL with credentials (``[prometheus] username``, ``password_file``) is read with them: the user and the
    password file's path are its flags, the password stays in the file."""
    argv = python_cli("recommender", "--prometheus-url", prom_url, "--port", str(port),
                       "--runs-dir", str(run_dir.parent.resolve()),
                       "--scrape-interval", repr(config.prometheus.scrape_interval_s))
    if config.prometheus.username is not None and config.prometheus.password_file is not None:
        argv += ["--prometheus-username", config.prometheus.username,
                 "--prometheus-password-file", str(config.prometheus.password_file)]
    if config.policy_given:
        policy_path = run_dir / "policy.json"
        write_json_atomic(policy_path, config.policy_given)
        argv += ["--policy", str(policy_path)]
    env = {**os.environ, WRITE_TOKEN_ENV: write_token} if write_token else None
    child = processes.start("recommender", argv, env=env)
    return f"http://127.0.0.1:{port}", child


def target_labels(endpoint: LaneEndpoint) -> dict[str, str]:
    labels = {"lane": endpoint.lane.name}
    if endpoint.lane.node is not None:
        labels["node"] = endpoint.lane.node
    return labels
