"""The seeded workload: what each virtual user asks, reproducible from (seed, lane, concurrency, user).

Each user draws from its own ``random.Random`` seeded by a string of the seed, lane, rung and user, so the
n-th request of user u at rung c is the same on every run with the same config, whatever the timing.

Prompt text of a wanted token length is cut from one long synthetic text prepared before the step: a
sequence of short common words that the usual SPM/BPE vocabularies encode as one token each (the
server's own count, ``timings.prompt_n`` / ``usage.prompt_tokens``, is what gets recorded, so the
approximation only has to be close). Nothing is tokenized, and no text is built, in the hot loop: a prompt is
a short head, then a slice of the prepared text.

Fresh prompts: a runtime's prompt cache (llama-server's slots, its host-memory cache ``--cache-ram``, 8 GiB by
default in recent builds, and ``--slot-prompt-similarity``) serves the longest prefix a new prompt shares with
one it holds, so a prompt sent before, by an earlier rung or an earlier session, is a cache hit the figures
would count as speed. Each request's own text therefore opens with a head unique to it (``request_head``: 8 hex
digits of a digest of the run's nonce, the request's stream and its index, then ``u3:``), its stream being the
lane, the rung and the user (an open-loop rung's: its rate), its nonce the run's id (``PromptText.nonce``):
the first token differs from every other prompt's, within the rung, across rungs, across sessions, and only
what the workload declares is shared: its shared prefixes (the same within a run, drawn anew by each run) and
a conversation's exchanges so far. The draws (lengths, prefixes, turns) do not depend on the nonce, so the
same seed sends the same lengths on every run. A cache that reuses chunks past the first difference
(``--cache-reuse``, off by default) could still match the prepared text after the head.

The prefill probe is a share of requests (drawn per request) that send a long prompt, so decode stalls of
the other users and prefill waits show up in the figures.

Two workloads exercise the runtime's prompt cache (both off by default, which leaves every request a head and
the prepared text, as above):

- ``shared_prefix`` (``share``, ``prefixes`` K, ``tokens`` T): that share of the requests (drawn per request)
  opens with one of K common prefixes (drawn uniformly), the rest unique as usual. Prefix k is T words of the
  same vocabulary, drawn from ``(seed, nonce, k)``, so it is the same text, and the same tokens, on every rung
  of a run, and new in the next run (its first uses are its cache's cold start, as a deployment's were). It
  counts toward the request's drawn prompt length (prefix, unique head, then the prepared text); a chat
  request sends it as a system message. A draw shorter than T + 5 tokens still gets one word after its head.
- ``conversation`` (``turns`` N): a user's next request extends its previous exchange: the chat messages
  so far, the assistant's answer as received, then a new user message (of a drawn length, with its own
  head); for the completion APIs the prompt is the previous prompt, the answer and a newline, then the new
  text. After N turns, or after a request that failed, the user begins a new conversation (whose opening
  request may draw a shared prefix). The draws do not depend on the answers, so the same seed sends the same
  prompts wherever the runtime answers the same (a reproducible sampling: temperature 0 or a seed).
  Steady start (``conversation.start = "steady"``, the default): a user's first conversation opens at a turn
  drawn uniformly from 1..N, its earlier exchanges synthesized (each earlier message as drawn, each answer
  the prepared text at the drawn output length), so the mix of depths is stationary from the first request
  and every rung measures the same workload; the records' ``turn`` says each request's depth (the step
  figure ``turn_mean`` checks it).

A dataset (``workload.dataset``, ``loadgen.datasets``; handed in with the ``PromptText``) replaces the drawn
prompts: each user replays whole conversations of it, turn by turn, the messages as the dataset wrote them and
the answers as received; ``max_tokens`` is the length of the dataset's answer to the turn (or a draw). A
conversation's opening message gets the request's head before it (a conversation drawn again, by this rung or
another, is then a new one to the cache), its later turns extend it as sent.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import random
from array import array
from dataclasses import dataclass, replace

from satbench.core.api import ApiFlavour
from satbench.loadgen.config import LengthDist, WorkloadConfig
from satbench.loadgen.datasets import Dataset, estimate_tokens

__all__ = ["STREAM_OPTIONS", "PromptText", "RequestSpec", "UserWorkload", "build_body", "context_body", "draw_length",
           "request_head", "text_body"]

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


def request_head(nonce: str, stream: str, index: int) -> str:
    """The first word of a request's own text (module docstring): 8 hex digits of a digest of the run's nonce,
    the request's stream and its index, the same for the same three and new wherever one differs."""
    return hashlib.blake2b(f"{nonce}|{stream}|{index}".encode(), digest_size=4).hexdigest()


