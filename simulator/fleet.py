"""``satbench sim-fleet``: a fleet of simulated llama-server nodes served from one process, on one loop.

A fleet test (many nodes, each with its own lanes) would cost one ``satbench sim`` process per lane: 100
interpreters for 50 nodes x 2 lanes, more memory and start-up time than a 2-core test host has. Here every
(node, lane) is its own ``SimulatorApp`` (own engine, runtime, slots, faults; ``/props``, ``/metrics``,
``/slots``, ``/health``, the generation routes) behind its own aiohttp runner on its own loopback port, and
all of them share one asyncio loop. Idle lanes cost nothing but memory: an idle runtime waits on an event.

A lane is configured exactly as ``satbench sim`` would be (``simulator.cli.prepare``): its profile (a
built-in name or a TOML path) and overrides are turned into that command line (``--slots``, ``--batch``,
``--ubatch``, ``--seed``, ``--admission``, ``--time-scale``; ``ctx_size`` is llama-server's ``-c``, split
over the slots as llama-server does, and with it ``--metrics`` so the lane keeps ``/metrics``) and parsed
by ``satbench sim``'s own parser, so an override means here what it means there.

Each lane's listening socket is bound once, when the fleet starts, and held until the fleet closes; each app
serves a duplicate of it. ``Fleet.restart`` stops one lane's app and starts a new one with other settings
on a new duplicate: the port never changes and never passes to another process, and connections that arrive
in between wait in the socket's backlog for the new app instead of being refused (a connection the old app
had accepted but not yet answered is closed, as on any server restart). The other lanes keep serving
throughout.

The fleet spec is a pydantic model read from TOML (``[[nodes]]`` with ``name``, ``labels``, and
``[[nodes.lanes]]`` with ``name``, ``profile`` and the overrides); names follow ``core.lanes`` (node
``local`` is reserved). A bad spec is refused before any port opens, in one line naming the setting
(``invalid fleet config: nodes[node-001].lanes: duplicate lane name(s) dense``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from core.config_files import FieldError, format_validation_error, load_toml_model, validation_problems
from core.lanes import LOCAL_NODE, NAME_PATTERN
from simulator.dropin import ServerOptions
from simulator.profile import Profile, ProfileError, bundled_profiles

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
# lane override -> satbench sim's flag (simulator.cli.configure); ctx_size is llama-server's -c
OVERRIDES: dict[str, str] = {
    "slots": "--slots",
    "batch": "--batch",
    "ubatch": "--ubatch",
    "seed": "--seed",
    "admission": "--admission",
    "time_scale": "--time-scale",
    "ctx_size": "--ctx-size",
}
BACKLOG = 1024
SHUTDOWN_TIMEOUT_S = 1.0


class FleetError(ValueError):
    """A fleet spec or restart that cannot be used; the message is one line naming the setting."""


@functools.cache
def _sim_parser() -> argparse.ArgumentParser:
    from simulator.cli import configure as configure_sim

    parser = argparse.ArgumentParser(prog="satbench sim", add_help=False)
    configure_sim(parser)
    return parser


class LaneSpec(BaseModel):
    """One simulated deployment on a node: a profile and ``satbench sim``'s overrides (None: the profile's)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=NAME_PATTERN, min_length=1, max_length=64)
    profile: str = Field(default="dense", min_length=1)
    slots: int | None = Field(default=None, gt=0)
    batch: int | None = Field(default=None, gt=0)
    ubatch: int | None = Field(default=None, gt=0)
    seed: int | None = None
    admission: Literal["fifo", "unfair"] | None = None
    time_scale: float | None = Field(default=None, gt=0)
    ctx_size: int | None = Field(default=None, gt=0)

    # (argv, profile, options): resolved once, at validation; a model_copy with other fields resolves again
    _resolved: tuple[list[str], Profile, ServerOptions] | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _resolves(self) -> LaneSpec:
        try:
            self.resolved()
        except ProfileError as exc:
            raise FieldError([("profile", str(exc))]) from None
        return self

    def argv(self) -> list[str]:
        """``satbench sim``'s command line for this lane (without host and port)."""
        out = [f"--profile={self.profile}"]  # flag=value: a value that starts with "-" stays a value
        for key, flag in OVERRIDES.items():
            value = getattr(self, key)
            if value is not None:
                out.append(f"{flag}={value}")
        if self.ctx_size is not None:
            out.append("--metrics")  # -c makes the command line llama-server's, whose /metrics is off
        return out

    def resolved(self) -> tuple[Profile, ServerOptions]:
        """The validated profile (overrides applied) and server options, as ``satbench sim`` would serve them
        (``simulator.cli.prepare`` on ``argv()``); ``ProfileError`` when the profile cannot be used."""
        from simulator.cli import prepare

        argv = self.argv()
        if self._resolved is not None and self._resolved[0] == argv:
            return self._resolved[1], self._resolved[2]
        try:
            args = _sim_parser().parse_args(argv)
        except SystemExit:  # argparse has printed why; the fields are typed, so this is not expected
            raise ProfileError(f"cannot parse {' '.join(argv)}") from None
        profile, options = prepare(args)
        if not isinstance(profile, Profile) or not isinstance(options, ServerOptions):
            raise ProfileError("simulator.cli.prepare returned something else than a profile and options")
        self._resolved = (argv, profile, options)
        return profile, options

    def overrides(self) -> dict[str, Any]:
        """The overrides this lane sets (profile included), for ``Fleet.restart``'s merge."""
        return {k: v for k, v in self.model_dump(exclude={"name"}).items() if v is not None}


