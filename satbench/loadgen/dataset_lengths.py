"""The dataset answers' lengths as the lane's own tokenizer counts them (``POST /tokenize``), once per lane.

A turn's ``max_tokens`` is the length of the dataset's answer to it (``loadgen.datasets``); in tokens of the
lane's own vocabulary, so the requests ask for what the recorded answers held on this model, not a
characters-per-token guess. llama-server's ``/tokenize`` (``{"content": text}`` -> ``{"tokens": [...]}``, no
special tokens unless asked) counts each answer once, before the lane's first rung, a few at a time; a lane that
does not answer it (an OpenAI-compatible remote, a router) keeps the estimate, and the evidence says which.
"""

from __future__ import annotations

import asyncio

import aiohttp

from satbench.loadgen.config import LaneConfig
from satbench.loadgen.datasets import Dataset

__all__ = ["answer_lengths"]


async def answer_lengths(lane: LaneConfig, dataset: Dataset, parallel: int = 8) -> Dataset:
    """``dataset`` with each answer counted by ``lane``'s ``/tokenize`` (or as it was, said so, on a failure)."""
    gate = asyncio.Semaphore(parallel)
    timeout = aiohttp.ClientTimeout(total=10.0)

    async def count(session: aiohttp.ClientSession, text: str | None) -> int | None:
        if text is None:
            return None
        async with gate, session.post(lane.url + "/tokenize", json={"content": text}) as resp:
            if resp.status != 200:
                raise ValueError(f"HTTP {resp.status}")
            tokens = (await resp.json(content_type=None)).get("tokens")
            if not isinstance(tokens, list):
                raise ValueError("no tokens in the answer")
            return max(1, len(tokens))

    try:
        async with aiohttp.ClientSession(timeout=timeout) as session:
            counts = [list(await asyncio.gather(*(count(session, t.answer) for t in conv.turns)))
                      for conv in dataset.conversations]
    except (TimeoutError, aiohttp.ClientError, OSError, ValueError, AttributeError) as exc:
        return dataset.with_answer_tokens([[None] * len(c.turns) for c in dataset.conversations],
                                          f"estimated (the lane's /tokenize failed: {str(exc)[:120]})")
    return dataset.with_answer_tokens(counts, "counted by the lane's /tokenize")
