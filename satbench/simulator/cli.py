"""``satbench sim``: serve a simulated llama-server for one profile on loopback.

Loads and validates the profile once (built-in name or TOML path), applies command-line overrides, starts
the aiohttp server and logs the listening URL on one line (port 0 picks a free port; the line shows it).
llama-server's own command line is accepted too (``simulator.dropin``): the flags that shape serving are
mapped onto the profile and the server, and the others are named once, on stderr, as ignored.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["configure", "main", "prepare", "serve"]


def configure(parser: argparse.ArgumentParser) -> None:
    from satbench.simulator.dropin import add_llama_flags

    parser.add_argument("--profile", default="dense", help="dense, moe, starving or a profile TOML file")
    parser.add_argument("--host", default="127.0.0.1",
                        help="bind address, or several comma-separated (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8080, help="port (default 8080; 0 picks a free one)")
    parser.add_argument("--slots", nargs="?", const="on", default=None, metavar="N",
                        help="override [server] slots; alone, as llama-server's --slots (endpoint on)")
    parser.add_argument("-s", "--seed", type=int, default=None,
                        help="override [server] seed (with llama-server flags also the sampling seed)")
    parser.add_argument("--admission", choices=("fifo", "unfair"), default=None, help="override admission")
    parser.add_argument("--batch", type=int, default=None, help="override [server] batch (-b)")
    parser.add_argument("--ubatch", type=int, default=None, help="override [server] ubatch (-ub)")
    parser.add_argument("--time-scale", type=float, default=None, help="override [server] time_scale")
    parser.add_argument("--stream-interval", type=int, default=None, metavar="K",
                        help="override [server] stream_interval: tokens per stream event, as vLLM's flag")
    parser.add_argument("--router", action="store_true",
                        help="with no -m/-hf: llama-server's router mode (see simulator/router.py)")
    parser.add_argument("--model-load-s", type=float, default=None, metavar="S",
                        help="router mode: seconds a model takes to load (default 0.3)")
    add_llama_flags(parser)


async def serve(
    profile: object,
    host: str | Sequence[str],
    port: int,
    stop: asyncio.Event | None = None,
    on_app: Callable[[Any], None] | None = None,
    options: object | None = None,
) -> None:
    """Serves until ``stop`` is set (or, when ``stop`` is None, until SIGINT/SIGTERM).

    ``on_app`` receives the ``SimulatorApp`` (engine, runtime, faults) once it exists, for in-process tests;
    ``options`` is a ``simulator.dropin.ServerOptions`` (default: the simulator's own defaults).
    """
    from aiohttp import web

    from satbench.simulator.dropin import ServerOptions
    from satbench.simulator.profile import Profile
    from satbench.simulator.router import create_router_app
    from satbench.simulator.server import RUNTIME_KEY, create_app

    if not isinstance(profile, Profile):
        raise TypeError("profile must be a simulator.profile.Profile")
    if options is not None and not isinstance(options, ServerOptions):
        raise TypeError("options must be a simulator.dropin.ServerOptions")
    app = create_router_app(profile, options) if options is not None and options.router else create_app(
        profile, options=options)
    if on_app is not None:
        on_app(app[RUNTIME_KEY])
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
    await runner.setup()
    hosts = [h.strip() for h in host.split(",")] if isinstance(host, str) else list(host)
    for h in hosts:
        site = web.TCPSite(runner, h.strip("[]"), port, backlog=1024)
        await site.start()
        if port == 0:  # the other addresses share the port picked for the first
            port = runner.addresses[0][1]
    shown = ", ".join(f"http://{_url_host(str(a[0]))}:{a[1]}" for a in runner.addresses)
    what = "router mode, " if options is not None and options.router else ""
    print(
        f"satbench sim: listening on {shown} (profile {profile.name}, "
        f"{what}{profile.server.slots} slots, simulated runtime)",
        flush=True,
    )
    if stop is None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def _url_host(h: str) -> str:
    return f"[{h}]" if ":" in h else h


def prepare(args: argparse.Namespace) -> tuple[Any, Any]:
    """The profile and ``ServerOptions`` for parsed arguments (raises ``ProfileError`` on bad input)."""
    from satbench.simulator.dropin import apply_llama_flags
    from satbench.simulator.profile import ProfileError, load_profile

    slots_flag = args.slots == "on"
    try:
        slots = None if args.slots is None or slots_flag else int(args.slots)
    except ValueError:
        raise ProfileError(f"--slots: expected an integer, got {args.slots!r}") from None
    args.slots, args.slots_flag = slots, slots_flag
    profile = load_profile(args.profile).with_overrides(
        slots=slots,
        seed=args.seed,
        admission=args.admission,
        batch=args.batch,
        ubatch=args.ubatch,
        time_scale=args.time_scale,
        stream_interval=args.stream_interval,
    )
    return apply_llama_flags(profile, args)


def main(args: argparse.Namespace) -> int:
    from satbench.simulator.profile import ProfileError

    if any(spelled == "--version" for _, spelled, _ in args.llama_flags):
        from satbench.core import __version__

        print(f"version: satbench {__version__} (simulated llama-server)\nbuilt with the satbench simulator")
        return 0
    try:
        profile, options = prepare(args)
    except ProfileError as exc:
        print(f"satbench sim: {exc}", file=sys.stderr)
        return 2
    if options.ignored:
        print("satbench sim: ignoring llama-server flags with no simulated effect: " + ", ".join(options.ignored),
              file=sys.stderr, flush=True)
    try:
        asyncio.run(serve(profile, args.host, args.port, options=options))
    except OSError as exc:
        print(f"satbench sim: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    return 0
