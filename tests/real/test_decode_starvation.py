"""Decode starvation on a real llama-server: a long prompt arriving while other requests decode.

With the default logical batch (``-b 2048``) the whole ~1500-token prompt is prefilled in one step and
every decoding request waits for it; with ``-b 256 -ub 256`` the prefill is cut into 256-token chunks
interleaved with decode steps, so the longest decode gap shrinks. The test measures, for each setting, the
longest gap between tokens of the decoding requests while the long prompt is being prefilled, and checks the
direction (chunked prefill stalls decode less), with a wide margin for a shared machine. The figures are
printed; tight goals belong in bench scripts.

The gaps are the server's, not the client's: each streamed token carries the server's own clock
(``timings_per_token``: ``predicted_ms`` is the time from the end of the slot's prompt to that token). A
client's arrival times measured the client: the tiny model's tokens reach it in bursts (a median gap of
0.01 ms), and while llama.cpp's threads spin through a prefill on every core, the client is not scheduled
to read at all, so a chunked prefill read as one stall as long as the whole prompt.
"""

from __future__ import annotations

import itertools
import json
import statistics
import threading
import time
from pathlib import Path

import httpx
import pytest

from satbench.runtimes.llamacpp import LlamaServer, LlamaServerSpec

pytestmark = [pytest.mark.real, pytest.mark.timeout(300)]

LONG_PROMPT_TOKENS = 1500
DECODERS = 3


def _long_prompt(url: str, target: int) -> tuple[str, int]:
    words = ("the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "while", "wizards", "judge")
    text, n = "", 0
    for i in range(8 * target):
        text += f" {words[i % len(words)]}{i % 97}"
        if i % 50 == 49:
            n = len(httpx.post(f"{url}/tokenize", json={"content": text}, timeout=30).json()["tokens"])
            if n >= target:
                break
    return text, n


def _decode(url: str, clock: list[float], n_predict: int, stop: threading.Event) -> None:
    """Stream until ``stop`` is set (closing the stream cancels the request) or ``n_predict`` tokens, keeping
    each token's server time in ms (``predicted_ms``)."""
    body = {"prompt": "Once upon a time", "n_predict": n_predict, "ignore_eos": True, "stream": True,
            "timings_per_token": True}
    with httpx.stream("POST", f"{url}/completion", json=body, timeout=120) as resp:
        for line in resp.iter_lines():
            if line.startswith("data:") and '"stop":false' in line:
                clock.append(float(json.loads(line[5:])["timings"]["predicted_ms"]))
                if stop.is_set():
                    return


def _stall(url: str, prompt: str) -> dict[str, float]:
    # the decoders stream until the long prompt has been answered (a token after it), however slow or loaded
    # the machine: a fixed length ran out before the prompt was sent once, on a busy machine
    clocks: list[list[float]] = [[] for _ in range(DECODERS)]
    stop = threading.Event()
    threads = [threading.Thread(target=_decode, args=(url, clocks[i], 4000, stop)) for i in range(DECODERS)]
    for thread in threads:
        thread.start()
    while min(len(c) for c in clocks) < 20:
        time.sleep(0.01)
    body = {"prompt": prompt, "n_predict": 1, "cache_prompt": False}
    resp = httpx.post(f"{url}/completion", json=body, timeout=120)
    stop.set()
    for thread in threads:
        thread.join()
    prefill_ms = float(resp.json()["timings"]["prompt_ms"])
    # the long prompt is the only thing besides the decoders that the server runs, so a decoder's longest gap
    # on the server's clock is the stall it caused (the decoders' own few-token prompts cost a step at most)
    gaps = [b - a for c in clocks for a, b in itertools.pairwise(c)]
    assert gaps, "no decoder streamed while the long prompt was prefilled"
    return {"stall_ms": max(gaps), "itl_p50_ms": statistics.median(gaps), "prefill_ms": prefill_ms}


def test_chunked_prefill_bounds_the_decode_stall(llama_server_binary: Path, tiny_models: dict[str, Path],
                                                 tmp_path: Path) -> None:
    figures: dict[str, dict[str, float]] = {}
    for label, batch in (("b2048", 2048), ("b256", 256)):
        # one compute thread: llama.cpp's threads spin between a step's operations, and a thread per core
        # leaves the streams' HTTP threads none, which stretches the steps the test reads
        spec = LlamaServerSpec(model=tiny_models["dense"], parallel=4, ctx_size=16384, batch=batch,
                               ubatch=min(batch, 512), threads=1)
        with LlamaServer(spec, tmp_path / f"{label}.log", binary=llama_server_binary) as server:
            prompt, n = _long_prompt(server.url, LONG_PROMPT_TOKENS)
            assert n >= LONG_PROMPT_TOKENS
            runs = [_stall(server.url, f"{rep}{prompt}") for rep in range(3)]
        figures[label] = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
    print(f"\ndecode stall during a {LONG_PROMPT_TOKENS}-token prefill: {figures}")
    assert figures["b2048"]["stall_ms"] > 1.5 * figures["b256"]["stall_ms"]
    assert figures["b2048"]["stall_ms"] > 5 * figures["b2048"]["itl_p50_ms"]
