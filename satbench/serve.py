"""``satbench serve [RUN_DIR ...]``: serve finished runs' answers at ``GET /recommendations``.

A session's recommender stops with the session; its answer stays in the run folder
(``recommendations.json``). This command serves those answers as they were written (the recommender with
``recorded_answers``, no Prometheus needed), merged lane by lane with the newest run of each lane winning,
on the recommender's own port (9108, the one ``satbench capabilities`` reads by default), so a router or
capability reporting can poll a node's measured answer after the benchmark is over. A run folder without a
``recommendations.json`` is analysed from its records.

Each RUN_DIR is a run folder (it holds ``manifest.json``) or a folder of run folders (default: ``runs``).
A folder whose manifest cannot be read (another schema, a crash before it was written) is skipped with a
line saying so. A run that did not finish (killed mid-walk: its manifest's ``finished_at`` null; cut short by
a full disk) is partial: it is said in a line here, listed so at ``GET /runs`` and in the document's notes,
and its answer for a lane is served only where no finished run answers it, marked ``partial``
(``recommender.store``): a killed walk's top rung is where the kill stopped it, not where the lane saturated.

Exit status 2 when a RUN_DIR holds no readable run folder or a setting is refused; 1 when the port cannot be
bound (the service cannot start); 0 when stopped.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = ["configure", "main", "run_folders"]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dirs", nargs="*", type=Path, metavar="RUN_DIR",
                        help="run folders, or folders of run folders (default: runs)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=None, help="port to bind (default 9108)")
    parser.add_argument("--allowed-host", action="append", default=[], metavar="NAME", dest="allowed_hosts",
                        help="a name the service answers to besides its bind address and localhost (repeatable)")


def run_folders(paths: list[Path], skipped: list[str] | None = None, partial: list[str] | None = None) -> list[Path]:
    """Every readable run folder that ``paths`` name (a run folder itself, or the run folders inside a
    folder); an unreadable one is left out and said in ``skipped``, a partial one said in ``partial``;
    ``ValueError`` naming a path that holds no readable run folder."""
    from satbench.core.manifest import read_manifest

    out: list[Path] = []
    for path in paths:
        found = [path] if (path / "manifest.json").is_file() else (
            sorted(p.parent for p in path.glob("*/manifest.json")) if path.is_dir() else [])
        readable = []
        for folder in found:
            try:
                manifest = read_manifest(folder / "manifest.json")
            except (OSError, ValueError, KeyError, TypeError) as exc:
                if skipped is not None:
                    skipped.append(f"{folder}: manifest.json unreadable ({type(exc).__name__}: {exc})")
                continue
            if manifest.partial is not None and partial is not None:
                partial.append(f"{folder}: partial, {manifest.partial}; its answers stand only where no finished "
                               "run answers the lane, marked partial")
            readable.append(folder)
        if not readable:
            raise ValueError(f"RUN_DIR: {path} holds no readable run folder (no manifest.json in it or under it)")
        out += readable
    return out


def _port_free(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be bound, or None."""
    import socket

    try:
        with socket.create_server((host, port)):
            return None
    except OSError as exc:
        return exc.strerror or str(exc)


def main(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from satbench.core.config_files import format_validation_error
    from satbench.recommender.app import analysis_workers, create_app
    from satbench.recommender.http_server import serve
    from satbench.recommender.settings import RecommenderSettings

    skipped: list[str] = []
    partial: list[str] = []
    try:
        folders = run_folders(args.run_dirs or [Path("runs")], skipped, partial)
        extra = {} if args.port is None else {"port": args.port}
        settings = RecommenderSettings(prometheus_url=None, host=args.host, run_dirs=folders,
                                       recorded_answers=True, allowed_hosts=getattr(args, "allowed_hosts", []),
                                       **extra)
    except ValueError as exc:
        text = (format_validation_error(exc, "serve", model=RecommenderSettings)
                if isinstance(exc, ValidationError) else str(exc))
        for line in skipped:
            print(f"satbench serve: skipped {line}", file=sys.stderr)
        print(f"satbench serve: {text}", file=sys.stderr)
        return 2
    for line in skipped:
        print(f"satbench serve: skipped {line}", file=sys.stderr)
    for line in partial:
        print(f"satbench serve: {line}", file=sys.stderr)
    why = _port_free(settings.host, settings.port)
    if why is not None:
        print(f"satbench serve: cannot listen on {settings.host}:{settings.port}: {why} (choose another --port)",
              file=sys.stderr)
        return 1
    print(f"satbench serve: {len(folders)} run folder(s) at http://{settings.host}:{settings.port}/recommendations "
          "(read it with: satbench capabilities)", flush=True)
    with analysis_workers() as workers:  # a folder without recommendations.json is analysed off the loop
        serve(create_app(settings, analysis_executor=workers), settings)  # bounded, half-sent requests timed out
    return 0