class PromptText:
    """One long synthetic text; ``prompt(n)`` is its first n words (one token each, roughly), and
    ``shared_prefix(k, n)`` the k-th common prefix of n words (built once, at its first use). ``nonce``: the
    run's (its id), which makes every head and shared prefix new to a runtime that served an earlier run."""

    def __init__(self, max_tokens: int, seed: int = 0, dataset: Dataset | None = None, nonce: str = "") -> None:
        self.seed = seed
        self.nonce = nonce
        self.dataset = dataset  # a conversation dataset whose prompts the users send (loadgen.datasets)
        self._prefixes: dict[tuple[int, int], str] = {}
        rng = random.Random(f"prompt-text:{seed}")
        words = [rng.choice(_WORDS) for _ in range(max(1, max_tokens))]
        self._text = " ".join(words)
        # each word's end in the text, as 4-byte offsets: at MAX_TOKENS words, 64 MB where a list of ints is 600 MB
        self._ends = array("I", itertools.accumulate(len(word) + 1 for word in words))
        self.max_tokens = len(words)

    def prompt(self, n_tokens: int) -> str:
        n = min(max(1, n_tokens), self.max_tokens)
        return self._text[: self._ends[n - 1] - 1]

    def shared_prefix(self, k: int, n_tokens: int) -> str:
        key = (k, n_tokens)
        text = self._prefixes.get(key)
        if text is None:
            rng = random.Random(f"shared-prefix:{self.seed}:{self.nonce}:{k}" if self.nonce
                                else f"shared-prefix:{self.seed}:{k}")
            text = self._prefixes[key] = " ".join(rng.choice(_WORDS) for _ in range(max(1, n_tokens)))
        return text


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """One request of one user: the asked lengths, whether it is a prefill probe, the shared prefix it opens
    with (``prefix``: its index) and, in a conversation, the exchanges before it (``history``: each earlier
    request's spec and the answer it got; the first one's prefix opens the conversation)."""

    user: int
    index: int
    prompt_tokens: int
    max_tokens: int
    probe: bool
    prefix: int | None = None
    history: tuple[tuple[RequestSpec, str], ...] = ()
    text: str | None = None  # a dataset's message, sent as it is (loadgen.datasets)
    head: str = ""  # the first word of its own text (request_head; a dataset's later turns: none)

    @property
    def turn(self) -> int:
        """1 for a request that opens a conversation (or any request outside one), 2 for the next, ..."""
        return len(self.history) + 1

    def tags(self) -> dict[str, int]:
        """What the record notes of the request's cache workload: its prefix and its turn, where set."""
        opener = self.history[0][0] if self.history else self
        out = {} if opener.prefix is None else {"shared_prefix": opener.prefix}
        if self.history:
            out["turn"] = self.turn
        return out


