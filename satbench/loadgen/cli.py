"""``satbench loadgen --config FILE [--out DIR]``: only the ladder walk, against running endpoints.

Overrides: ``--set key=value`` (dotted path, TOML value: ``--set ladder.concurrency=[1,2]``), plus
``--run-id`` and ``--metrics-port``. The config is validated before anything starts; a bad one prints
every bad field and exits with status 2.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tomllib
from pathlib import Path
from typing import Any

__all__ = ["configure", "main", "parse_overrides"]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, required=True, help="loadgen TOML file")
    parser.add_argument("--out", type=Path, default=None, help="output folder (default runs/<run_id>)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config value (dotted path, TOML value); repeatable")
    parser.add_argument("--run-id", default=None,
                        help="id of this run, labels every record and series (default: UTC time + 4 hex digits)")
    parser.add_argument("--metrics-port", type=int, default=None, help="serve loadgen_* here (0 = any)")


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """``["a.b=1", "c=[1,2]", "d=text"]`` -> ``{"a.b": 1, "c": [1, 2], "d": "text"}`` (TOML values)."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--set: {item!r} is not KEY=VALUE (a dotted setting = a TOML value)")
        try:
            value = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw
        out[key.strip()] = value
    return out


def main(args: argparse.Namespace) -> int:
    from satbench.core.manifest import new_run_id
    from satbench.loadgen.config import ConfigError, load_config
    from satbench.loadgen.inputs import load_inputs
    from satbench.loadgen.runner import run_ladder

    try:
        overrides = parse_overrides(args.overrides)
        if args.metrics_port is not None:
            overrides["metrics_port"] = args.metrics_port
        config = load_config(args.config, overrides)
        if not config.lanes:
            raise ConfigError("invalid loadgen config: lanes: at least one lane is needed to run")
        inputs = load_inputs(config)  # a bad trace or dataset file is bad input, said before any load is sent
    except (ConfigError, ValueError) as exc:
        print(f"satbench loadgen: {exc}", file=sys.stderr)
        return 2
    from satbench.core.loops import fast_loop_factory

    run_id = args.run_id or new_run_id()
    out = args.out or Path("runs") / run_id
    with asyncio.Runner(loop_factory=fast_loop_factory()) as runner:
        manifest = runner.run(run_ladder(config, out, run_id=run_id, inputs=inputs))
    invalid = [s for s in manifest.steps if not s.valid]
    print(f"satbench loadgen: {len(manifest.steps)} steps, {len(invalid)} invalid; results in {out}")
    return 0
