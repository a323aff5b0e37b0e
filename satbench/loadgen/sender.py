"""A sender worker: sends the open-loop requests a rung hands it, each at its time, and reports back.

Started by ``loadgen.senders.Senders`` (or on another host, by hand or by a Kubernetes Job):

    SATBENCH_SENDER_TOKEN=... python -m satbench.loadgen.sender --connect HOST:PORT

It connects to the rung's process, proves itself with the token, receives its lane's settings, answers the
clock exchanges, and then for each order (request index, intended time on this worker's clock, request id,
body) prepares the request on a kept-alive connection and releases it at its time with the kernel-timed
pacer (``loadgen.pacer``), reading the stream with the kernel-stamped client (``loadgen.client``). It reports
``sent`` (the send time), ``first`` (the first token's arrival) and ``done`` (the whole result), every time on
its own clock (``--clock-offset-ms`` shifts that clock, to test the offset correction as if on another host).
A ``drain`` drops the orders not yet sent (``unsent``) and cancels those in flight (``done``, dropped); a
``stop`` or a lost connection ends the worker.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import functools
import os
import socket
import sys
import time
from collections.abc import Callable

from satbench.core.loops import fast_loop_factory
from satbench.core.sse import StreamParser
from satbench.loadgen.client import Begun, LaneClient, RawResult
from satbench.loadgen.config import LoadgenConfig
from satbench.loadgen.pacer import SPIN_S, Pacer
from satbench.loadgen.senders import read_frame, write_frame

__all__ = ["main"]


class _WatchedParser(StreamParser):
    """A stream parser that says when its first token came."""

    __slots__ = ("on_first",)
    on_first: Callable[[int], None]

    def feed(self, chunk: bytes, t_ns: int) -> bool:
        had = bool(self.token_ns)
        more = super().feed(chunk, t_ns)
        if not had and self.token_ns:
            self.on_first(self.token_ns[0])
        return more


class Worker:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, offset_ns: int) -> None:
        self.reader, self.writer, self.offset_ns = reader, writer, offset_ns
        self.client: LaneClient | None = None
        self.pacer: Pacer | None = None
        self.tasks: dict[int, asyncio.Task[None]] = {}
        self.queued: dict[int, Begun | None] = {}
        self.draining = False
        self.config: LoadgenConfig | None = None

    def now(self) -> int:
        return time.perf_counter_ns() + self.offset_ns

    def tell(self, msg: dict[str, object]) -> None:
        with contextlib.suppress(OSError, RuntimeError):
            write_frame(self.writer, msg)

    async def run(self) -> None:
        try:
            while True:
                msg, payload = await read_frame(self.reader)
                op = msg["op"]
                if op == "ping":
                    self.tell({"op": "pong", "t": msg["t"], "w": self.now()})
                elif op == "config":
                    await self._configure(msg)
                elif op == "send":
                    self._order(int(msg["i"]), int(msg["at"]) - self.offset_ns, str(msg["rid"]), payload)
                elif op == "drain":
                    await self._drain()
                elif op == "stop":
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            await self._drain()
            if self.pacer is not None:
                self.pacer.close()
            if self.client is not None:
                await self.client.close()

    async def _configure(self, msg: dict[str, object]) -> None:
        config = self.config = LoadgenConfig.model_validate(msg["config"])
        lane = next(lane for lane in config.lanes if lane.key == msg["lane"])
        self.client = LaneClient(lane, config)
        await self.client.open(64)
        await self.client.preopen(16)
        self.pacer = Pacer(spin_s=config.arrival.spin_s)
        self.client.release_points(self.pacer.poll)

    def _order(self, index: int, at_ns: int, rid: str, body: bytes) -> None:
        client, pacer, config = self.client, self.pacer, self.config
        assert client is not None and pacer is not None and config is not None
        self.draining = False
        parser = _WatchedParser(client.lane.api, config.max_event_bytes)
        parser.on_first = functools.partial(self._first, index)
        begun = client.prepare(body, rid, parser)
        self.queued[index] = begun
        pacer.put(at_ns, functools.partial(self._go, begun), functools.partial(self._sent, index, rid, body, parser),
                  functools.partial(self._unsent, index))

    def _go(self, begun: Begun | None) -> None:
        if begun is not None and not self.draining:
            begun.go()

    def _sent(self, index: int, rid: str, body: bytes, parser: StreamParser) -> None:
        begun = self.queued.pop(index, None)
        if begun is not None and not begun.sent:
            begun.abandon()
            begun = None
        if self.draining and begun is None:
            self.tell({"op": "unsent", "i": index})
            return
        send_ns = begun.send_ns if begun is not None else time.perf_counter_ns()
        self.tell({"op": "sent", "i": index, "t": send_ns + self.offset_ns})
        self.tasks[index] = asyncio.create_task(self._read(index, rid, body, parser, begun, send_ns))

    def _unsent(self, index: int) -> None:
        begun = self.queued.pop(index, None)
        if begun is not None:
            begun.abandon()
        self.tell({"op": "unsent", "i": index})

    def _first(self, index: int, t_ns: int) -> None:
        self.tell({"op": "first", "i": index, "t": t_ns + self.offset_ns})

    async def _read(self, index: int, rid: str, body: bytes, parser: StreamParser, begun: Begun | None,
                    send_ns: int) -> None:
        assert self.client is not None
        try:
            result = await self.client.send(body, rid, parser, begun)
        except asyncio.CancelledError:
            result = RawResult(send_ns, time.perf_counter_ns(), parser.token_ns, "dropped", error="cancelled at drain")
        except Exception as exc:  # a client bug on a hostile answer is a malformed record, never a lost request
            result = RawResult(send_ns, time.perf_counter_ns(), parser.token_ns, "malformed",
                               error=f"client failed on the answer: {exc!r}"[:200])
        finally:
            self.tasks.pop(index, None)
        off = self.offset_ns
        self.tell({"op": "done", "i": index, "send": result.send_ns + off, "end": result.end_ns + off,
                   "tok": [t + off for t in result.token_ns], "outcome": result.outcome, "status": result.status,
                   "error": result.error, "retried": result.retried,
                   "summary": None if result.summary is None else dataclasses.asdict(result.summary),
                   "extra": result.extra, "counts": parser.token_counts(), "reasoning": parser.reasoning_events,
                   "visible": None if parser.first_visible_ns is None else parser.first_visible_ns + off})

    async def _drain(self) -> None:
        """Drops what is queued, cancels what is in flight (each reported), then goes on taking orders."""
        self.draining = True
        if self.pacer is not None:
            spin = self.config.arrival.spin_s if self.config is not None else SPIN_S
            pacer, self.pacer = self.pacer, Pacer(spin_s=spin)
            pacer.close()  # each queued send: ``_unsent``
            if self.client is not None:
                self.client.release_points(self.pacer.poll)
        tasks = list(self.tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        with contextlib.suppress(OSError, RuntimeError, ConnectionError):
            await self.writer.drain()


async def serve(host: str, port: int, token: str, index: int, offset_ns: int) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    with contextlib.suppress(OSError):
        writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    write_frame(writer, {"op": "hello", "token": token, "index": index, "pid": os.getpid(),
                         "host": socket.gethostname()})
    try:
        await Worker(reader, writer, offset_ns).run()
    finally:
        writer.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m satbench.loadgen.sender", description=__doc__.split("\n\n")[0])
    parser.add_argument("--connect", required=True, help="HOST:PORT of the rung's process")
    parser.add_argument("--index", type=int, default=0)
    parser.add_argument("--clock-offset-ms", type=float, default=0.0,
                        help="shift this worker's clock (tests of the offset correction)")
    args = parser.parse_args(argv)
    token = os.environ.get("SATBENCH_SENDER_TOKEN")
    if not token:
        print("error: SATBENCH_SENDER_TOKEN is not set (the rung's process gives it)", file=sys.stderr)
        return 2
    host, _, port = args.connect.rpartition(":")
    if not host or not port.isdigit():
        print(f"error: --connect {args.connect!r} is not HOST:PORT", file=sys.stderr)
        return 2
    with asyncio.Runner(loop_factory=fast_loop_factory()) as runner:
        runner.run(serve(host, int(port), token, args.index, int(args.clock_offset_ms * 1e6)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
