"""``satbench run [--config FILE] [--out DIR]``: a whole session (see ``satbench.session.run``).

With no config: two simulator lanes (dense, moe), ladder 1/2/4/8, a local Prometheus and recommender. Exit
status 0 with an answer printed; 2 for a bad config; 1 with a one-line reason when something cannot start
(Prometheus missing, a runtime not answering, a port taken); 130 on Ctrl-C. Every child process is stopped
in every case.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = ["configure", "main"]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", type=Path, default=None, help="session config (TOML; see examples/session.toml)"
    )
    parser.add_argument("--out", type=Path, default=None, help="folder for run folders (default: runs)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config value by dotted path, value as TOML (e.g. loadgen.warmup_s=1)",
    )


def _overrides(items: list[str]) -> dict[str, object]:
    import tomllib

    out: dict[str, object] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--set wants KEY=VALUE, got {item!r}")
        try:
            out[key.strip()] = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            out[key.strip()] = raw
    return out


def main(args: argparse.Namespace) -> int:
    from satbench.session.config import SessionConfigError, load_session_config
    from satbench.session.processes import StartError
    from satbench.session.run import run_session

    try:
        config = load_session_config(args.config, _overrides(args.set))
    except (SessionConfigError, ValueError) as exc:
        print(f"satbench run: {exc}", file=sys.stderr)
        return 2
    argv0 = sys.argv[0] if sys.argv else "satbench"
    launcher = (
        [sys.executable, "-m", "satbench.cli"] if argv0.endswith(("satbench/cli.py", "-c")) else [argv0]
    )
    command = [*launcher, *sys.argv[1:]]
    try:
        result = run_session(config, command=command, out_dir=args.out, say=lambda m: print(m, flush=True))
    except StartError as exc:
        print(f"satbench run: cannot start: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # every child is already stopped; say why in one line, not a traceback
        print(f"satbench run: failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return result.exit_code
