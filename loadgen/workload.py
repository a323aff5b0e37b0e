"""The seeded workload: what each virtual user asks, reproducible from (seed, lane, concurrency, user).

Each user draws from its own ``random.Random`` seeded by a string of the seed, lane, rung and user, so the
n-th request of user u at rung c is the same on every run with the same config, whatever the timing.

Prompt text of a wanted token length is cut from one long synthetic text prepared before the step: a
sequence of short common words that the usual SPM/BPE vocabularies encode as one token each (the
server's own count, ``timings.prompt_n`` / ``usage.prompt_tokens``, is what gets recorded, so the
approximation only has to be close). A short unique head (``u3 r17:``) keeps the runtime's prompt cache from
turning a long prompt into a cache hit. Nothing is tokenized, and no text is built, in the hot loop: a
prompt is a slice of the prepared text.

The prefill probe is a share of requests (drawn per request) that send a long prompt, so decode stalls of
the other users and prefill waits show up in the figures.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass

from core.api import ApiFlavour
from loadgen.config import LengthDist, WorkloadConfig

__all__ = ["PromptText", "RequestSpec", "UserWorkload", "build_body", "draw_length"]

_WORDS = (
    "the", "of", "and", "to", "in", "is", "for", "on", "with", "as", "at", "by", "from", "it", "an",
    "be", "this", "that", "are", "was", "or", "not", "but", "all", "can", "one", "time", "year", "day",
    "way", "man", "new", "old", "good", "first", "last", "long", "great", "little", "own", "other",
    "right", "big", "high", "small", "large", "next", "early", "young", "few", "public", "bad", "same",
    "able",
)


def draw_length(dist: LengthDist, rng: random.Random) -> int:
    """One draw from a length distribution (clipped to ``[low, high]`` unless fixed)."""
    if dist.kind == "fixed":
        return dist.value
    if dist.kind == "uniform":
        return rng.randint(dist.low, dist.high)
    value = round(math.exp(rng.gauss(math.log(dist.median), dist.sigma)))
    return min(max(value, dist.low), dist.high)


class PromptText:
    """One long synthetic text; ``prompt(n)`` is its first n words (one token each, roughly)."""

    def __init__(self, max_tokens: int, seed: int = 0) -> None:
        rng = random.Random(f"prompt-text:{seed}")
        words = [rng.choice(_WORDS) for _ in range(max(1, max_tokens))]
        self._text = " ".join(words)
        self._ends = []
        pos = 0
        for word in words:
            pos += len(word)
            self._ends.append(pos)
            pos += 1
        self.max_tokens = len(words)

    def prompt(self, n_tokens: int) -> str:
        n = min(max(1, n_tokens), self.max_tokens)
        return self._text[: self._ends[n - 1]]


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """One request of one user: the asked lengths and whether it is a prefill probe."""

    user: int
    index: int
    prompt_tokens: int
    max_tokens: int
    probe: bool


class UserWorkload:
    """The request stream of one user at one rung of one lane."""

    def __init__(self, config: WorkloadConfig, lane: str, concurrency: int, user: int) -> None:
        self.config = config
        self.user = user
        self._rng = random.Random(f"{config.seed}:{lane}:{concurrency}:{user}")
        self._index = 0

    def next_spec(self) -> RequestSpec:
        cfg = self.config
        probe = cfg.prefill_probe_share > 0 and self._rng.random() < cfg.prefill_probe_share
        prompt = cfg.prefill_probe_tokens if probe else draw_length(cfg.prompt_tokens, self._rng)
        output = draw_length(cfg.output_tokens, self._rng)
        spec = RequestSpec(self.user, self._index, prompt, output, probe)
        self._index += 1
        return spec


def max_prompt_tokens(config: WorkloadConfig) -> int:
    dist = config.prompt_tokens
    longest = dist.value if dist.kind == "fixed" else dist.high
    return max(longest, config.prefill_probe_tokens if config.prefill_probe_share > 0 else 1)


def build_body(api: ApiFlavour, model: str, spec: RequestSpec, text: PromptText, config: WorkloadConfig,
               user_tag: str) -> bytes:
    """The JSON request body of one streamed request, in the lane's API flavour."""
    prompt = f"u{spec.user} r{spec.index}: " + text.prompt(max(1, spec.prompt_tokens - 4))
    body: dict[str, object]
    if api == "llamacpp":
        body = {"prompt": prompt, "n_predict": spec.max_tokens}
    elif api == "openai-completions":
        body = {"prompt": prompt, "max_tokens": spec.max_tokens,
                "stream_options": {"include_usage": True}}
    else:
        body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": spec.max_tokens,
                "stream_options": {"include_usage": True}}
    if model:
        body["model"] = model
    body["stream"] = True
    body["ignore_eos"] = config.ignore_eos
    body["temperature"] = config.temperature
    body["user"] = user_tag
    return json.dumps(body, separators=(",", ":")).encode()
