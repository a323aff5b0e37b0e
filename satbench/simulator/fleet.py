"""``satbench sim-fleet``: a fleet of simulated llama-server nodes served from one process, on one loop.

A fleet test (many nodes, each with its own lanes) would cost one ``satbench sim`` process per lane: 100
interpreters for 50 nodes x 2 lanes, more memory and start-up time than a 2-core test host has. Here every
(node, lane) is its own ``SimulatorApp`` (own engine, runtime, slots, faults; ``/props``, ``/metrics``,
``/slots``, ``/health``, the generation routes) behind its own aiohttp runner on its own loopback port, and
all of them share one asyncio loop. Idle lanes cost nothing but memory: an idle runtime waits on an event.

Each lane's listening socket is bound once, when the fleet starts, and held until the fleet closes; each app
serves a duplicate of it. ``Fleet.restart`` stops one lane's app and starts a new one with other settings
on a new duplicate: the port never changes and never passes to another process, and connections that arrive
in between wait in the socket's backlog for the new app instead of being refused (a connection the old app
had accepted but not yet answered is closed, as on any server restart). The other lanes keep serving
throughout.

The fleet spec (``FleetSpec``, ``NodeSpec``, ``LaneSpec``, ``FleetError``, ``parse_lanes``, ``OVERRIDES``)
lives in ``simulator.fleet_spec``, pure configuration validated before any port opens; it is re-exported
here, so ``from simulator.fleet import FleetSpec`` keeps working. This module holds what runs: the
sockets, ``Fleet``, ``serve_fleet`` and the ``satbench sim-fleet`` command line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from aiohttp import web
from pydantic import ValidationError

from satbench.core.config_files import validation_problems
from satbench.simulator.fleet_spec import OVERRIDES, FleetError, FleetSpec, LaneSpec, NodeSpec, parse_lanes

__all__ = [
    "OVERRIDES",
    "Fleet",
    "FleetError",
    "FleetSpec",
    "LaneSpec",
    "NodeSpec",
    "configure",
    "main",
    "parse_lanes",
    "serve_fleet",
]

Urls = dict[str, dict[str, str]]
BACKLOG = 1024
SHUTDOWN_TIMEOUT_S = 1.0


@dataclass(eq=False)
class _Served:
    """One lane of the running fleet: its spec, its held socket and the app serving it now."""

    node: str
    spec: LaneSpec
    sock: socket.socket
    url: str
    runner: web.AppRunner | None = None
    app: Any = None  # the SimulatorApp
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


def _listen(host: str) -> socket.socket:
    infos = socket.getaddrinfo(host.strip("[]"), 0, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, kind, proto, _, addr = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(BACKLOG)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def _url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in str(host) else str(host)
    return f"http://{shown}:{port}"


class Fleet:
    """The running fleet: ``async with Fleet(spec) as fleet: fleet.url("node-001", "dense")``."""

    def __init__(self, spec: FleetSpec, *, host: str = "127.0.0.1") -> None:
        if not isinstance(spec, FleetSpec):
            raise TypeError("spec must be a simulator.fleet.FleetSpec")
        self.host = host
        self._spec = spec
        self._lanes: dict[tuple[str, str], _Served] = {}
        self._current = {(node.name, lane.name): lane for node in spec.nodes for lane in node.lanes}
        self.started_s: float | None = None  # seconds start() took

    @property
    def spec(self) -> FleetSpec:
        """The fleet as it serves now (restarts included)."""
        nodes = [
            node.model_copy(update={"lanes": tuple(self._current[(node.name, ln.name)] for ln in node.lanes)})
            for node in self._spec.nodes
        ]
        return self._spec.model_copy(update={"nodes": tuple(nodes)})

    # -- lifecycle ----------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Binds every lane's port and starts its app; on any failure, closes what had started and raises."""
        if self._lanes:
            raise RuntimeError("fleet already started")
        t0 = time.perf_counter()
        try:
            for node in self._spec.nodes:
                for lane in node.lanes:
                    sock = _listen(self.host)
                    served = _Served(node.name, lane, sock, _url_of(sock))
                    self._lanes[(node.name, lane.name)] = served
                    await self._start_app(served)
        except BaseException:
            await self.close()
            raise
        self.started_s = time.perf_counter() - t0

    async def close(self) -> None:
        """Stops every app (together, each within its shutdown timeout) and releases the ports."""
        lanes, self._lanes = list(self._lanes.values()), {}
        await asyncio.gather(*(self._stop_app(s) for s in lanes), return_exceptions=True)
        for served in lanes:
            served.sock.close()

    async def __aenter__(self) -> Fleet:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def _start_app(self, served: _Served) -> None:
        from satbench.simulator.server import RUNTIME_KEY, create_app

        profile, options = served.spec.resolved()
        app = create_app(profile, options=options)
        runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=SHUTDOWN_TIMEOUT_S)
        await runner.setup()
        served.runner, served.app = runner, app[RUNTIME_KEY]
        # the app serves a duplicate: closing it at a restart leaves the lane's own socket listening
        dup = served.sock.dup()
        try:
            await web.SockSite(runner, dup, backlog=BACKLOG).start()
        except BaseException:
            dup.close()  # once started, the site's server closes it
            raise

    @staticmethod
    async def _stop_app(served: _Served) -> None:
        runner, served.runner, served.app = served.runner, None, None
        if runner is not None:
            await runner.cleanup()

    # -- lookup -------------------------------------------------------------------------------------------

    def _served(self, node: str, lane: str) -> _Served:
        try:
            return self._lanes[(node, lane)]
        except KeyError:
            raise KeyError(f"no lane {node}/{lane} in the fleet") from None

    def url(self, node: str, lane: str) -> str:
        """``http://127.0.0.1:PORT`` of one lane (stable across restarts)."""
        return self._served(node, lane).url

    def urls(self) -> Urls:
        """``{node: {lane: url}}`` in spec order."""
        out: Urls = {}
        for served in self._lanes.values():
            out.setdefault(served.node, {})[served.spec.name] = served.url
        return out

    def app(self, node: str, lane: str) -> Any:
        """The ``SimulatorApp`` serving one lane now (engine, runtime, faults), for white-box checks."""
        return self._served(node, lane).app

    # -- restart ------------------------------------------------------------------------------------------

    async def restart(self, node: str, lane: str, **overrides: Any) -> str:
        """Restarts one lane with ``overrides`` over its current ones (None drops one; ``profile=`` too) on
        the same port; returns its URL once the new app listens. A bad override raises ``FleetError`` and
        leaves the lane serving as it was."""
        served = self._served(node, lane)
        unknown = sorted(set(overrides) - set(OVERRIDES) - {"profile"})
        if unknown:
            valid = ", ".join(["profile", *OVERRIDES])
            raise FleetError(f"restart {node}/{lane}: unknown setting(s) {', '.join(unknown)} (valid: {valid})")
        async with served.lock:
            data = {"name": lane, **served.spec.overrides(), **overrides}
            data = {k: v for k, v in data.items() if v is not None}
            try:
                spec = LaneSpec.model_validate(data)
            except ValidationError as exc:
                problems = validation_problems(exc, data, LaneSpec)
                raise FleetError(f"restart {node}/{lane}: " + "; ".join(f"{k}: {m}" for k, m in problems)) from None
            await self._stop_app(served)
            served.spec = self._current[(node, lane)] = spec
            await self._start_app(served)
        return served.url


