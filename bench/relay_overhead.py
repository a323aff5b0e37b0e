"""Relay cost: added latency per request and per token, relay CPU per token, and relay-vs-client agreement.

Goals (issue 9): at 64 concurrent streams on loopback, the relay adds under 0.5 ms per request at p99 and
costs under 20 us of CPU per token; its TTFT and e2e agree with the client's (loadgen's ``LaneClient``) for
the same request, joined by X-Request-ID, within 1 ms at p95.

Set-up, all on loopback: a paced stream server (``python -m testkit.stream_server``: fixed TTFT and
inter-token gap, its own truth per X-Request-ID) in one process; the relay (``exporter.relay.RelayServer``
on uvloop, as the CLI runs it) in a second process that records every observation and writes them out on
SIGTERM; a bare byte pipe (uvloop protocols, one runtime connection per client connection, no parsing,
no clock: what any user-space relay on this host costs at the least) in a third; the client (loadgen's
``LaneClient``, 64 closed-loop users) in this one. Phases take turns, direct, relayed, piped, for each
round, so all three see the same machine load. With ``--target URL`` the runtime is one that is already
running (a llama-server node): the relay and the pipe forward to it, and since it keeps no truth the figures
are the client's own TTFT and e2e per path and their differences, beside the same CPU figures.

Figures:

- transport overhead of a request = (server arrival - client send) + (client first token - server first
  token), server and client times mapped once to wall time; it removes the server's own pacing jitter.
  Added latency per request = relayed minus direct, at p50/p95/p99 of each distribution; the same for
  the bare pipe (the floor: two more loopback hops and a process wake-up each way) and relayed minus
  piped (what the relay's own work adds). The same for the last token (per-token added latency) and
  plain TTFT quantiles are printed too;
- relay CPU per token = the relay process's user+system CPU over the relayed phases / tokens relayed
  (all-in), beside the bare pipe's over the piped phases; and, from two more relayed phases at 16 and
  256 tokens per answer, CPU = a x requests + b x tokens solved for the per-request cost a and the
  marginal per-token cost b;
- inbound = server arrival - client send, per path: the request's way alone;
- agreement = client TTFT - relay TTFT and client e2e - relay e2e per relayed request.

The machine may be shared and loaded: the load average is printed before and after; read figures with it.

    .venv/bin/python bench/relay_overhead.py [--quick] [--users 64] [--itl-ms 20] [--tokens 32]
    .venv/bin/python bench/relay_overhead.py --target http://127.0.0.1:8080 --users 8   # a real node
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _serve import serving, truth_by_id  # noqa: E402

from satbench.core.statistics import quantile as exact_quantile  # noqa: E402
from satbench.loadgen.client import LaneClient  # noqa: E402
from satbench.loadgen.config import LaneConfig, LoadgenConfig  # noqa: E402


def quantile(values: list[float], q: float) -> float:
    """The project's quantile (linear interpolation) of unsorted values; NaN for none, so a table prints."""
    value = exact_quantile(sorted(values), q)
    return float("nan") if value is None else value


@contextlib.contextmanager
def child(argv: list[str], ready: str) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        if not line.startswith(ready):
            err = proc.stderr.read().decode()[-500:] if proc.stderr is not None else ""
            raise RuntimeError(f"{argv} did not start: {line!r} {err}")
        yield proc, line.split()[1]
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
        if proc.poll() is None:
            proc.kill()


def relay_child(runtime_url: str, out_path: str) -> int:
    """Runs the relay (uvloop when installed) until SIGTERM; then writes its observations as JSON."""
    from satbench.core.loops import fast_loop_factory
    from satbench.exporter.relay import RelayServer
    from satbench.exporter.relay_metrics import RelayMetrics
    from satbench.exporter.relay_observe import RelayTiming

    seen: list[dict[str, Any]] = []

    def observe(route: str, request_id: str, timing: RelayTiming) -> None:
        seen.append({"id": request_id, "ttft": timing.ttft_s, "e2e": timing.e2e_s,
                     "tokens": timing.output_tokens, "outcome": timing.outcome})

    async def serve() -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        server = RelayServer(runtime_url, RelayMetrics(), "127.0.0.1", 0, observer=observe)
        print(f"ready {await server.start()}", flush=True)
        await stop.wait()
        await server.close()

    with asyncio.Runner(loop_factory=fast_loop_factory()) as runner:
        runner.run(serve())
    Path(out_path).write_text(json.dumps(seen))
    return 0


