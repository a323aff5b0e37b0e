"""``satbench run [--config FILE] [--url URL ...] [--out DIR]``: a whole session (see ``satbench.session.run``).

With no config: two simulator lanes (dense, moe), ladder 1/2/4/8, a local Prometheus and recommender.
``--url URL`` (repeatable) measures a node that is already running instead, each URL one external lane
(``--name``, ``--api``, ``--model``, ``--api-key-env`` and ``--slots`` apply to the lanes given this way), every
other setting at its default or the config's: the quick start for one's own node.

A fleet: ``--shard INDEX/COUNT`` (or a Kubernetes Indexed Job's environment) walks one shard's share of the
config's nodes under a run id every shard shares (``--run-id``, ``--run-started-at``); ``--remeasure URL`` walks
only the lanes the served document calls stale or unknown (``satbench.fleet``). A walk left empty by either
is said and exits 0 without starting anything.

Exit status, the one rule of every ``satbench`` command that answers: 0 when every lane has an answer, 1
when some lane has none (each said by name; a part that cannot start counts: nothing was answered), 2 for
bad input (config, flags, an out folder that is not a folder, a run id whose run folder already exists: a
killed shard rerun under its run id is refused, not resumed, ``satbench.session.run``), refused before
anything starts and before a run folder exists; 130 on Ctrl-C. Every child process is stopped in every case.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from satbench.core.api import API_FLAVOURS

__all__ = ["configure", "main", "quick_lanes"]


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
    load = parser.add_argument_group("open-loop load: the rate answer beside the concurrency answer")
    load.add_argument("--arrival", default=None, choices=["closed", "constant", "poisson", "gamma"],
                      help="after the closed ladder, walk open-loop rates with these arrivals and answer the "
                           "highest rate each lane sustains within its objectives (loadgen.arrival)")
    load.add_argument("--rate", action="append", type=float, default=[], metavar="RPS",
                      help="an open-loop rate to measure, requests/s (repeat; default: relative to the lane's "
                           "measured capacity, then a search)")
    load.add_argument("--prefill", action="store_true",
                      help="after the closed ladder, walk each lane's peak prefill throughput: long prompts, one "
                           "output token, rising concurrency (loadgen.prefill; llm-d's peakPrefillThroughput)")
    load.add_argument("--prefill-tokens", type=int, default=None, metavar="N",
                      help="the prompt length of that walk (default 2048, within a slot's context); implies --prefill")
    load.add_argument("--agents", action="store_true",
                      help="after the closed ladder, walk the most concurrent agent sessions each lane holds at its "
                           "tier (loadgen.agents: p95 TTFT 2 s, p25 speed 30 tok/s unless set)")
    load.add_argument("--agent-trajectories", type=Path, default=None, metavar="FILE",
                      help="play these recorded agent sessions (cc-traces-weka JSON lines) in that walk; implies "
                           "--agents")
    real = parser.add_argument_group("real traffic: a recorded trace or a conversation dataset (docs/traces.md)")
    real.add_argument("--trace", default=None, type=Path, metavar="FILE",
                      help="after the closed ladder, replay this trace (Mooncake JSONL, BurstGPT or Azure LLM CSV) "
                           "at speed factors and answer how many times its traffic each lane takes (loadgen.trace)")
    real.add_argument("--speed-factor", action="append", type=float, default=[], metavar="X",
                      help="a speed factor to replay the trace at (repeat; default 0.5, 1, 2, 4, then a search)")
    real.add_argument("--trace-offset", type=float, default=None, metavar="S",
                      help="replay the trace from this many seconds into it (default 0)")
    real.add_argument("--trace-length", type=float, default=None, metavar="S",
                      help="replay this many seconds of the trace (default: to its end)")
    real.add_argument("--dataset", default=None, type=Path, metavar="FILE",
                      help="send this dataset's prompts, whole conversations turn by turn (ShareGPT JSON, OpenAI "
                           "chat JSONL or prompt JSONL; loadgen.workload.dataset)")
    real.add_argument("--dataset-sample", type=int, default=None, metavar="N",
                      help="draw N of the dataset's conversations (seeded; default: every one)")
    node = parser.add_argument_group("your own node (replaces the config's lanes)")
    node.add_argument("--url", action="append", default=[], metavar="URL",
                      help="base URL of a running llama-server (or any server of --api); repeat for more lanes")
    node.add_argument("--name", action="append", default=[], metavar="NAME",
                      help="lane name per --url, in order (default: the model name, else 'node')")
    node.add_argument("--exporter-url", action="append", default=[], metavar="URL",
                      help="an exporter already running for the lane, per --url in order (the session starts none)")
    node.add_argument("--api", default=None, choices=sorted(API_FLAVOURS),
                      help="the API to load it through (default llamacpp: /completion)")
    node.add_argument("--model", action="append", default=[], metavar="MODEL",
                      help="model name sent in requests (router and OpenAI servers): one for every --url, or one "
                           "per --url in order (a router node: the same --url once per model)")
    node.add_argument("--api-key-env", default=None, metavar="VAR",
                      help="environment variable that holds the API key (the key itself is never written)")
    node.add_argument("--slots", type=int, default=None,
                      help="the node's slot count, where it does not report one in /props")
    fleet = parser.add_argument_group("a fleet walked by shards, answers kept fresh (docs/kubernetes.md)")
    fleet.add_argument("--shard", default=None, metavar="INDEX/COUNT",
                       help="walk this shard's share of the fleet's nodes (0-based; default: JOB_COMPLETION_INDEX "
                            "and SATBENCH_SHARD_COUNT where set)")
    fleet.add_argument("--run-id", default=None, metavar="ID",
                       help="the run id every shard shares (default: SATBENCH_RUN_ID)")
    fleet.add_argument("--run-started-at", default=None, metavar="TIME",
                       help="derive the shared run id from this start time (Unix seconds or ISO 8601)")
    fleet.add_argument("--remeasure", default=None, metavar="URL",
                       help="walk only the lanes the recommender at URL calls stale or unknown")
    fleet.add_argument("--remeasure-max-bytes", type=int, default=None, metavar="N",
                       help="the most bytes read of the --remeasure document (default 16 MiB)")
    fleet.add_argument("--remeasure-timeout-s", type=float, default=None, metavar="S",
                       help="the whole --remeasure document must arrive within S seconds (default 30)")


def _lane_name(base: str, url: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", base).strip("-.")[:64]
    return name or (urlsplit(url).hostname or "node")


def quick_lanes(args: argparse.Namespace) -> list[dict[str, Any]] | None:
    """The external lanes that ``--url`` asks for (``None`` without ``--url``); ``ValueError`` names the flag."""
    if not args.url:
        for flag in ("name", "exporter_url", "api", "model", "api_key_env", "slots"):
            if getattr(args, flag) not in (None, []):
                raise ValueError(f"--{flag.replace('_', '-')} applies to the lanes of --url, and none was given")
        return None
    for flag in ("name", "exporter_url"):
        given = getattr(args, flag)
        if given and len(given) != len(args.url):
            raise ValueError(f"--{flag.replace('_', '-')}: give one per --url ({len(args.url)}), got {len(given)}")
    if len(args.model) > 1 and len(args.model) != len(args.url):
        raise ValueError(f"--model: give one for every --url or one per --url ({len(args.url)}), "
                         f"got {len(args.model)}")
    models = args.model * len(args.url) if len(args.model) == 1 else args.model or [None] * len(args.url)
    # a lane is named by its model (one model per URL: the model's own name; several: each its own)
    bases = [m.rsplit("/", 1)[-1] if m else "node" for m in models]
    lanes = []
    for i, url in enumerate(args.url):
        if args.name:
            name = args.name[i]
        else:
            name = _lane_name(bases[i] if bases.count(bases[i]) == 1 else f"{bases[i]}{i + 1}", url)
        lane: dict[str, Any] = {"name": name, "runtime": "external", "url": url}
        if args.exporter_url:
            lane["exporter_url"] = args.exporter_url[i]
        lane.update({k: v for k, v in (("api", args.api), ("model", models[i]),
                                       ("api_key_env", args.api_key_env), ("slots", args.slots)) if v is not None})
        lanes.append(lane)
    return lanes


def _check_out_dir(out: Path) -> None:
    """The folder for run folders must be a folder, or creatable: refused as bad input before anything runs."""
    probe = out
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise ValueError(f"out_dir: {probe} is not a directory (choose another --out)")
    if not os.access(probe, os.W_OK):
        raise ValueError(f"out_dir: {probe} is not writable (choose another --out)")


def fleet_plan(args: argparse.Namespace, config: Any, environ: dict[str, str] | None = None) -> Any:
    """The lanes to walk (``satbench.fleet.plan``): the shard (``--shard``, else an Indexed Job's environment),
    the shared run id (``--run-id``, else ``SATBENCH_RUN_ID``) and the served document of ``--remeasure``."""
    from satbench.fleet.plan import plan_walk
    from satbench.fleet.remeasure import MAX_DOCUMENT_BYTES, READ_TIMEOUT_S, read_document
    from satbench.fleet.shards import RUN_ID_ENV, parse_shard, shard_from_env

    env = os.environ if environ is None else environ
    shard = parse_shard(args.shard) if args.shard else shard_from_env(env)
    run_id = args.run_id or (None if args.run_started_at else env.get(RUN_ID_ENV) or None)
    max_bytes, timeout_s = getattr(args, "remeasure_max_bytes", None), getattr(args, "remeasure_timeout_s", None)
    for flag, value in (("--remeasure-max-bytes", max_bytes), ("--remeasure-timeout-s", timeout_s)):
        if value is not None and not args.remeasure:
            raise ValueError(f"{flag} applies to --remeasure URL, and none was given")
    document = read_document(args.remeasure, max_bytes=MAX_DOCUMENT_BYTES if max_bytes is None else max_bytes,
                             timeout_s=READ_TIMEOUT_S if timeout_s is None else timeout_s) if args.remeasure else None
    return plan_walk(config, shard=shard, run_id=run_id, started_at=args.run_started_at,
                     remeasure_url=args.remeasure, document=document)


def _traffic_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """``--trace`` and ``--dataset`` with their settings as the config's dotted overrides."""
    out: dict[str, Any] = {}
    if args.trace is not None:
        out["loadgen.trace.path"] = str(args.trace)
    for flag, key, value in (("--speed-factor", "factors", args.speed_factor or None),
                             ("--trace-offset", "offset_s", args.trace_offset),
                             ("--trace-length", "length_s", args.trace_length)):
        if value is not None:
            if args.trace is None:
                raise ValueError(f"{flag} needs --trace FILE")
            out[f"loadgen.trace.{key}"] = value
    if args.dataset is not None:
        out["loadgen.workload.dataset.path"] = str(args.dataset)
    if args.dataset_sample is not None:
        if args.dataset is None:
            raise ValueError("--dataset-sample needs --dataset FILE")
        out["loadgen.workload.dataset.sample"] = args.dataset_sample
    return out


def main(args: argparse.Namespace) -> int:
    from satbench.loadgen.cli import parse_overrides
    from satbench.loadgen.inputs import load_inputs
    from satbench.loadgen.runner import WalkCutShort
    from satbench.runtimes.processes import StartError
    from satbench.session.config import SessionConfigError, load_session_config
    from satbench.session.run import run_folder, run_session, taken_run_folder

    try:
        overrides: dict[str, Any] = parse_overrides(args.set)
        if args.arrival:
            overrides["loadgen.arrival.process"] = args.arrival
        if args.rate:
            overrides["loadgen.arrival.process"] = overrides.get("loadgen.arrival.process") or "poisson"
            overrides["loadgen.arrival.rates"] = list(args.rate)
        if args.prefill or args.prefill_tokens is not None:
            overrides["loadgen.prefill.prompt_tokens"] = 2048 if args.prefill_tokens is None else args.prefill_tokens
        if args.agent_trajectories is not None:
            overrides["loadgen.agents.trajectories"] = str(args.agent_trajectories)
        elif args.agents:
            overrides["loadgen.agents.seed"] = 0
        overrides.update(_traffic_overrides(args))
        lanes = quick_lanes(args)
        if lanes is not None:
            overrides["lanes"] = lanes
        config = load_session_config(args.config, overrides)
        inputs = load_inputs(config.loadgen)  # a bad trace or dataset file is refused before anything starts
        _check_out_dir(args.out or config.out_dir)
        plan = fleet_plan(args, config)
        taken = None if plan.run_id is None else taken_run_folder(run_folder(args.out or config.out_dir,
                                                                             plan.run_id, plan.stamp))
        if taken is not None:  # a shard rerun under its run id: refused, not resumed (satbench.session.run)
            raise ValueError(taken)
    except (SessionConfigError, ValueError) as exc:
        print(f"satbench run: {exc}", file=sys.stderr)
        return 2
    except RecursionError:  # a --set value (TOML) nested past the parser's recursion bound
        print("satbench run: an input nests too deep (past the parser's recursion bound)", file=sys.stderr)
        return 2
    for line in plan.lines:
        print(line, flush=True)
    if plan.empty:
        print("satbench run: nothing to walk" + (" (every answer it would re-measure is valid)"
                                                 if plan.remeasure is not None else " (this shard has no node)"))
        return 0
    argv0 = sys.argv[0] if sys.argv else "satbench"
    launcher = (
        [sys.executable, "-m", "satbench.cli"] if argv0.endswith(("satbench/cli.py", "-c")) else [argv0]
    )
    command = [*launcher, *sys.argv[1:]]
    try:
        result = run_session(plan.config, command=command, out_dir=args.out, say=lambda m: print(m, flush=True),
                             run_id=plan.run_id, shard=plan.stamp, remeasure=plan.remeasure, inputs=inputs)
    except StartError as exc:
        print(f"satbench run: cannot start: {exc}", file=sys.stderr)
        return 1
    except WalkCutShort as exc:  # a full disk: the run folder is kept, marked partial
        print(f"satbench run: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # every child is already stopped; say why in one line, not a traceback
        print(f"satbench run: failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return result.exit_code