async def serve_fleet(
    spec: FleetSpec,
    *,
    host: str = "127.0.0.1",
    stop: asyncio.Event,
    on_ready: Callable[[Urls], None] | None = None,
    on_fleet: Callable[[Fleet], None] | None = None,
) -> None:
    """Serves every lane of ``spec`` until ``stop`` is set. ``on_ready`` gets ``{node: {lane: url}}`` once all
    listen; ``on_fleet`` gets the ``Fleet`` itself (restarts, white-box access), before ``on_ready``."""
    async with Fleet(spec, host=host) as fleet:
        if on_fleet is not None:
            on_fleet(fleet)
        if on_ready is not None:
            on_ready(fleet.urls())
        await stop.wait()


# -- the command line -----------------------------------------------------------------------------------


def configure(parser: argparse.ArgumentParser) -> None:
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--spec", type=Path, metavar="FILE", help="fleet TOML: [[nodes]] name, [[nodes.lanes]] ...")
    what.add_argument("--nodes", type=int, metavar="N", help="N nodes node-001... with the --lanes lanes each")
    parser.add_argument("--lanes", default=None, metavar="LANE=PROFILE,...",
                        help="with --nodes: each node's lanes and their profiles (default dense=dense)")
    parser.add_argument("--host", default="127.0.0.1", help="bind address of every lane (default 127.0.0.1)")
    parser.add_argument("--urls-file", metavar="F", default=None,
                        help="write {node: {lane: url}} (JSON) here once every lane listens ('-': stdout)")


def _write_urls(target: str, urls: Urls) -> None:
    text = json.dumps(urls, indent=2) + "\n"
    if target == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    path = Path(target)
    fd, tmp = tempfile.mkstemp(dir=path.parent if str(path.parent) else ".", prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)  # a reader never sees half a file
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _spec_from_args(args: argparse.Namespace) -> FleetSpec:
    if args.spec is not None:
        if args.lanes is not None:
            raise FleetError("--lanes goes with --nodes; a --spec file names each node's lanes")
        return FleetSpec.load(args.spec)
    return FleetSpec.uniform(args.nodes, parse_lanes(args.lanes or "dense=dense"))


async def _serve_cli(spec: FleetSpec, args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop.set)
    fleet_ref: list[Fleet] = []

    def ready(urls: Urls) -> None:
        if args.urls_file is not None:
            _write_urls(args.urls_file, urls)
        fleet = fleet_ref[0]
        profiles = sorted({lane.profile for node in spec.nodes for lane in node.lanes})
        where = f"; urls in {args.urls_file}" if args.urls_file not in (None, "-") else ""
        print(
            f"satbench sim-fleet: listening: {len(spec.nodes)} nodes, {spec.lane_count()} lanes on {args.host} "
            f"(profiles {', '.join(profiles)}; started in {fleet.started_s or 0.0:.2f} s, simulated runtimes)"
            f"{where}",
            file=sys.stderr if args.urls_file == "-" else sys.stdout,
            flush=True,
        )

    await serve_fleet(spec, host=args.host, stop=stop, on_ready=ready, on_fleet=fleet_ref.append)


def main(args: argparse.Namespace) -> int:
    try:
        spec = _spec_from_args(args)
    except FleetError as exc:
        print(f"satbench sim-fleet: {exc}", file=sys.stderr)
        return 2
    try:
        asyncio.run(_serve_cli(spec, args))
    except OSError as exc:
        print(f"satbench sim-fleet: cannot serve on {args.host}: {exc}", file=sys.stderr)
        return 1
    return 0