class _PipeSide(asyncio.Protocol):
    """One side of the bare pipe: every byte read goes to the peer's transport (held until it connects)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer: _PipeSide | None = None
        self.held: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        peer = self.peer
        if peer is not None and peer.transport is not None:
            peer.transport.write(data)
        else:
            self.held.append(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.close()


def pipe_child(runtime_url: str) -> int:
    """The floor any relay pays on this host: a byte pipe (uvloop protocols, one runtime connection per client
    connection, no parsing, no clock, no observation) until SIGTERM."""
    from urllib.parse import urlsplit

    from satbench.core.loops import fast_loop_factory

    target = urlsplit(runtime_url)

    async def serve() -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        tasks: set[asyncio.Task[None]] = set()

        async def attach(client: _PipeSide) -> None:
            try:
                _, upstream = await loop.create_connection(_PipeSide, target.hostname or "127.0.0.1",
                                                           target.port or 80)
            except OSError:
                if client.transport is not None:
                    client.transport.close()  # the client sees the runtime's absence, not a hang
                return
            upstream.peer, client.peer = client, upstream
            assert upstream.transport is not None
            for data in client.held:
                upstream.transport.write(data)
            client.held.clear()

        def accept() -> _PipeSide:
            client = _PipeSide()
            task = loop.create_task(attach(client))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            return client

        server = await loop.create_server(accept, "127.0.0.1", 0, backlog=1024)
        print(f"ready http://127.0.0.1:{server.sockets[0].getsockname()[1]}", flush=True)
        await stop.wait()
        server.close()

    with asyncio.Runner(loop_factory=fast_loop_factory()) as runner:
        runner.run(serve())
    return 0


@dataclass
class Sent:
    request_id: str
    via: str
    send_ns: int
    first_ns: int | None
    last_ns: int | None
    end_ns: int
    tokens: int
    ok: bool


async def phase(client: LaneClient, via: str, args: argparse.Namespace, tag: str,
                out: list[Sent]) -> None:
    """Closed-loop users for ``phase_s``, starts staggered over one request's length (no opening burst), or
    over the phase when that is shorter, so every user runs before the phase ends."""
    deadline = time.perf_counter() + args.phase_s
    body = json.dumps({"prompt": "hello there", "n_predict": args.tokens, "stream": True,
                       "ignore_eos": True}).encode()
    stagger = min((args.ttft_ms + args.tokens * args.itl_ms) / 1e3, args.phase_s) / args.users

    async def user(u: int) -> None:
        await asyncio.sleep(u * stagger)
        i = 0
        while time.perf_counter() < deadline:
            rid = f"{tag}-u{u}-r{i}"
            i += 1
            raw = await client.send(body, rid)
            out.append(Sent(rid, via, raw.send_ns, raw.token_ns[0] if raw.token_ns else None,
                            raw.token_ns[-1] if raw.token_ns else None, raw.end_ns, len(raw.token_ns),
                            raw.outcome == "ok"))

    await asyncio.gather(*(user(u) for u in range(args.users)))


@dataclass
class Cost:
    """CPU (user + system) of a forwarding process over its phases, and the tokens it forwarded."""

    cpu_s: float = 0.0
    tokens: int = 0

    @property
    def us_per_token(self) -> float:
        return self.cpu_s / max(self.tokens, 1) * 1e6


async def drive(urls: dict[str, str], args: argparse.Namespace, procs: dict[str, psutil.Process],
                ) -> tuple[list[Sent], dict[str, Cost], list[tuple[int, int, int, float]]]:
    """Phases in turn (direct, relayed, piped) for ``rounds`` rounds; then the relay's CPU-fit phases."""
    config = LoadgenConfig(lanes=[LaneConfig(name=via, url=url) for via, url in urls.items()])
    clients = {lane.name: LaneClient(lane, config) for lane in config.lanes}
    for c in clients.values():
        await c.open(args.users)
        await c.preopen(args.users)
    out: list[Sent] = []
    costs = {via: Cost() for via in procs}
    try:
        for rnd in range(args.rounds):
            for via, client in clients.items():
                proc = procs.get(via)
                before = sum(proc.cpu_times()[:2]) if proc is not None else 0.0
                n0 = len(out)
                await phase(client, via, args, f"{via[0]}{rnd}", out)
                if proc is not None:
                    costs[via].cpu_s += sum(proc.cpu_times()[:2]) - before
                    costs[via].tokens += sum(s.tokens for s in out[n0:])
        fit = await cpu_fit(clients["relayed"], args, procs["relayed"])
    finally:
        for c in clients.values():
            await c.close()
    return out, costs, fit