class UserWorkload:
    """The request stream of one user at one rung of one lane; ``answered(spec, text)`` after each request
    of a conversation workload (``converses``). ``stream`` names it in the requests' heads (default: the lane,
    the rung and the user; an open-loop rung's names its rate)."""

    def __init__(self, config: WorkloadConfig, lane: str, concurrency: int, user: int,
                 text: PromptText | None = None, stream: str | None = None) -> None:
        self.config = config
        self.user = user
        self._nonce = text.nonce if text is not None else ""
        self._stream = f"{lane}:{concurrency}:{user}" if stream is None else stream
        self.dataset = text.dataset if text is not None else None
        self.converses = config.conversation is not None or self.dataset is not None
        self._rng = random.Random(f"{config.seed}:{lane}:{concurrency}:{user}")
        self._index = 0
        self._history: tuple[tuple[RequestSpec, str], ...] = ()
        self._conversation: int | None = None  # a dataset's conversation this user is in, and its next turn
        self._turn = 0
        self._awaiting = False
        conv = config.conversation
        if conv is not None and conv.start == "steady" and text is not None:
            self._history = self._synthesized(self._rng.randrange(conv.turns), text)

    def _synthesized(self, turns: int, text: PromptText) -> tuple[tuple[RequestSpec, str], ...]:
        """``turns`` earlier exchanges of a conversation this user is already in (module docstring)."""
        history: tuple[tuple[RequestSpec, str], ...] = ()
        for _ in range(turns):
            spec = self.next_spec()
            history = (*history, (replace(spec, history=()), " " + text.prompt(spec.max_tokens)))
            self._history = history
        return history

    def _dataset_spec(self, dataset: Dataset) -> RequestSpec:
        """The next turn of this user's dataset conversation (a new one drawn after the last turn, a failed
        request, or a request never answered: an open-loop rung's)."""
        if self._conversation is None or self._awaiting:
            self._conversation = self._rng.randrange(len(dataset.conversations))
            self._turn = 0
            self._history = ()
        turn = dataset.conversations[self._conversation].turns[self._turn]
        output = turn.output_tokens if self.config.dataset is None or self.config.dataset.output == "answer" \
            else None
        if output is None:
            output = draw_length(self.config.output_tokens, self._rng)
        self._awaiting = True
        head = "" if self._history else request_head(self._nonce, self._stream, self._index)
        spec = RequestSpec(self.user, self._index, estimate_tokens(turn.user), output, False, None, self._history,
                           turn.user, head)
        self._index += 1
        return spec

    def next_spec(self) -> RequestSpec:
        cfg = self.config
        if self.dataset is not None:
            return self._dataset_spec(self.dataset)
        probe = cfg.prefill_probe_share > 0 and self._rng.random() < cfg.prefill_probe_share
        prompt = cfg.prefill_probe_tokens if probe else draw_length(cfg.prompt_tokens, self._rng)
        output = draw_length(cfg.output_tokens, self._rng)
        prefix = None
        shared = cfg.shared_prefix
        if shared is not None:  # drawn on every request, so the draws never depend on the answers
            opens = self._rng.random() < shared.share
            k = self._rng.randrange(shared.prefixes)
            prefix = k if opens and not self._history else None
        spec = RequestSpec(self.user, self._index, prompt, output, probe, prefix, self._history,
                           head=request_head(self._nonce, self._stream, self._index))
        self._index += 1
        return spec

    def answered(self, spec: RequestSpec, answer: str | None) -> None:
        """The answer to ``spec`` as received (``None``: it failed): the next request extends the exchange,
        unless the conversation is over (``turns``) or this request failed."""
        if self.dataset is not None and self._conversation is not None:
            self._awaiting = False
            turns = self.dataset.conversations[self._conversation].turns
            self._turn += 1
            if answer is None or self._turn >= len(turns):
                self._conversation, self._history = None, ()
            else:
                self._history = (*spec.history, (replace(spec, history=()), answer))
            return
        conv = self.config.conversation
        if conv is None or answer is None or spec.turn >= conv.turns:
            self._history = ()
            return
        self._history = (*spec.history, (replace(spec, history=()), answer))


def max_prompt_tokens(config: WorkloadConfig) -> int:
    dist = config.prompt_tokens
    longest = dist.value if dist.kind == "fixed" else dist.high
    return max(longest, config.prefill_probe_tokens if config.prefill_probe_share > 0 else 1)


def _message(spec: RequestSpec, text: PromptText, config: WorkloadConfig) -> str:
    """The request's own text: a dataset's message as it is (an opening one after its head), else its unique
    head, then the prepared text (less what its shared prefix holds)."""
    if spec.text is not None:
        return f"{spec.head} {spec.text}" if spec.head else spec.text
    n = spec.prompt_tokens - 4
    if spec.prefix is not None and config.shared_prefix is not None:
        n -= config.shared_prefix.tokens
    head = f"{spec.head} u{spec.user}: " if spec.head else f"u{spec.user} r{spec.index}: "
    return head + text.prompt(max(1, n))


