"""One lane's open-loop sends spread over worker processes, on this host or others: one schedule, one clock.

Why: one process's event loop is the client's ceiling (a few thousand requests/s here, each with its stream
to read); a rack-scale node or a router in front of many servers needs more than one process, or one host,
to drive it. The schedule stays one: the rung (``loadgen.open_step``) draws every intended time and every
request body itself, and hands each to a worker round-robin (index modulo the workers), a lead time ahead;
the worker releases it at its time with its own kernel-timed pacer (``loadgen.pacer``), reads the stream
with its own kernel-stamped client, and reports three things back: the send, the first token (so the rung's
looks see a request waiting or not), and the end, with every time on its own clock. The rung keeps
everything else (the window, the looks, the records, the verdict), so the answer is the one-process answer
wherever one process could keep up.

One clock: every worker's clock offset against this process's is measured (``sync``): 16 exchanges of a
timestamp, each giving ``offset = worker - (sent + received) / 2``, the one of least round trip kept, good to
half its round trip (Cristian 1989; NTP's own filter keeps the least-delay sample). Orders go out in the
worker's clock (intended + offset) and every time it reports comes back less its offset, so merged records
are on one clock; each worker's offset and its bound are stated in the rung's notes. On one host the
offset is zero within a few microseconds (``CLOCK_MONOTONIC`` is the host's); tests give workers simulated
clocks 50 ms apart (``clock_offsets_ms``) and check that no request lands before its intended time.

The wire: a TCP connection per worker to this process (loopback unless ``bind`` says otherwise), each frame
a header of two lengths, a JSON object and a payload (a request's body); a worker proves itself with a token
given at its start, and gets its lane's settings (the API key included) over the connection, never in its
command line. A worker lost mid-rung costs the requests it held (each recorded ``dropped``), never the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from satbench.core.sse import StreamSummary
from satbench.loadgen.client import RawResult
from satbench.loadgen.config import LaneConfig, LoadgenConfig

__all__ = ["RemoteStream", "SenderWorker", "Senders", "SendersUnavailable", "read_frame", "write_frame"]

_HEAD = struct.Struct("!II")
_MAX_FRAME = 64 << 20
SYNC_ROUNDS = 16
START_TIMEOUT_S = 60.0


class SendersUnavailable(RuntimeError):
    """The worker processes could not be started or reached; the rung runs in this process instead."""


def frame(msg: dict[str, Any], payload: bytes = b"") -> bytes:
    head = json.dumps(msg, separators=(",", ":")).encode()
    return _HEAD.pack(len(head), len(payload)) + head + payload


def write_frame(writer: asyncio.StreamWriter, msg: dict[str, Any], payload: bytes = b"") -> None:
    writer.write(frame(msg, payload))


async def read_frame(reader: asyncio.StreamReader) -> tuple[dict[str, Any], bytes]:
    """The next frame; ``asyncio.IncompleteReadError`` at the end of the connection, ``ValueError`` on a bad one."""
    head_len, payload_len = _HEAD.unpack(await reader.readexactly(_HEAD.size))
    if head_len > _MAX_FRAME or payload_len > _MAX_FRAME:
        raise ValueError(f"frame of {head_len} + {payload_len} bytes")
    msg = json.loads(await reader.readexactly(head_len))
    payload = await reader.readexactly(payload_len) if payload_len else b""
    if not isinstance(msg, dict) or not isinstance(msg.get("op"), str):
        raise ValueError("frame without an op")
    return msg, payload


class RemoteStream:
    """What the rung knows of a stream a worker reads: its token times (the first as it comes, all at the end)
    and what the record needs of the parser (``loadgen.request_record``)."""

    __slots__ = ("counts", "first_visible_ns", "reasoning_events", "token_ns")

    def __init__(self) -> None:
        self.token_ns: list[int] = []
        self.counts: tuple[int, ...] | None = None
        self.reasoning_events = 0
        self.first_visible_ns: int | None = None

    def token_counts(self) -> tuple[int, ...] | None:
        return self.counts


@dataclass
class _Order:
    worker: int
    intended_ns: int
    sent: Callable[[int, RemoteStream], None]
    done: Callable[[RawResult, RemoteStream], None]
    stream: RemoteStream
    was_sent: bool = False
    sent_ns: int = 0  # its send, on this clock, once the worker said


@dataclass
class SenderWorker:
    """One worker as this process sees it."""

    index: int
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    pid: int | None
    host: str
    proc: subprocess.Popen[bytes] | None = None
    offset_ns: int = 0  # worker clock - this clock
    offset_bound_ns: int | None = None  # half the round trip of the sample kept
    alive: bool = True
    orders: set[int] = field(default_factory=set)
    task: asyncio.Task[None] | None = None

    def describe(self) -> str:
        bound = "" if self.offset_bound_ns is None else f" +- {self.offset_bound_ns / 1e6:.3f}"
        return f"sender {self.index} ({self.host}, pid {self.pid}): clock offset {self.offset_ns / 1e6:.3f}{bound} ms"


class Senders:
    """Worker processes sending one lane's open-loop requests (``start``, then ``dispatch`` per request)."""

    # simulated host clocks, per worker, for the tests of the offset correction (ms added to a worker's clock)
    clock_offsets_ms: tuple[float, ...] = ()

    def __init__(self, config: LoadgenConfig, lane: LaneConfig, workers: list[SenderWorker],
                 server: asyncio.Server | None) -> None:
        self.config, self.lane = config, lane
        self.workers = workers
        self._server = server
        self._orders: dict[int, _Order] = {}
        self.lead_ns = int(0.02 * 1e9)  # an order leaves this far ahead of its time
        self._next = 0
        self._seq = 0  # order ids, unique for the lane's walk
        self.lost: list[str] = []
        self._pongs: dict[int, asyncio.Future[tuple[int, int]]] = {}
        self._closing = False

    # -- start and stop ------------------------------------------------------------------------------------

    @classmethod
    async def start(cls, config: LoadgenConfig, lane: LaneConfig, n: int, *, bind: str = "127.0.0.1",
                    log_dir: Path | None = None) -> Senders:
        """Starts ``n`` worker processes on this host and waits until each has connected, has its lane's
        settings and its clock offset measured; ``SendersUnavailable`` when they cannot be had in time."""
        token = secrets.token_hex(16)
        arrived: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter, dict[str, Any]]] = asyncio.Queue()

        async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                async with asyncio.timeout(10.0):
                    hello, _ = await read_frame(reader)
            except (asyncio.IncompleteReadError, ValueError, TimeoutError, OSError):
                writer.close()
                return
            if hello.get("op") != "hello" or not secrets.compare_digest(str(hello.get("token", "")), token):
                writer.close()
                return
            await arrived.put((reader, writer, hello))

        server = await asyncio.start_server(accept, bind, 0)
        port = server.sockets[0].getsockname()[1]
        procs = []
        env = {**os.environ, "SATBENCH_SENDER_TOKEN": token}
        offsets = cls.clock_offsets_ms
        try:
            for i in range(n):
                argv = [sys.executable, "-m", "satbench.loadgen.sender", "--connect", f"{bind}:{port}",
                        "--index", str(i)]
                if i < len(offsets) and offsets[i]:
                    argv += ["--clock-offset-ms", repr(offsets[i])]
                with contextlib.ExitStack() as stack:
                    log: Any = subprocess.DEVNULL if log_dir is None else stack.enter_context(
                        open(log_dir / f"sender-{lane.key.replace('/', '_')}-{i}.log", "ab"))
                    procs.append(subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                                  stderr=subprocess.STDOUT))
            joined: dict[int, SenderWorker] = {}
            async with asyncio.timeout(START_TIMEOUT_S):
                while len(joined) < n:
                    reader, writer, hello = await arrived.get()
                    index = hello.get("index")
                    if not isinstance(index, int) or not 0 <= index < n or index in joined:
                        writer.close()  # not one of the workers started here
                        continue
                    joined[index] = SenderWorker(index, reader, writer, hello.get("pid"),
                                                 str(hello.get("host", "?")), procs[index])
            workers = [joined[i] for i in range(n)]
        except BaseException as exc:  # none left running, whatever stopped the start (a cancellation too)
            server.close()
            for proc in procs:
                with contextlib.suppress(OSError):
                    proc.kill()
                with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                    proc.wait(2.0)
            if isinstance(exc, TimeoutError | OSError):
                raise SendersUnavailable(f"{n} sender processes did not connect: {exc!r}") from exc
            raise
        self = cls(config, lane, workers, server)
        lane_data = json.loads(config.model_dump_json())
        for w in workers:
            write_frame(w.writer, {"op": "config", "config": lane_data, "lane": lane.key})
            w.task = asyncio.create_task(self._listen(w), name=f"sender-{w.index}")
        try:
            await self.sync()
        except BaseException:
            await self.close()
            raise
        return self

    async def close(self) -> None:
        self._closing = True
        for w in self.workers:
            self._tell(w, {"op": "stop"})
        for w in self.workers:
            if w.proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    await asyncio.to_thread(w.proc.wait, 5.0)
                if w.proc.poll() is None:
                    w.proc.kill()
                    await asyncio.to_thread(w.proc.wait, 5.0)
            if w.task is not None:
                w.task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await w.task
            w.writer.close()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    # -- clocks ---------------------------------------------------------------------------------------------

    async def sync(self) -> None:
        """Measures each worker's clock offset (module docstring), through the listeners."""
        loop = asyncio.get_running_loop()
        for w in self.workers:
            if not w.alive:
                continue
            best: tuple[int, int] | None = None
            for _ in range(SYNC_ROUNDS):
                t0 = time.perf_counter_ns()
                answer: asyncio.Future[tuple[int, int]] = loop.create_future()
                self._pongs[t0] = answer
                if not self._tell(w, {"op": "ping", "t": t0}):
                    self._pongs.pop(t0, None)
                    break
                try:
                    async with asyncio.timeout(5.0):
                        worker_ns, t1 = await answer
                except TimeoutError:
                    continue
                finally:
                    self._pongs.pop(t0, None)
                rtt = t1 - t0
                offset = worker_ns - (t0 + t1) // 2
                if best is None or rtt < best[0]:
                    best = (rtt, offset)
            if best is None:
                if w.alive and w.offset_bound_ns is None:  # never measured: its times could not be mapped
                    raise SendersUnavailable(f"sender {w.index} did not answer its clock exchanges")
                continue  # lost, or keeps the offset it had
            w.offset_bound_ns, w.offset_ns = best[0] // 2, best[1]

    async def sync_between_rungs(self) -> None:
        """The offsets measured again before a rung (clocks of different hosts drift apart); a worker that
        does not answer keeps its last offset."""
        with contextlib.suppress(SendersUnavailable):
            await self.sync()

    def describe(self) -> list[str]:
        return [w.describe() + ("" if w.alive else ", lost") for w in self.workers]

    # -- orders ---------------------------------------------------------------------------------------------

    def unsent_since(self) -> list[int]:
        """The intended times of the orders given and not yet known sent (this clock): a worker may have sent
        one whose ``sent`` is still on its way."""
        return [o.intended_ns for o in self._orders.values() if not o.was_sent]

    @property
    def outstanding(self) -> int:
        """Orders given and not yet sent by their worker."""
        return sum(1 for o in self._orders.values() if not o.was_sent)

    def dispatch(self, index: int, intended_ns: int, request_id: str, body: bytes, *,
                 sent: Callable[[int, RemoteStream], None],
                 done: Callable[[RawResult, RemoteStream], None]) -> int | None:
        """Hands request ``index`` (the rung's) to the next live worker (round-robin), to be sent at
        ``intended_ns`` (this process's ``perf_counter_ns``); returns the worker's index, or ``None`` when none
        is left. ``sent`` (with the stream the rung watches: its first token
        set as it comes) and ``done`` are called on this process's clock. An order is known to the
        workers by an id of its own, unique for the lane's whole walk (a rung's indices start again at 0)."""
        while True:
            live = [w for w in self.workers if w.alive]
            if not live:
                return None
            w = live[self._next % len(live)]
            self._next += 1
            oid = self._seq
            self._seq += 1
            self._orders[oid] = _Order(w.index, intended_ns, sent, done, RemoteStream())
            w.orders.add(oid)
            if self._tell(w, {"op": "send", "i": oid, "at": intended_ns + w.offset_ns, "rid": request_id}, body):
                return w.index

    def _tell(self, w: SenderWorker, msg: dict[str, Any], payload: bytes = b"") -> bool:
        """Writes to a worker; a worker whose connection is gone is lost (``_lose``), never the rung."""
        if not w.alive:
            return False
        try:
            if w.writer.is_closing():
                raise ConnectionResetError("the connection is closing")
            write_frame(w.writer, msg, payload)
        except (OSError, RuntimeError) as exc:
            self._lose(w, exc)
            return False
        return True

    async def drain(self, timeout_s: float) -> None:
        """Ends every order: a worker drops what it has not sent (``unsent``) and ends what it had in flight
        (``done``, dropped); this waits until each order is ended, up to ``timeout_s``. An order still open
        then is recorded dropped where it was sent, or where its time had passed (its worker may have sent
        it and not said so); one not yet due was never sent."""
        for w in self.workers:
            self._tell(w, {"op": "drain"})
        deadline = time.monotonic() + timeout_s
        while self._orders and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        now = time.perf_counter_ns()
        for oid, order in list(self._orders.items()):
            del self._orders[oid]
            if order.was_sent or order.intended_ns <= now:
                send = order.sent_ns if order.was_sent else order.intended_ns
                error = "cancelled at drain" if order.was_sent else "cancelled at drain (its sender did not report)"
                order.done(RawResult(send, max(send, now), order.stream.token_ns, "dropped", error=error),
                           order.stream)
        for w in self.workers:
            w.orders.clear()

    async def _listen(self, w: SenderWorker) -> None:
        try:
            while True:
                msg, _ = await read_frame(w.reader)
                op = msg["op"]
                offset = w.offset_ns
                if op == "pong":
                    answer = self._pongs.get(msg.get("t", -1))
                    if answer is not None and not answer.done():
                        answer.set_result((int(msg["w"]), time.perf_counter_ns()))
                    continue
                oid = msg.get("i", -1)
                order = self._orders.get(oid)
                if order is None or order.worker != w.index:
                    continue  # ended here already (a drain's deadline, a loss)
                if op == "sent":
                    order.was_sent = True
                    order.sent_ns = int(msg["t"]) - offset
                    order.sent(order.sent_ns, order.stream)
                elif op == "first":
                    order.stream.token_ns = [int(msg["t"]) - offset]
                elif op in ("done", "unsent"):
                    del self._orders[oid]
                    w.orders.discard(oid)
                    if op == "done" and order.was_sent:  # "sent" always comes first on the connection
                        result, stream = _result(msg, offset, order.stream)
                        order.done(result, stream)
        except (asyncio.IncompleteReadError, ValueError, OSError, KeyError, TypeError) as exc:
            self._lose(w, exc)

    def _lose(self, w: SenderWorker, exc: BaseException) -> None:
        """A worker gone: what it held ends here, sent ones as dropped records (at their send)."""
        if not w.alive:
            return
        w.alive = False
        if not self._closing:
            self.lost.append(f"sender {w.index} lost: {type(exc).__name__}")
        now = time.perf_counter_ns()
        for oid in sorted(w.orders):
            order = self._orders.get(oid)
            if order is None or order.worker != w.index:
                continue
            del self._orders[oid]
            if order.was_sent:
                order.done(RawResult(order.sent_ns, max(order.sent_ns, now), order.stream.token_ns, "dropped",
                                     error=f"sender process {w.index} lost"), order.stream)
        w.orders.clear()


def _result(msg: dict[str, Any], offset: int, stream: RemoteStream) -> tuple[RawResult, RemoteStream]:
    """A worker's ``done`` report as a result on this process's clock."""
    tokens = [int(t) - offset for t in msg.get("tok", [])]
    stream.token_ns = tokens
    stream.counts = tuple(msg["counts"]) if msg.get("counts") else None
    stream.reasoning_events = int(msg.get("reasoning", 0))
    visible = msg.get("visible")
    stream.first_visible_ns = None if visible is None else int(visible) - offset
    summary = StreamSummary(**msg["summary"]) if msg.get("summary") else None
    return RawResult(int(msg["send"]) - offset, int(msg["end"]) - offset, tokens, msg["outcome"], msg.get("status"),
                     msg.get("error"), bool(msg.get("retried")), summary, dict(msg.get("extra") or {})), stream