async def cpu_fit(client: LaneClient, args: argparse.Namespace,
                  relay_proc: psutil.Process) -> list[tuple[int, int, int, float]]:
    """Relayed-only phases at short and long answers: (tokens/request, requests, tokens, relay CPU s)."""
    rows = []
    for tokens in (args.fit_tokens[0], args.fit_tokens[1]):
        fit_args = argparse.Namespace(**{**vars(args), "tokens": tokens, "phase_s": args.fit_s})
        out: list[Sent] = []
        before = sum(relay_proc.cpu_times()[:2])
        await phase(client, "relayed", fit_args, f"fit{tokens}", out)
        rows.append((tokens, len(out), sum(s.tokens for s in out), sum(relay_proc.cpu_times()[:2]) - before))
    return rows


def report_fit(rows: list[tuple[int, int, int, float]]) -> None:
    """CPU = a x requests + b x tokens, solved from the two phases: b is the marginal cost of a token."""
    (_, r1, t1, c1), (_, r2, t2, c2) = rows
    for tokens, requests, n, cpu in rows:
        print(f"relay CPU, {tokens} tokens/request: {cpu:.2f} s / {n} tokens ({requests} requests) = "
              f"{cpu / max(n, 1) * 1e6:.1f} us/token all-in")
    det = r1 * t2 - r2 * t1
    if det:
        per_request = (c1 * t2 - c2 * t1) / det
        per_token = (r1 * c2 - r2 * c1) / det
        print(f"relay CPU fit: {per_request * 1e6:.0f} us per request + {per_token * 1e6:.1f} us per token "
              f"(marginal) -> goal < 20 us/token: {'MET' if per_token * 1e6 < 20 else 'NOT MET'}")


VIAS = ("direct", "relayed", "piped")


def report(sent: list[Sent], truth: dict[str, dict[str, Any]], relay_seen: list[dict[str, Any]],
           wall0: float, mono0: int, costs: dict[str, Cost], users: int) -> None:
    def wall(ns: int) -> float:
        return wall0 + (ns - mono0) / 1e9

    ok = [s for s in sent if s.ok and s.first_ns is not None and s.request_id in truth]
    over: dict[str, list[float]] = {via: [] for via in VIAS}
    over_last: dict[str, list[float]] = {via: [] for via in VIAS}
    ttft: dict[str, list[float]] = {via: [] for via in VIAS}
    inbound: dict[str, list[float]] = {via: [] for via in VIAS}
    for s in ok:
        truth_row = truth[s.request_id]
        assert s.first_ns is not None and s.last_ns is not None
        way_in = truth_row["arrival"] - wall(s.send_ns)
        over[s.via].append(way_in + wall(s.first_ns) - truth_row["first_token"])
        over_last[s.via].append(way_in + wall(s.last_ns) - truth_row["last_token"])
        ttft[s.via].append((s.first_ns - s.send_ns) / 1e9)
        inbound[s.via].append(way_in)
    print(f"requests ok: {', '.join(f'{via} {len(over[via])}' for via in VIAS)} "
          f"(failed: {sum(not s.ok for s in sent)}), {users} concurrent streams")
    print(f"{'figure (ms)':52s} {'p50':>8s} {'p95':>8s} {'p99':>8s}")
    for label, table in (("TTFT", ttft), ("inbound (client send to server arrival)", inbound),
                         ("transport overhead, first token", over),
                         ("transport overhead, last token", over_last)):
        for via in VIAS:
            qs = [quantile(table[via], q) * 1e3 for q in (0.5, 0.95, 0.99)]
            print(f"{label + ' ' + via:52s} {qs[0]:8.3f} {qs[1]:8.3f} {qs[2]:8.3f}")
    qs3 = (0.5, 0.95, 0.99)

    def added(table: dict[str, list[float]], via: str, base: str) -> list[float]:
        return [(quantile(table[via], q) - quantile(table[base], q)) * 1e3 for q in qs3]

    rows = {
        "ADDED per request (first token), relayed-direct": added(over, "relayed", "direct"),
        "ADDED per request (first token), piped-direct": added(over, "piped", "direct"),
        "ADDED per request (first token), relayed-piped": added(over, "relayed", "piped"),
        "ADDED per token (last token), relayed-direct": added(over_last, "relayed", "direct"),
        "ADDED per token (last token), piped-direct": added(over_last, "piped", "direct"),
    }
    for label, figs in rows.items():
        print(f"{label:52s} {figs[0]:8.3f} {figs[1]:8.3f} {figs[2]:8.3f}")
    report_cpu(costs)
    p99 = rows["ADDED per request (first token), relayed-direct"][2]
    floor_p99 = rows["ADDED per request (first token), piped-direct"][2]
    print(f"goal: added p99 < 0.5 ms: {'MET' if p99 < 0.5 else 'NOT MET'} ({p99:.3f} ms; bare pipe "
          f"{floor_p99:.3f}); CPU < 20 us/token: {'MET' if costs['relayed'].us_per_token < 20 else 'NOT MET'} "
          f"({costs['relayed'].us_per_token:.1f} us; bare pipe {costs['piped'].us_per_token:.1f})")
    report_agreement(ok, relay_seen)


