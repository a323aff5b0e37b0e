"""The step's throughput bins (the window's stop rule) against the per-token definition they replace."""

from __future__ import annotations

import random
from types import SimpleNamespace

from satbench.loadgen.step import StepRun


def per_token(tok: list[int], counts: list[int], start: int, width: int) -> dict[int, int]:
    bins: dict[int, int] = {}
    for t, n in zip(tok, counts, strict=True):
        if t >= start:
            i = (t - start) // width
            bins[i] = bins.get(i, 0) + n
    return bins


def test_bisected_bins_equal_counting_token_by_token() -> None:
    rng = random.Random(7)
    for _ in range(300):
        start = rng.randrange(0, 10**9)
        width = rng.choice([1, 7, 10**6, 3 * 10**8])
        t = start + rng.randrange(-5 * width, 5 * width)
        tok = []
        for _ in range(rng.randrange(0, 80)):
            t += rng.choice([0, 0, 1, rng.randrange(0, 2 * width + 1)])
            tok.append(t)
        counts = [rng.choice([1, 1, 1, 4]) for _ in tok]  # some streams carry several tokens an event
        step = SimpleNamespace(window_start_ns=start, _batch_s=width / 1e9, _bins={})
        StepRun._bin_tokens(step, tok, counts)  # type: ignore[arg-type]
        assert step._bins == per_token(tok, counts, start, width), (start, width, tok)
