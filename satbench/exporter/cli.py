"""``satbench exporter``: the runtime exporter for one node, serving ``runtime_*`` and ``gpu_*`` on /metrics.

Run one beside each runtime node; the node's lane is a target label in ``prometheus.yml``, not a flag. A
llama-server in router mode is detected (``--router auto``) and served per model: every loaded model's
series carry a ``model`` label, and ``/metrics?model=NAME`` serves one model, for one lane.

``--fingerprint-key-file`` (or ``SATBENCH_EXPORTER_FINGERPRINT_KEY``; never a flag's value) holds the node's
fingerprint key: the fingerprint series is then signed, so a recommender with the fleet key can tell it from
one written into the store by anyone else (``core.fingerprint_signature``).

``--runtime-api-key-file`` (or ``SATBENCH_EXPORTER_RUNTIME_API_KEY``; never a flag's value, which every user of
the host can read) holds the runtime's API key: a llama-server started with ``--api-key`` answers ``/metrics``,
``/slots`` and ``/props`` only with it, and the exporter sends it with every read of the runtime.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from satbench.exporter.relay_metrics import RelayMetrics

__all__ = ["KEY_ENV", "RUNTIME_API_KEY_ENV", "configure", "fingerprint_key", "main", "runtime_api_key"]

KEY_ENV = "SATBENCH_EXPORTER_FINGERPRINT_KEY"
RUNTIME_API_KEY_ENV = "SATBENCH_EXPORTER_RUNTIME_API_KEY"


def _secret(flag: str, env: str, path: Path | None, environ: dict[str, str] | None) -> str | None:
    """A secret's text: the file's (surrounding whitespace stripped), else ``$env``'s, else None. ``ValueError``
    naming the flag for a file that cannot be read or is empty."""
    if path is not None:
        from satbench.core.config_files import read_secret_file

        return read_secret_file(flag, path)
    text = (os.environ if environ is None else environ).get(env, "").strip()
    return text or None


def fingerprint_key(path: Path | None, environ: dict[str, str] | None = None) -> bytes | None:
    """The node's fingerprint key: the file's text, else ``$SATBENCH_EXPORTER_FINGERPRINT_KEY``, else None.
    ``ValueError`` naming the setting for a file that cannot be read or is empty."""
    text = _secret("--fingerprint-key-file", KEY_ENV, path, environ)
    return None if text is None else text.encode()


def runtime_api_key(path: Path | None, environ: dict[str, str] | None = None) -> str | None:
    """The runtime's API key: the file's text (one line), else ``$SATBENCH_EXPORTER_RUNTIME_API_KEY``, else
    None. ``ValueError`` naming the setting for a file that cannot be read, is empty or holds several lines
    (llama-server's ``--api-key-file`` takes one key a line; the exporter sends one)."""
    text = _secret("--runtime-api-key-file", RUNTIME_API_KEY_ENV, path, environ)
    if text is not None and not text.isprintable():
        where = f"--runtime-api-key-file {path}" if path is not None else f"${RUNTIME_API_KEY_ENV}"
        raise ValueError(f"{where}: the key must be one printable line (the exporter sends one key)")
    return text


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runtime-url", required=True, help="runtime base URL (llama-server, simulator)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=9101, help="port to listen on (default 9101; 0 = any)")
    parser.add_argument("--runtime-pid", type=int, default=None,
                        help="runtime PID for host RSS (default: found by the URL's local port)")
    from satbench.exporter.flavours import FLAVOURS

    parser.add_argument("--flavour", default="auto", choices=list(FLAVOURS), help="runtime API flavour")
    parser.add_argument("--gpu", default="auto", choices=["auto", "nvml", "none"],
                        help="real GPUs via NVML (auto: try when the runtime is on this host, gpu_up 0 if "
                             "absent, skipped for a simulator)")
    parser.add_argument("--cpu-energy", default="auto", choices=["auto", "rapl", "none"],
                        help="the host's CPU package energy via powercap (auto: when the runtime is on this host; "
                             "cpu_energy_up 0 where the kernel does not let it be read)")
    parser.add_argument("--budget-s", type=float, default=0.5,
                        help="time budget of one scrape; slower sources count as down (default 0.5)")
    parser.add_argument("--relay", metavar="HOST:PORT", default=None,
                        help="also run a timing reverse proxy to the runtime here (runtime_ttft_seconds...)")
    parser.add_argument("--relay-timeout-s", type=float, default=600.0,
                        help="relay: longest runtime silence before 504 / abort (default 600)")
    parser.add_argument("--props-ttl-s", type=float, default=30.0, help="/props cache life (default 30)")
    parser.add_argument("--router", nargs="?", const="yes", default="auto", choices=["auto", "yes", "no"],
                        help="llama-server router mode: auto (default: /props role), yes (bare --router), no")
    parser.add_argument("--model", default=None,
                        help="router mode: publish only this model (a scrape's ?model= still picks another)")
    parser.add_argument("--kv-unified", default="auto", choices=["auto", "yes", "no"],
                        help="KV cache shared by all slots? auto (default): what the runtime tells, else unknown")
    parser.add_argument("--models-root", action="append", default=[], metavar="DIR",
                        help="a folder whose model files may be sized and hashed for the fingerprint "
                             "(repeatable; besides these only files the runtime itself has open are read)")
    parser.add_argument("--max-body-bytes", type=int, default=16 << 20,
                        help="the most bytes read of one runtime answer (default 16 MiB)")
    parser.add_argument("--fingerprint-key-file", type=Path, default=None, metavar="PATH",
                        help="a file holding this node's fingerprint key (satbench fingerprint-key --node N): "
                             "runtime_fingerprint_info is signed with it (default: "
                             f"${KEY_ENV}; unset: not signed)")
    parser.add_argument("--read-max-age-s", type=float, default=0.5,
                        help="scrapes within this many seconds share one read of the node, so many scrapers "
                             "cost it one (default 0.5: half a 1 s scrape interval; 0: every scrape reads)")
    parser.add_argument("--runtime-api-key-file", type=Path, default=None, metavar="PATH",
                        help="a file holding the runtime's API key (llama-server --api-key), sent with every "
                             f"read of the runtime (default: ${RUNTIME_API_KEY_ENV}; unset: none sent)")