def report_cpu(costs: dict[str, Cost]) -> None:
    relay, pipe = costs["relayed"], costs["piped"]
    print(f"relay CPU: {relay.cpu_s:.2f} s for {relay.tokens} tokens = {relay.us_per_token:.1f} us/token; "
          f"bare pipe (the floor of any relay here): {pipe.cpu_s:.2f} s for {pipe.tokens} tokens = "
          f"{pipe.us_per_token:.1f} us/token; relay over the pipe: "
          f"{relay.us_per_token - pipe.us_per_token:+.1f} us/token")


def report_agreement(ok: list[Sent], relay_seen: list[dict[str, Any]]) -> None:
    by_id = {row["id"]: row for row in relay_seen}
    gaps_ttft, gaps_e2e = [], []
    for s in ok:
        row = by_id.get(s.request_id)
        if s.via == "relayed" and row is not None and row["ttft"] is not None and s.first_ns is not None:
            gaps_ttft.append(((s.first_ns - s.send_ns) / 1e9 - row["ttft"]) * 1e3)
            gaps_e2e.append(((s.end_ns - s.send_ns) / 1e9 - row["e2e"]) * 1e3)
    for name, gaps in (("TTFT", gaps_ttft), ("e2e", gaps_e2e)):
        qs = [quantile(gaps, q) for q in (0.5, 0.95, 0.99)]
        print(f"agreement client-relay {name} (ms, {len(gaps)} joined): p50 {qs[0]:.3f} p95 {qs[1]:.3f} "
              f"p99 {qs[2]:.3f} -> {'MET' if qs[1] < 1.0 else 'NOT MET'} (< 1 ms at p95)")


