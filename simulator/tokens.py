"""A stand-in tokenizer and token text, so prompt lengths are predictable and output looks like model output.

Counting rule (documented for load generators, and served at ``POST /tokenize``): one BOS token, then one
token per match of ``<|im_start|>``, ``<|im_end|>``, a run of word characters, or any single other
non-space character. ``"Hello, my name is"`` is 6 tokens, as with the real SPM vocabulary. A prompt given
as a list of token ids counts as its length. Chat messages are rendered with a ChatML template first.

Generated tokens are drawn from a small fixed vocabulary by a deterministic hash of (request, index), so a
fixed seed gives the same text and the per-token cost is one list lookup.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

__all__ = [
    "BOS",
    "VOCAB",
    "count_prompt_tokens",
    "render_chat",
    "token_at",
    "tokenize",
]

BOS = "<s>"
_TOKEN_RE = re.compile(r"<\|im_(?:start|end)\|>|\w+|[^\w\s]")
# fmt: off
VOCAB: tuple[str, ...] = (
    " the", " of", " and", " to", " a", " in", " is", " that", " for", " it", " as", " was", " with",
    " be", " by", " on", " not", " he", " this", " are", " or", " his", " from", " at", " which", " but",
    " have", " an", " had", " they", " you", " were", " their", " one", " all", " we", " can", " her",
    " has", " there", " been", " if", " more", " when", " will", " would", " who", " so", " no", " model",
    " token", " batch", " slot", " queue", " cache", " layer", " expert", " step", ",", ".", " time",
    " data", " load", " rate",
)
# fmt: on
_BASE_ID = 1000


def tokenize(text: str) -> list[int]:
    """Stable pseudo token ids for ``text`` (without BOS)."""
    return [(hash_piece(m) % 30000) + 259 for m in _TOKEN_RE.findall(text)]


def hash_piece(piece: str) -> int:
    h = 2166136261
    for ch in piece.encode("utf-8"):
        h = ((h ^ ch) * 16777619) & 0xFFFFFFFF
    return h


def count_prompt_tokens(prompt: Any) -> int:
    """Token count of a /completion-style prompt: a string, a list of token ids, or a list of either."""
    if isinstance(prompt, str):
        return 1 + len(_TOKEN_RE.findall(prompt))
    if isinstance(prompt, Sequence) and prompt and all(isinstance(t, int) for t in prompt):
        return len(prompt)
    if isinstance(prompt, Sequence) and prompt:
        return count_prompt_tokens(prompt[0])
    raise ValueError("prompt must be a non-empty string or a list of token ids")


def render_chat(messages: Any) -> str:
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages must be a non-empty array")
    parts: list[str] = []
    for m in messages:
        if not isinstance(m, dict) or "role" not in m:
            raise ValueError("each message needs a role")
        content = m.get("content") or ""
        if isinstance(content, list):
            content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        parts.append(f"<|im_start|>{m['role']}\n{content}<|im_end|>\n")
    parts.append("<|im_start|>assistant\n")
    return "".join(parts)


def token_at(seq: int, index: int) -> tuple[int, str]:
    """The ``index``-th generated token (id, text) of request number ``seq``."""
    k = (seq * 7919 + index * 104729) % len(VOCAB)
    return _BASE_ID + k, VOCAB[k]