def main(args: argparse.Namespace) -> int:
    from satbench.exporter.server import ExporterConfig, build_collector, serve

    try:
        config = ExporterConfig(
            runtime_url=args.runtime_url, host=args.host, port=args.port, runtime_pid=args.runtime_pid,
            flavour=args.flavour, gpu=args.gpu, cpu_energy=args.cpu_energy, budget_s=args.budget_s,
            props_ttl_s=args.props_ttl_s,
            router=args.router, model=args.model, kv_unified=args.kv_unified,
            models_roots=tuple(args.models_root), max_body_bytes=args.max_body_bytes,
            fingerprint_key=fingerprint_key(getattr(args, "fingerprint_key_file", None)),
            read_max_age_s=args.read_max_age_s,
            runtime_api_key=runtime_api_key(getattr(args, "runtime_api_key_file", None)),
        )
    except ValueError as exc:
        print(f"satbench exporter: {exc}", file=sys.stderr)
        return 2
    relay_at = None
    if args.relay is not None:
        from satbench.exporter.relay import parse_listen_address

        try:
            relay_at = parse_listen_address(args.relay)
            if not 0 < args.relay_timeout_s <= 86400:
                raise ValueError(f"--relay-timeout-s must be within 0..86400 s, got {args.relay_timeout_s}")
        except ValueError as exc:
            print(f"satbench exporter: {exc}", file=sys.stderr)
            return 2
    collector = build_collector(config)
    relay_metrics = None
    if relay_at is not None:
        from satbench.exporter.relay_metrics import RelayMetrics

        relay_metrics = RelayMetrics()
    try:
        server = serve(collector, config.host, config.port, also=[relay_metrics] if relay_metrics else [])
    except OSError as exc:
        print(f"satbench exporter: cannot listen on {config.host}:{config.port}: {exc}", file=sys.stderr)
        collector.close()
        return 1
    print(f"satbench exporter: {server.url}/metrics for {config.runtime_url}", flush=True)
    try:
        if relay_at is not None and relay_metrics is not None:
            return _run_relay(config.runtime_url, relay_metrics, *relay_at, args.relay_timeout_s)
        stop = threading.Event()

        def _stop(signum: int, frame: FrameType | None) -> None:
            stop.set()

        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
        stop.wait()
        return 0
    finally:
        server.close()
        collector.close()


def _run_relay(runtime_url: str, metrics: RelayMetrics, host: str, port: int, timeout_s: float) -> int:
    import asyncio
    import contextlib

    from satbench.core.loops import fast_loop_factory
    from satbench.exporter.relay import RelayServer

    async def relay() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, stop.set)
        server = RelayServer(runtime_url, metrics, host, port, read_timeout_s=timeout_s)
        url = await server.start()  # the real port, also when :0 was asked
        print(f"satbench exporter: relay on {url} -> {runtime_url}", flush=True)
        try:
            await stop.wait()
        finally:
            await server.close()
        return 0

    try:
        with asyncio.Runner(loop_factory=fast_loop_factory()) as runner:
            return runner.run(relay())
    except OSError as exc:
        print(f"satbench exporter: cannot relay on {host}:{port}: {exc}", file=sys.stderr)
        return 1