def report_client_side(sent: list[Sent], relay_seen: list[dict[str, Any]], costs: dict[str, Cost],
                       users: int) -> None:
    """A real runtime (``--target``) has no truth: the client's own TTFT and e2e per path, and their
    differences (the runtime's own jitter included, so read the p50 row first)."""
    ok = [s for s in sent if s.ok and s.first_ns is not None]
    ttft = {via: [(s.first_ns - s.send_ns) / 1e9 for s in ok if s.via == via and s.first_ns is not None]
            for via in VIAS}
    e2e = {via: [(s.end_ns - s.send_ns) / 1e9 for s in ok if s.via == via] for via in VIAS}
    print(f"requests ok: {', '.join(f'{via} {len(ttft[via])}' for via in VIAS)} "
          f"(failed: {sum(not s.ok for s in sent)}), {users} concurrent users")
    print(f"{'figure (ms)':52s} {'p50':>8s} {'p95':>8s} {'p99':>8s}")
    qs3 = (0.5, 0.95, 0.99)
    for label, table in (("TTFT", ttft), ("e2e", e2e)):
        for via in VIAS:
            qs = [quantile(table[via], q) * 1e3 for q in qs3]
            print(f"{label + ' ' + via:52s} {qs[0]:8.3f} {qs[1]:8.3f} {qs[2]:8.3f}")
        for via in ("relayed", "piped"):
            figs = [(quantile(table[via], q) - quantile(table["direct"], q)) * 1e3 for q in qs3]
            print(f"{'ADDED ' + label + ', ' + via + '-direct':52s} {figs[0]:8.3f} {figs[1]:8.3f} {figs[2]:8.3f}")
    report_cpu(costs)
    report_agreement(ok, relay_seen)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=64, help="output tokens per request (default 64)")
    parser.add_argument("--itl-ms", type=float, default=50.0, help="server inter-token gap (default 50)")
    parser.add_argument("--ttft-ms", type=float, default=20.0, help="server time to first token (default 20)")
    parser.add_argument("--phase-s", type=float, default=10.0, help="length of each phase (default 10)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of direct, relayed and piped phases (default 2)")
    parser.add_argument("--fit-tokens", type=int, nargs=2, default=[16, 256],
                        help="answer lengths of the two CPU-fit phases (default 16 256)")
    parser.add_argument("--fit-s", type=float, default=6.0, help="length of each CPU-fit phase (default 6)")
    parser.add_argument("--quick", action="store_true", help="one round of 5 s phases, 3 s fit phases")
    parser.add_argument("--lockstep", action="store_true",
                        help="the server gives every stream its token on one shared grid (a batched decode "
                             "step, as llama-server does) instead of each stream on its own clock")
    parser.add_argument("--target", metavar="URL",
                        help="relay to this running runtime (e.g. a llama-server node) instead of the paced stream "
                             "server: no truth there, so the figures are the client's TTFT and e2e per path")
    parser.add_argument("--relay-child", nargs=2, metavar=("RUNTIME_URL", "OUT"), help=argparse.SUPPRESS)
    parser.add_argument("--pipe-child", metavar="RUNTIME_URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.relay_child:
        return relay_child(*args.relay_child)
    if args.pipe_child:
        return pipe_child(args.pipe_child)
    if args.quick:
        args.rounds, args.phase_s, args.fit_s = 1, 5.0, 3.0
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    server_args = ["testkit.stream_server", "--ttft-ms", str(args.ttft_ms), "--itl-ms", str(args.itl_ms),
                   *(["--lockstep"] if args.lockstep else [])]
    out_path = Path(f"/tmp/relay-overhead-{os.getpid()}.json")
    me = str(Path(__file__).resolve())
    with contextlib.ExitStack() as stack:
        server_url = args.target.rstrip("/") if args.target else stack.enter_context(serving(*server_args))
        relay_argv = [sys.executable, me, "--relay-child", server_url, str(out_path)]
        with child(relay_argv, "ready") as (relay, relay_url), \
                child([sys.executable, me, "--pipe-child", server_url], "ready") as (pipe, pipe_url):
            wall0, mono0 = time.time(), time.perf_counter_ns()
            urls = {"direct": server_url, "relayed": relay_url, "piped": pipe_url}
            procs = {"relayed": psutil.Process(relay.pid), "piped": psutil.Process(pipe.pid)}
            with asyncio.Runner(loop_factory=_loop_factory()) as runner:
                sent, costs, fit = runner.run(drive(urls, args, procs))
            truth = None if args.target else truth_by_id(server_url)
        relay_seen = json.loads(out_path.read_text()) if out_path.exists() else []
        out_path.unlink(missing_ok=True)
    if truth is None:  # a real runtime keeps no truth: the client's own view per path
        report_client_side(sent, relay_seen, costs, args.users)
    else:
        report(sent, truth, relay_seen, wall0, mono0, costs, args.users)
    report_fit(fit)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


def _loop_factory() -> Any:
    from satbench.core.loops import fast_loop_factory

    return fast_loop_factory()


if __name__ == "__main__":
    raise SystemExit(main())
