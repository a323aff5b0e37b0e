"""``satbench serve [RUN_DIR ...]``: serve finished runs' answers at ``GET /recommendations``.

A session's recommender stops with the session; its answer stays in the run folder
(``recommendations.json``). This command serves those answers as they were written (the recommender with
``recorded_answers``, no Prometheus needed), merged lane by lane with the newest run of each lane winning,
on the recommender's own port (9108, the one ``satbench capabilities`` reads by default), so a router or
capability reporting can poll a node's measured answer after the benchmark is over. A run folder without a
``recommendations.json`` is analysed from its records.

Each RUN_DIR is a run folder (it holds ``manifest.json``) or a folder of run folders (default: ``runs``).
Exit status 2 when a RUN_DIR holds no run folder, or the port or policy is refused.
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


def run_folders(paths: list[Path]) -> list[Path]:
    """Every run folder that ``paths`` name (a run folder itself, or the run folders inside a folder);
    ``ValueError`` naming the path that holds none."""
    out: list[Path] = []
    for path in paths:
        if (path / "manifest.json").is_file():
            out.append(path)
            continue
        inside = sorted(p.parent for p in path.glob("*/manifest.json")) if path.is_dir() else []
        if not inside:
            raise ValueError(f"RUN_DIR: {path} holds no run folder (no manifest.json in it or under it)")
        out += inside
    return out


def main(args: argparse.Namespace) -> int:
    import uvicorn
    from pydantic import ValidationError

    from core.config_files import format_validation_error
    from recommender.app import create_app
    from recommender.settings import RecommenderSettings

    try:
        folders = run_folders(args.run_dirs or [Path("runs")])
        extra = {} if args.port is None else {"port": args.port}
        settings = RecommenderSettings(prometheus_url=None, host=args.host, run_dirs=folders,
                                       recorded_answers=True, **extra)
    except ValueError as exc:
        text = (format_validation_error(exc, "serve", model=RecommenderSettings)
                if isinstance(exc, ValidationError) else str(exc))
        print(f"satbench serve: {text}", file=sys.stderr)
        return 2
    print(f"satbench serve: {len(folders)} run folder(s) at http://{settings.host}:{settings.port}/recommendations "
          "(read it with: satbench capabilities)", flush=True)
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level="warning",
                access_log=False)
    return 0
