"""``satbench sim``: serve a simulated llama-server for one profile on loopback.

Loads and validates the profile once (built-in name or TOML path), applies command-line overrides, starts
the aiohttp server and logs the listening URL on one line (port 0 picks a free port; the line shows it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["configure", "main", "serve"]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--profile", default="dense", help="dense, moe, starving or a profile TOML file")
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8080, help="port (default 8080; 0 picks a free one)")
    parser.add_argument("--slots", type=int, default=None, help="override [server] slots")
    parser.add_argument("--seed", type=int, default=None, help="override [server] seed")
    parser.add_argument("--admission", choices=("fifo", "unfair"), default=None, help="override admission")
    parser.add_argument("--batch", type=int, default=None, help="override [server] batch (-b)")
    parser.add_argument("--ubatch", type=int, default=None, help="override [server] ubatch (-ub)")
    parser.add_argument("--time-scale", type=float, default=None, help="override [server] time_scale")


async def serve(
    profile: object,
    host: str,
    port: int,
    stop: asyncio.Event | None = None,
    on_app: Callable[[Any], None] | None = None,
) -> None:
    """Serves until ``stop`` is set (or, when ``stop`` is None, until SIGINT/SIGTERM).

    ``on_app`` receives the ``SimulatorApp`` (engine, runtime, faults) once it exists, for in-process tests.
    """
    from aiohttp import web

    from simulator.profile import Profile
    from simulator.server import RUNTIME_KEY, create_app

    if not isinstance(profile, Profile):
        raise TypeError("profile must be a simulator.profile.Profile")
    app = create_app(profile)
    if on_app is not None:
        on_app(app[RUNTIME_KEY])
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=1024)
    await site.start()
    addr = runner.addresses[0]
    print(
        f"satbench sim: listening on http://{addr[0]}:{addr[1]} (profile {profile.name}, "
        f"{profile.server.slots} slots, simulated runtime)",
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


def main(args: argparse.Namespace) -> int:
    from simulator.profile import ProfileError, load_profile

    try:
        profile = load_profile(args.profile).with_overrides(
            slots=args.slots,
            seed=args.seed,
            admission=args.admission,
            batch=args.batch,
            ubatch=args.ubatch,
            time_scale=args.time_scale,
        )
    except ProfileError as exc:
        print(f"satbench sim: {exc}", file=sys.stderr)
        return 2
    try:
        asyncio.run(serve(profile, args.host, args.port))
    except OSError as exc:
        print(f"satbench sim: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    return 0
