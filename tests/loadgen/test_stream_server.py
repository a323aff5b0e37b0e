"""The stream server's pacing: each stream on its own clock, or every stream on one shared grid."""

from __future__ import annotations

import asyncio
import itertools

import aiohttp
import pytest

from testkit import stream_server
from testkit.stream_server import StreamServer, StreamServerConfig


async def _token_times(lockstep: bool) -> tuple[list[float], list[float], float]:
    """Both streams' token times, and the server's start (its grid's origin)."""
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
        return server.token_times["a"], server.token_times["b"], server._wall0
    finally:
        await server.stop()


def test_lockstep_gaps_reach_the_next_grid_point_and_own_clocks_a_whole_gap(monkeypatch) -> None:
    # the pacing rule on the server's own clock, 27 ms after its start on a 20 ms grid
    for lockstep, gap in ((True, 0.013), (False, 0.02)):
        server = StreamServer(StreamServerConfig(itl_s=0.02, lockstep=lockstep, ping=False))
        monkeypatch.setattr(stream_server.time, "perf_counter_ns", lambda s=server: s._mono0 + 27_000_000)
        assert server._gap() == pytest.approx(gap)


def test_lockstep_puts_every_stream_on_one_grid() -> None:
    a, b, origin = asyncio.run(_token_times(lockstep=True))
    # after the first token, both streams' tokens leave on the server's grid (one batched decode step): a token
    # is late by its wake-up only (a loaded machine's lateness does not add up), so most sit just past a point
    # (own clocks would put one stream's tokens 7 ms off the other's: at most half of them near the grid)
    late = [(t - origin) % 0.02 for t in a[1:] + b[1:]]
    assert sum(d < 0.004 for d in late) > len(late) / 2, late


def test_own_clocks_never_shorten_a_gap() -> None:
    a, b, _ = asyncio.run(_token_times(lockstep=False))
    # each stream sleeps its own full gap after each token, whatever the other does: a loaded machine's late
    # wake-up can only lengthen a gap (the offset between the streams drifts with it), never pull a token onto
    # a shared grid, which is what lockstep does to a stream started off the grid
    gaps = [y - x for times in (a, b) for x, y in itertools.pairwise(times)]
    assert len(gaps) == 10 and min(gaps) >= 0.0195, gaps