def _duplicates(names: Sequence[str]) -> list[str]:
    return sorted({n for n in names if names.count(n) > 1})


class NodeSpec(BaseModel):
    """One simulated runtime host: its name, labels (for whoever builds a session from the spec) and lanes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=NAME_PATTERN, min_length=1, max_length=64)
    labels: dict[str, str] = Field(default_factory=dict)
    lanes: tuple[LaneSpec, ...]

    @field_validator("name")
    @classmethod
    def _not_local(cls, value: str) -> str:
        if value == LOCAL_NODE:
            raise ValueError(f"{LOCAL_NODE!r} is reserved (the session's own host)")
        return value

    @field_validator("lanes")
    @classmethod
    def _some_lanes(cls, value: tuple[LaneSpec, ...]) -> tuple[LaneSpec, ...]:
        if not value:  # checked after the items (a min_length would also fail when an item does)
            raise ValueError("a node needs at least one lane ([[nodes.lanes]])")
        return value

    @model_validator(mode="after")
    def _unique_lanes(self) -> NodeSpec:
        dup = _duplicates([lane.name for lane in self.lanes])
        if dup:
            raise FieldError([("lanes", f"duplicate lane name(s) {', '.join(dup)}")])
        return self

    def lane(self, name: str) -> LaneSpec:
        for lane in self.lanes:
            if lane.name == name:
                return lane
        raise KeyError(f"node {self.name} has no lane {name!r} (lanes: {', '.join(ln.name for ln in self.lanes)})")


class FleetSpec(BaseModel):
    """The nodes of a simulated fleet (see the module docstring); build it with ``load``/``from_mapping``/
    ``uniform`` for one-line errors."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    nodes: tuple[NodeSpec, ...]

    @field_validator("nodes")
    @classmethod
    def _some_nodes(cls, value: tuple[NodeSpec, ...]) -> tuple[NodeSpec, ...]:
        if not value:
            raise ValueError("a fleet needs at least one node ([[nodes]])")
        return value

    @model_validator(mode="after")
    def _unique_nodes(self) -> FleetSpec:
        dup = _duplicates([node.name for node in self.nodes])
        if dup:
            raise FieldError([("nodes", f"duplicate node name(s) {', '.join(dup)}")])
        return self

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> FleetSpec:
        """Validates parsed TOML/JSON; ``FleetError`` (one line) on any refusal."""
        try:
            return cls.model_validate(dict(data))
        except ValidationError as exc:
            raise FleetError(format_validation_error(exc, "fleet", dict(data), cls)) from None

    @classmethod
    def load(cls, path: str | Path) -> FleetSpec:
        """Reads a fleet TOML file (``[[nodes]]``, ``[[nodes.lanes]]``); a lane's relative profile path is
        read from the file's folder (a built-in name stays a name)."""
        folder = Path(path).parent
        return load_toml_model(cls, Path(path), None, what="fleet", error=FleetError,
                               prepare=functools.partial(_profiles_from, folder))

    @classmethod
    def uniform(cls, nodes: int, lanes: Mapping[str, str], **overrides: Any) -> FleetSpec:
        """``nodes`` nodes ``node-001``... each with the lanes ``{lane: profile}``, all with ``overrides``."""
        if nodes < 1:
            raise FleetError(f"nodes: must be >= 1, got {nodes}")
        if not lanes:
            raise FleetError("lanes: at least one lane=profile is needed")
        width = max(3, len(str(nodes)))
        node_list = [
            {"name": f"node-{i:0{width}d}",
             "lanes": [{"name": name, "profile": profile, **overrides} for name, profile in lanes.items()]}
            for i in range(1, nodes + 1)
        ]  # fmt: skip
        cls.from_mapping({"nodes": node_list[:1]})  # a bad lane is named once, not once per node
        return cls.from_mapping({"nodes": node_list})

    def node(self, name: str) -> NodeSpec:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(f"no node {name!r} in the fleet")

    def lane_count(self) -> int:
        return sum(len(node.lanes) for node in self.nodes)


def _profiles_from(folder: Path, data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with each lane's relative profile path made relative to ``folder`` (the spec file's)."""
    bundled = set(bundled_profiles())
    for node in data.get("nodes", []) if isinstance(data.get("nodes"), list) else []:
        for lane in node.get("lanes", []) if isinstance(node, dict) and isinstance(node.get("lanes"), list) else []:
            profile = lane.get("profile") if isinstance(lane, dict) else None
            is_path = isinstance(profile, str) and ("/" in profile or bool(Path(profile).suffix))
            if isinstance(profile, str) and is_path and profile not in bundled and not Path(profile).is_absolute():
                lane["profile"] = str(folder / profile)
    return data


def parse_lanes(text: str) -> dict[str, str]:
    """``"dense=dense,moe=path/moe.toml"`` as ``{lane: profile}`` (a bare ``dense`` is ``dense=dense``)."""
    out: dict[str, str] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, sep, profile = item.partition("=")
        name, profile = name.strip(), (profile.strip() if sep else name.strip())
        if not name or not profile:
            raise FleetError(f"--lanes: expected lane=profile, got {item!r}")
        if name in out:
            raise FleetError(f"--lanes: duplicate lane name {name}")
        out[name] = profile
    if not out:
        raise FleetError("--lanes: at least one lane=profile is needed")
    return out


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
        from simulator.server import RUNTIME_KEY, create_app

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