def _prefix(spec: RequestSpec, text: PromptText, config: WorkloadConfig) -> str | None:
    """The shared prefix the request's conversation (or the request) opens with, if any."""
    opener = spec.history[0][0] if spec.history else spec
    if opener.prefix is None or config.shared_prefix is None:
        return None
    return text.shared_prefix(opener.prefix, config.shared_prefix.tokens)


# include_usage: the server's own counts at the end; continuous_usage_stats (vLLM, SGLang): its count in every
# chunk, so a server that sends several tokens an event says how many (``core.sse``); servers without it ignore it.
STREAM_OPTIONS: dict[str, bool] = {"include_usage": True, "continuous_usage_stats": True}


def build_body(api: ApiFlavour, model: str, spec: RequestSpec, text: PromptText, config: WorkloadConfig,
               user_tag: str) -> bytes:
    """The JSON request body of one streamed request, in the lane's API flavour."""
    prefix = _prefix(spec, text, config)
    body: dict[str, object]
    if api == "openai-chat":
        messages = [{"role": "system", "content": prefix}] if prefix is not None else []
        for earlier, answer in spec.history:
            messages += [{"role": "user", "content": _message(earlier, text, config)},
                         {"role": "assistant", "content": answer}]
        messages.append({"role": "user", "content": _message(spec, text, config)})
        body = {"messages": messages, "max_tokens": spec.max_tokens, "stream_options": STREAM_OPTIONS}
    else:
        parts = [prefix + " "] if prefix is not None else []
        parts += [_message(earlier, text, config) + answer + "\n" for earlier, answer in spec.history]
        prompt = "".join(parts) + _message(spec, text, config)
        body = {"prompt": prompt, "n_predict": spec.max_tokens} if api == "llamacpp" else {
            "prompt": prompt, "max_tokens": spec.max_tokens, "stream_options": STREAM_OPTIONS}
    return _encoded(body, model, config, user_tag)


def text_body(api: ApiFlavour, model: str, text: str, max_tokens: int, config: WorkloadConfig,
              user_tag: str) -> bytes:
    """The JSON body of one streamed request whose prompt is ``text`` as it is (a dataset's or a trace's): one
    user message for the chat API, the prompt itself for the completion APIs."""
    body: dict[str, object]
    if api == "openai-chat":
        body = {"messages": [{"role": "user", "content": text}], "max_tokens": max_tokens,
                "stream_options": STREAM_OPTIONS}
    elif api == "llamacpp":
        body = {"prompt": text, "n_predict": max_tokens}
    else:
        body = {"prompt": text, "max_tokens": max_tokens, "stream_options": STREAM_OPTIONS}
    return _encoded(body, model, config, user_tag)


def context_body(api: ApiFlavour, model: str, system: str, pieces: list[tuple[str, str]], max_tokens: int,
                 config: WorkloadConfig, user_tag: str) -> bytes:
    """An agent turn's body (``loadgen.agent_walk``): the system prompt, then the context's pieces in order, each
    ``("user", text)`` (a task, a tool's output) or ``("assistant", text)`` (an answer as received). The chat API
    sends them as messages; the completion APIs as one prompt, each piece followed by a newline, so the next
    turn's prompt begins with this prompt and its answer exactly, as a runtime's prompt cache needs it to."""
    body: dict[str, object]
    if api == "openai-chat":
        messages = [{"role": "system", "content": system}, *({"role": r, "content": t} for r, t in pieces)]
        body = {"messages": messages, "max_tokens": max_tokens, "stream_options": STREAM_OPTIONS}
    else:
        prompt = system + "\n\n" + "".join(text + "\n" for _, text in pieces)
        body = {"prompt": prompt, "n_predict": max_tokens} if api == "llamacpp" else {
            "prompt": prompt, "max_tokens": max_tokens, "stream_options": STREAM_OPTIONS}
    return _encoded(body, model, config, user_tag)


def _encoded(body: dict[str, object], model: str, config: WorkloadConfig, user_tag: str) -> bytes:
    if model:
        body["model"] = model
    body["stream"] = True
    body["ignore_eos"] = config.ignore_eos
    body["temperature"] = config.temperature
    body["user"] = user_tag
    return json.dumps(body, separators=(",", ":")).encode()
