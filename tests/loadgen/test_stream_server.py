"""The stream server's pacing: each stream on its own clock, or every stream on one shared grid."""

from __future__ import annotations

import asyncio

import aiohttp

from testkit.stream_server import StreamServer, StreamServerConfig


async def _token_times(lockstep: bool) -> list[list[float]]:
    server = StreamServer(StreamServerConfig(itl_s=0.02, record_tokens=True, lockstep=lockstep, ping=False))
    url = await server.start()
    try:
        async with aiohttp.ClientSession() as session:

            async def one(rid: str, delay: float) -> None:
                await asyncio.sleep(delay)
                body = {"prompt": "x", "n_predict": 6, "stream": True}
                async with session.post(url + "/completion", json=body, headers={"X-Request-ID": rid}) as resp:
                    await resp.read()

            await asyncio.gather(one("a", 0.0), one("b", 0.007))
        return [server.token_times["a"], server.token_times["b"]]
    finally:
        await server.stop()


def test_lockstep_puts_every_stream_on_one_grid() -> None:
    a, b = asyncio.run(_token_times(lockstep=True))
    # after the first token, both streams' tokens leave together (one batched decode step)
    pairs = [(x, y) for x in a[1:] for y in b[1:] if abs(x - y) < 0.01]
    assert len(pairs) >= 3 and all(abs(x - y) < 0.004 for x, y in pairs)


def test_own_clocks_never_shorten_a_gap() -> None:
    a, b = asyncio.run(_token_times(lockstep=False))
    # each stream sleeps its own full gap after each token, whatever the other does: a loaded machine's late
    # wake-up can only lengthen a gap (the offset between the streams drifts with it), never pull a token onto
    # a shared grid, which is what lockstep does to a stream started off the grid
    gaps = [y - x for times in (a, b) for x, y in zip(times, times[1:])]
    assert len(gaps) == 10 and min(gaps) >= 0.0195, gaps
