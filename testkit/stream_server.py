"""A minimal llama-server-like stream server for wire tests and client benchmarks (not a simulator).

It answers ``/completion``, ``/v1/completions`` and ``/v1/chat/completions`` with streamed events shaped
like the recorded llama-server payloads (``timings``, ``usage``, ``[DONE]``), paced by a fixed TTFT and
inter-token gap (0 = everything in one write, so that the server is not the bottleneck of a client
benchmark). It records its own truth per ``X-Request-ID`` (arrival, first token, last token, in Unix
seconds from one monotonic-to-wall mapping) and serves it as ``GET /sim/truth`` in the simulator's shape
(``requests``: a list of ``{request_id, arrival, admitted, first_token, last_token, output_tokens}``).

With ``lockstep`` the inter-token gaps of all streams fall on one shared grid (multiples of ``itl_s``), as a
continuous batcher gives every busy slot its token in the same decode step; without it each stream keeps its
own clock (the worst case for a client or relay: one wake-up per token).

Faults for tests: every n-th request dropped mid-stream (``drop_every``), every n-th answered with a
non-JSON event (``malformed_every``), every n-th connection closed before any byte is answered
(``close_every``: what a client sees when real llama-server closed a kept-alive connection after a
stream), a ``: ping`` comment before each stream.

Run alone: ``python -m testkit.stream_server --port 8099 --itl-ms 10``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import time
from dataclasses import dataclass

from aiohttp import web

from satbench.core.loops import fast_loop_factory

__all__ = ["StreamServer", "StreamServerConfig", "main"]


@dataclass(frozen=True, slots=True)
class StreamServerConfig:
    ttft_s: float = 0.0
    itl_s: float = 0.0
    drop_every: int = 0
    malformed_every: int = 0
    close_every: int = 0
    ping: bool = True
    record_tokens: bool = False
    lockstep: bool = False


def _chat_event(text: str) -> bytes:
    return (b'data: {"choices":[{"finish_reason":null,"index":0,"delta":{"content":'
            + json.dumps(text).encode() + b'}}],"object":"chat.completion.chunk"}\n\n')


def _text_event(text: str) -> bytes:
    return b'data: {"choices":[{"text":' + json.dumps(text).encode() + \
        b',"index":0,"finish_reason":null}],"object":"text_completion"}\n\n'


def _llama_event(text: str, n: int) -> bytes:
    return (b'data: {"index":0,"content":' + json.dumps(text).encode() + b',"tokens":[1],"stop":false,'
            b'"id_slot":-1,"tokens_predicted":' + str(n).encode() + b'}\n\n')


class StreamServer:
    """The aiohttp application and its truth table; ``await start(port)`` / ``await stop()``."""

    def __init__(self, config: StreamServerConfig | None = None) -> None:
        self.config = config or StreamServerConfig()
        self.truth: dict[str, dict[str, float | int | None]] = {}
        self.token_times: dict[str, list[float]] = {}
        self.count = 0
        self._wall0, self._mono0 = time.time(), time.perf_counter_ns()
        self._runner: web.AppRunner | None = None
        self.port = 0
        app = web.Application(client_max_size=8 << 20)
        app.router.add_post("/completion", self._stream)
        app.router.add_post("/v1/completions", self._stream)
        app.router.add_post("/v1/chat/completions", self._stream)
        app.router.add_get("/health", self._health)
        app.router.add_get("/props", self._props)
        app.router.add_get("/sim/truth", self._truth)
        self.app = app

    def _gap(self) -> float:
        """Seconds to the next token: ``itl_s``, or to the next multiple of it on the shared grid."""
        cfg = self.config
        if not cfg.lockstep:
            return cfg.itl_s
        elapsed = (time.perf_counter_ns() - self._mono0) / 1e9
        return cfg.itl_s - elapsed % cfg.itl_s

    def _now(self) -> float:
        return self._wall0 + (time.perf_counter_ns() - self._mono0) / 1e9

    async def start(self, port: int = 0, host: str = "127.0.0.1") -> str:
        self._runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        self.port = int(sockets[0].getsockname()[1]) if sockets else port
        return f"http://{host}:{self.port}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _props(self, request: web.Request) -> web.Response:
        return web.json_response({"build_info": "stream-server", "total_slots": 0})

    async def _truth(self, request: web.Request) -> web.Response:
        rows = [{"request_id": rid, **row, **({"token_times": self.token_times[rid]}
                                              if rid in self.token_times else {})}
                for rid, row in self.truth.items()]
        return web.json_response({"simulated": False, "now": self._now(), "requests": rows})

    async def _stream(self, request: web.Request) -> web.StreamResponse:
        arrival = self._now()
        body = await request.json()
        rid = request.headers.get("X-Request-ID", f"anon-{self.count}")
        self.count += 1
        n_req = self.count
        cfg = self.config
        if cfg.close_every and n_req % cfg.close_every == 0 and request.transport is not None:
            request.transport.close()
            return web.Response(status=500)
        path = request.path
        n = int(body.get("n_predict") or body.get("max_tokens") or 16)
        prompt = body.get("prompt") or json.dumps(body.get("messages", ""))
        prompt_n = max(1, len(str(prompt).split()))
        row: dict[str, float | int | None] = {"arrival": arrival, "admitted": arrival, "first_token": None,
                                              "last_token": None, "output_tokens": 0}
        self.truth[rid] = row
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        if cfg.ping:
            await resp.write(b": ping\n\n")
        if cfg.ttft_s > 0:
            await asyncio.sleep(cfg.ttft_s)
        if cfg.malformed_every and n_req % cfg.malformed_every == 0:
            await resp.write(b"data: this is not json\n\n")
            await resp.write_eof()
            return resp
        drop_at = n // 2 if cfg.drop_every and n_req % cfg.drop_every == 0 else -1
        if path == "/completion":
            events = [_llama_event(" tok", i + 1) for i in range(n)]
        elif path == "/v1/completions":
            events = [_text_event(" tok") for _ in range(n)]
        else:
            events = [_chat_event(" tok") for _ in range(n)]
        prompt_ms = 1.0
        timings = {"cache_n": 0, "prompt_n": prompt_n, "prompt_ms": prompt_ms, "predicted_n": n,
                   "predicted_ms": n * cfg.itl_s * 1e3}
        if path == "/completion":
            tail = b"data: " + json.dumps({"index": 0, "content": "", "stop": True, "tokens_predicted": n,
                                           "timings": timings}, separators=(",", ":")).encode() + b"\n\n"
        else:
            usage = {"completion_tokens": n, "prompt_tokens": prompt_n, "total_tokens": n + prompt_n}
            final = {"choices": [], "usage": usage, "timings": timings}
            tail = b"data: " + json.dumps(final, separators=(",", ":")).encode() + b"\n\ndata: [DONE]\n\n"
        times: list[float] | None = [] if cfg.record_tokens else None
        if times is not None:
            self.token_times[rid] = times
        if cfg.itl_s <= 0:
            cut = drop_at if drop_at >= 0 else n
            row["first_token"] = self._now()
            await resp.write(b"".join(events[:cut]))
            row["last_token"] = self._now()
            row["output_tokens"] = cut
        else:
            for i, event in enumerate(events):
                if i == drop_at:
                    break
                if i:
                    await asyncio.sleep(self._gap())
                t = self._now()
                await resp.write(event)
                if times is not None:
                    times.append(t)
                if i == 0:
                    row["first_token"] = t
                row["last_token"] = t
                row["output_tokens"] = i + 1
        if drop_at >= 0:
            if request.transport is not None:
                request.transport.close()
            return resp
        await resp.write(tail)
        await resp.write_eof()
        return resp


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--ttft-ms", type=float, default=0.0)
    parser.add_argument("--itl-ms", type=float, default=0.0)
    parser.add_argument("--drop-every", type=int, default=0)
    parser.add_argument("--close-every", type=int, default=0)
    parser.add_argument("--record-tokens", action="store_true", help="keep every token's send time")
    parser.add_argument("--lockstep", action="store_true",
                        help="every stream's tokens on one shared grid of --itl-ms (a batched decode step)")
    args = parser.parse_args(argv)
    server = StreamServer(StreamServerConfig(ttft_s=args.ttft_ms / 1e3, itl_s=args.itl_ms / 1e3,
                                             drop_every=args.drop_every, close_every=args.close_every,
                                             record_tokens=args.record_tokens, lockstep=args.lockstep))

    async def serve() -> None:
        url = await server.start(args.port)
        print(f"ready {url}", flush=True)
        await asyncio.Event().wait()

    with contextlib.suppress(KeyboardInterrupt), asyncio.Runner(loop_factory=fast_loop_factory()) as runner:
        runner.run(serve())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
