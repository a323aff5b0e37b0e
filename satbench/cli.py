"""satbench: how much concurrency each model lane of a llama.cpp node can use.

This module is the console script. Every subcommand lives in its part's module, which exposes
``configure(parser)`` and ``main(args) -> int``; this module only dispatches and imports a part lazily (only
the chosen subcommand's dependencies are loaded). Its help text is ``HELP`` (the docstring is for readers of
the code).

A reader that stops early (``satbench capabilities | head -1``) closes the pipe, and the next write raises
BrokenPipeError. ``main`` ends such a run quietly, where stdout is that pipe (a socket's BrokenPipeError stays
an error): no traceback, stdout pointed at the null device so the interpreter's own flush at exit has nowhere
to fail, and exit status 141, 128 + SIGPIPE, what the shell reports for a tool the signal ended (``yes | head
-1`` under ``set -o pipefail``), as 130 is 128 + SIGINT. Not 0: the output was cut short, and a caller that
asked for all of it can tell. Not by restoring the signal's default action, which would end ``satbench run``
mid-write without stopping the processes it started.
"""

from __future__ import annotations

import argparse
import importlib
import os
import select
import sys
from collections.abc import Sequence

from satbench.core import __version__

__all__ = ["EXIT_CLOSED_STDOUT", "SUBCOMMANDS", "build_parser", "main"]

HELP = "satbench: how much concurrency each model lane of a llama.cpp node can use."
EPILOG = """\
start here:
  satbench run                          a full session on the embedded simulator (about 3 minutes)
  satbench run --url http://NODE:8080   measure your own llama-server node
  satbench serve runs                   serve the finished runs' answers at :9108/recommendations
  satbench capabilities                 print each lane's answer from that service

exit status: 0 every lane has an answer, 1 some lane has none, 2 bad input, 130 interrupted,
  141 the reader of the output closed it early"""

EXIT_CLOSED_STDOUT = 141  # 128 + SIGPIPE

# subcommand -> (module with configure/main, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "run": ("satbench.session.cli", "a whole benchmark session: start what is missing, walk the ladder, answer"),
    "tune": ("satbench.tune.cli", "find each lane's server settings (-np, -b, -ub, -c), not only its concurrency"),
    "sim": ("satbench.simulator.cli", "the embedded llama.cpp-compatible runtime simulator"),
    "sim-fleet": ("satbench.simulator.fleet",
                  "many simulated nodes and lanes from one process (fleet tests and benches)"),
    "loadgen": ("satbench.loadgen.cli", "only the ladder walk, against running endpoints"),
    "exporter": ("satbench.exporter.cli", "the runtime exporter for one node (runtime_* and gpu_* metrics)"),
    "recommender": ("satbench.recommender.cli", "the recommendations service (GET /recommendations)"),
    "report": ("satbench.report.cli",
               "rebuild report.html, README.md, steps.csv and records.csv from a run folder's raw files"),
    "models": ("satbench.models.cli", "write the tiny dense and MoE GGUF models"),
    "serve": ("satbench.serve", "serve finished runs' answers at GET /recommendations (no Prometheus needed)"),
    "compare": ("satbench.compare.cli", "what changed from run A to run B, lane by lane, judged by the runs' own "
                "intervals (exits 1 on a significant regression)"),
    "fingerprint-key": ("satbench.recommender.fingerprint_key_cli", "the key a node's exporter signs its "
                        "fingerprint series with, derived from the fleet key"),
    "plan": ("satbench.plan.cli", "how many nodes of each kind meet a target rate or user count within the "
             "objectives, from the fleet's answers and their intervals"),
    "capabilities": ("satbench.recommender.capabilities_cli", "print the answer per node and lane where routers "
                     "read it (json, prometheus, litellm)"),
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="satbench", description=HELP, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"satbench {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        sp = sub.add_parser(name, help=help_text, description=help_text)
        sp.set_defaults(_module=module_name)
        if only is None or only == name:
            module = importlib.import_module(module_name)
            module.configure(sp)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The console script: runs the chosen subcommand; a closed stdout ends it quietly (module docstring)."""
    try:
        try:
            status = _dispatch(argv)
        except SystemExit:  # argparse's --help and refusals: what they wrote reaches the pipe first
            sys.stdout.flush()
            raise
        sys.stdout.flush()  # a buffered write meets a closed reader here, not in the interpreter's exit
        return status
    except BrokenPipeError:
        if not _stdout_reader_gone():  # a socket's broken pipe is an error, not a reader that stopped
            raise
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_CLOSED_STDOUT


def _stdout_reader_gone() -> bool:
    """Whether stdout is a pipe with no reader left: poll() says POLLERR on its write end."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return False
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & select.POLLERR for _, events in poller.poll(0))


def _dispatch(argv: Sequence[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    chosen = next((a for a in argv if a in SUBCOMMANDS), None)
    parser = build_parser(only=chosen or "")
    args = parser.parse_args(argv)
    if not getattr(args, "_module", None):
        parser.print_help()
        return 2
    module = importlib.import_module(args._module)
    try:
        return int(module.main(args) or 0)
    except KeyboardInterrupt:
        print("satbench: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
