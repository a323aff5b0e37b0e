"""The step's throughput bins (the window's stop rule) against the per-token definition they replace."""

from __future__ import annotations

import random
from types import SimpleNamespace

from satbench.loadgen.step import StepRun


def per_token(tok: list[int], output: int, start: int, width: int) -> dict[int, int]:
    bins: dict[int, int] = {}
    counts = [1] * len(tok)
    if tok and output > len(tok):
        counts[-1] += output - len(tok)
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
        output = len(tok) + rng.choice([0, 0, 3])
        step = SimpleNamespace(window_start_ns=start, _batch_s=width / 1e9, _bins={})
        StepRun._bin_tokens(step, tok, output)  # type: ignore[arg-type]
        assert step._bins == per_token(tok, output, start, width), (start, width, tok)
