"""LaneClient against tiny handlers on loopback: headers, outcomes, retries, bounds."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web

from satbench.loadgen.client import LaneClient, RawResult
from satbench.loadgen.config import LaneConfig, LoadgenConfig

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
TOKEN = b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n'
DONE = b'data: {"choices":[],"usage":{"completion_tokens":2,"prompt_tokens":5}}\n\ndata: [DONE]\n\n'


async def serve_and_send(handler: Handler, *, env_key: str | None = None, n: int = 1,
                         **cfg: Any) -> tuple[list[RawResult], list[web.Request]]:
    seen: list[web.Request] = []

    async def wrapped(request: web.Request) -> web.StreamResponse:
        seen.append(request)
        return await handler(request)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", wrapped)
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    lane = LaneConfig(name="x", url=f"http://127.0.0.1:{port}", api="openai-chat", api_key_env=env_key)
    client = LaneClient(lane, LoadgenConfig.model_validate({"lanes": [lane.model_dump()], **cfg}))
    await client.open(2)
    try:
        results = [await client.send(b'{"user":"u1"}', f"rid-{i}") for i in range(n)]
    finally:
        await client.close()
        await runner.cleanup()
    return results, seen


async def stream(request: web.Request, *parts: bytes, close: bool = False) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    for part in parts:
        await resp.write(part)
    if close and request.transport is not None:
        request.transport.close()
        return resp
    await resp.write_eof()
    return resp


def run(handler: Handler, **kw: Any) -> tuple[list[RawResult], list[web.Request]]:
    return asyncio.run(serve_and_send(handler, **kw))


def test_ok_stream_carries_request_id_and_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SATBENCH_TEST_KEY", "k-123")
    headers: list[dict[str, str]] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        headers.append(dict(request.headers))
        assert json.loads(await request.read()) == {"user": "u1"}
        return await stream(request, b": ping\n\n", TOKEN, TOKEN, DONE)

    (res,), _ = run(handler, env_key="SATBENCH_TEST_KEY")
    assert res.outcome == "ok" and len(res.token_ns) == 2 and res.summary is not None
    assert res.summary.output_tokens == 2 and res.summary.prompt_tokens == 5
    assert headers[0]["X-Request-ID"] == "rid-0" and headers[0]["Authorization"] == "Bearer k-123"
    assert res.send_ns < res.token_ns[0] <= res.token_ns[1] <= res.end_ns


@pytest.mark.parametrize(("status", "outcome"), [(500, "http_error"), (400, "http_error"), (503, "refused"),
                                                  (429, "refused")])
def test_http_status_outcomes(status: int, outcome: str) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        return web.json_response({"error": {"message": "nope"}}, status=status)

    (res,), _ = run(handler)
    assert res.outcome == outcome and res.status == status and res.error and "nope" in res.error


def test_stream_cut_mid_response_is_dropped_with_its_tokens() -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        return await stream(request, TOKEN, TOKEN, TOKEN, close=True)

    (res,), _ = run(handler)
    assert res.outcome == "dropped" and len(res.token_ns) == 3 and not res.retried


def test_stream_without_end_marker_is_dropped() -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        return await stream(request, TOKEN)

    (res,), _ = run(handler)
    assert res.outcome == "dropped" and "end marker" in (res.error or "")


def test_huge_line_is_malformed_not_a_memory_blowup() -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        return await stream(request, TOKEN, b"data: {" + b"x" * 200_000, close=True)

    (res,), _ = run(handler, max_event_bytes=4096)
    assert res.outcome == "malformed" and len(res.token_ns) == 1


@pytest.mark.slow
def test_timeout_outcome() -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(2.0)
        return await stream(request, TOKEN, DONE)

    (res,), _ = run(handler, request_timeout_s=0.3)
    assert res.outcome == "timeout"


def test_error_event_is_http_error() -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        return await stream(request, b'data: {"error":{"message":"context size exceeded"}}\n\n')

    (res,), _ = run(handler)
    assert res.outcome == "http_error" and res.error == "context size exceeded"


def test_closed_before_any_byte_retried_once_then_real_errors_shown() -> None:
    calls = {"n": 0}

    async def flaky(request: web.Request) -> web.StreamResponse:
        calls["n"] += 1
        if calls["n"] == 1 and request.transport is not None:
            request.transport.close()
        return await stream(request, TOKEN, TOKEN, DONE)

    (res,), seen = run(flaky)
    assert res.outcome == "ok" and res.retried and len(seen) == 2
    assert "first_attempt_error" in res.extra

    async def always_closed(request: web.Request) -> web.StreamResponse:
        if request.transport is not None:
            request.transport.close()
        return web.Response()

    (res,), seen = run(always_closed)
    assert res.outcome == "dropped" and res.retried and len(seen) == 2  # once, then the real error


def test_connection_refused() -> None:
    async def go() -> RawResult:
        lane = LaneConfig(name="x", url="http://127.0.0.1:9", api="llamacpp")
        client = LaneClient(lane, LoadgenConfig(lanes=[lane]))
        await client.open(1)
        try:
            return await client.send(b"{}", "rid")
        finally:
            await client.close()

    res = asyncio.run(go())
    assert res.outcome == "refused" and res.status is None


def test_plain_json_instead_of_a_stream_is_malformed() -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        return web.json_response({"content": "not streamed", "stop": True})

    (res,), _ = run(handler)
    assert res.outcome == "malformed" and res.error == "response is not an event stream"
