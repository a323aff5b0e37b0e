"""A stand-in tokenizer and token text, so prompt lengths are predictable and output looks like model output.

Counting rule (documented for load generators, and served at ``POST /tokenize``): one BOS token, then one
token per match of ``<|im_start|>``, ``<|im_end|>``, a run of word characters, or any single other
non-space character. ``"Hello, my name is"`` is 6 tokens, as with the real SPM vocabulary. A prompt given
as a list of token ids counts as its length. Chat messages are rendered with a ChatML template first.

Each token's piece carries the whitespace before it (as SPM pieces carry their leading space), so the pieces
of a text join back into it (``/detokenize``), trailing whitespace aside. A piece's id is stable across
processes: the generation vocabulary's own ids, else a CRC of the piece (the next free id where another piece
of the process holds it: ``piece_id``); ``detokenize`` knows every piece that was tokenized in this process.

Generated tokens are drawn from a small fixed vocabulary by a deterministic hash of (key, index): the key is
the request's number, or a digest of (seed, prompt) when the sampling is reproducible, so a fixed seed
gives the same text for the same prompt and the per-token cost is one list lookup.
"""

from __future__ import annotations

import re
import zlib
from array import array
from collections.abc import Sequence
from typing import Any

__all__ = [
    "BOS",
    "BOS_ID",
    "EOS_ID",
    "VOCAB",
    "count_prompt_tokens",
    "detokenize",
    "ids_digest",
    "piece_of",
    "render_chat",
    "token_at",
    "tokenize",
    "tokenize_pieces",
]

BOS = "<s>"
BOS_ID = 1
EOS_ID = 2
_TOKEN_RE = re.compile(r"<\|im_(?:start|end)\|>|\w+|[^\w\s]")
_PIECE_RE = re.compile(r"\s*(?:<\|im_(?:start|end)\|>|\w+|[^\w\s])")
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
_VOCAB_IDS = {piece: _BASE_ID + k for k, piece in enumerate(VOCAB)}
_PIECES: dict[int, str] = {BOS_ID: BOS, EOS_ID: "</s>", **{i: p for p, i in _VOCAB_IDS.items()}}
_IDS: dict[str, int] = {}  # the pieces given an id in this process, beyond the vocabulary
_SPAN = 30000
_PROBES = 16


def piece_id(piece: str) -> int:
    """The piece's id: the vocabulary's, else ``1100 + CRC % 30000``, else (where another piece of this process
    holds that id already) the next free one of up to 16 after it, so two pieces never share an id and
    ``detokenize`` gives back the text that was tokenized. Only a process that has met more than a few
    thousand pieces sees such a clash (the CRC's residues collide as birthdays do); a piece that finds 16 ids
    taken shares the first, as before."""
    known = _VOCAB_IDS.get(piece)
    if known is None:
        known = _IDS.get(piece)
    if known is not None:
        return known
    crc = zlib.crc32(piece.encode("utf-8"))
    for k in range(_PROBES):
        tid = 1100 + (crc + k) % _SPAN
        holder = _PIECES.get(tid)
        if holder is None:
            _PIECES[tid] = piece
            _IDS[piece] = tid
            return tid
        if holder == piece:
            return tid
    return 1100 + crc % _SPAN


def tokenize_pieces(text: str) -> list[tuple[int, str]]:
    """``(id, piece)`` for each token of ``text`` (without BOS)."""
    return [(piece_id(p), p) for p in _PIECE_RE.findall(text)]


def tokenize(text: str) -> list[int]:
    """Stable pseudo token ids for ``text`` (without BOS)."""
    return [piece_id(p) for p in _PIECE_RE.findall(text)]


def piece_of(tid: int) -> str:
    return _PIECES.get(tid, "")


def detokenize(ids: Sequence[int]) -> str:
    return "".join(_PIECES.get(int(t), "") for t in ids)


def ids_digest(ids: Sequence[int], salt: int = 0) -> int:
    """A stable 32-bit digest of a token sequence (and a salt such as the sampling seed)."""
    return zlib.crc32(array("q", ids).tobytes(), salt & 0xFFFFFFFF)


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
    """The ChatML rendering of already validated messages (see ``simulator.requests.check_messages``)."""
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
    """The ``index``-th generated token (id, text) of the request keyed ``seq``."""
    h = (seq * 0x9E3779B1 + index * 0x7FEB352D) & 0xFFFFFFFF
    h = ((h ^ (h >> 16)) * 0x85EBCA6B) & 0xFFFFFFFF
    h = ((h ^ (h >> 13)) * 0xC2B2AE35) & 0xFFFFFFFF
    k = ((h ^ (h >> 16)) * len(VOCAB)) >> 32
    return _BASE_ID + k, VOCAB[k]
