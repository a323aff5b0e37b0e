"""Conversation datasets: the prompts users send taken from real conversations, replayed turn by turn.

A measurement on drawn lengths of filler text answers for another workload than the operator's; a dataset's own
prompts carry its length mix, its turn structure and (in a conversation) the history each turn resends. The
formats:

- **ShareGPT** JSON (the ShareGPT_V3 dumps vLLM's and sglang's benchmarks read): an array (or JSONL) of objects
  with ``conversations``, a list of turns ``{"from": "human" | "gpt" | "system", "value": text}``
  (``user``/``assistant`` are read as ``human``/``gpt``, as several dumps spell them);
- **OpenAI** chat JSONL (fine-tuning files, AIPerf's and guidellm's chat input): one object a line with
  ``messages``, a list of ``{"role": "system" | "user" | "assistant", "content": text}``;
- **prompt** JSONL: one object a line with ``prompt`` (text) and optionally ``output_tokens``.

A conversation is its user turns, each with the dataset's answer to it where there is one (the next assistant
turn); a system turn opens the first user message. ``read_dataset`` checks the whole file before anything is
sent: an empty conversation, a turn that is not text, a file in another format is one ``TraceError`` line naming
the file, the line and the problem. ``Dataset.filtered`` keeps conversations whose every turn's prompt and answer
fit the length filters, and ``Dataset.sampled`` draws ``n`` of them, seeded. Lengths here are estimated at 4
characters a token (the usual BPE vocabularies on English text average 3.5-4.5), said as such in the evidence;
the output lengths sent are counted by the lane's own tokenizer (``POST /tokenize``) where it answers
(``loadgen.runner``), else this estimate, or drawn from ``workload.output_tokens`` (``output = "workload"``).

Replay (``loadgen.workload.UserWorkload``): each closed-loop user walks whole conversations, turn by turn: the
first turn's message, then the next user message after the exchange so far (as received), until the
conversation ends or a request fails, then the next conversation drawn; an open-loop rung sends each request a
new conversation's first turn (open arrivals are independent requests).
"""

from __future__ import annotations

import codecs
import json
import math
import random
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from satbench.core.config_files import MAX_TOKENS
from satbench.loadgen.traces import CHUNK_BYTES, InputFile, TraceError, json_line

if TYPE_CHECKING:
    from satbench.loadgen.config import DatasetConfig

__all__ = ["CHARS_PER_TOKEN", "MAX_DATASET_LINE_BYTES", "Conversation", "Dataset", "Turn", "estimate_tokens",
           "load_dataset", "read_dataset"]

CHARS_PER_TOKEN = 4.0
# A conversation of 4M tokens at CHARS_PER_TOKEN, four times the longest context a GGUF model serves (1M): the
# longest JSONL line, or JSON array item, read (more is refused by its line, with no more than this held).
MAX_DATASET_LINE_BYTES = 16 << 20
DATASET_FORMATS = ("auto", "sharegpt", "openai", "prompt")
_USER = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "chatgpt": "assistant",
         "bing": "assistant", "bard": "assistant", "model": "assistant", "system": "system"}


def estimate_tokens(text: str) -> int:
    """A text's length in tokens at ``CHARS_PER_TOKEN`` (at least 1)."""
    return max(1, math.ceil(len(text) / CHARS_PER_TOKEN))


@dataclass(frozen=True, slots=True)
class Turn:
    """One user message and the dataset's answer to it (``None``: none recorded), with the answer's length in
    tokens (``answer_tokens``: counted by the lane's tokenizer, else estimated, else ``None``)."""

    user: str
    answer: str | None = None
    answer_tokens: int | None = None

    @property
    def output_tokens(self) -> int | None:
        if self.answer_tokens is not None:
            return self.answer_tokens
        return None if self.answer is None else estimate_tokens(self.answer)


@dataclass(frozen=True, slots=True)
class Conversation:
    turns: tuple[Turn, ...]
    line: int = 0


@dataclass(frozen=True, slots=True)
class Dataset:
    """A dataset file read and checked (module docstring)."""

    path: str
    format: str
    sha256: str
    size_bytes: int
    conversations: tuple[Conversation, ...]
    read: int = 0  # conversations in the file
    filters: tuple[str, ...] = ()
    sample: int | None = None
    seed: int = 0
    counted_by: str = f"estimate at {CHARS_PER_TOKEN:g} characters a token"

    def filtered(self, *, min_prompt_tokens: int = 1, max_prompt_tokens: int | None = None,
                 max_output_tokens: int | None = None, max_turns: int | None = None) -> Dataset:
        """The conversations whose every turn fits (estimated lengths), cut to ``max_turns`` turns."""
        kept = []
        for conv in self.conversations:
            turns = conv.turns[:max_turns] if max_turns else conv.turns
            prompts = [estimate_tokens(t.user) for t in turns]
            outputs = [t.output_tokens or 0 for t in turns]
            if min(prompts) < min_prompt_tokens or (max_prompt_tokens and max(prompts) > max_prompt_tokens) \
                    or (max_output_tokens and max(outputs) > max_output_tokens):
                continue
            kept.append(replace(conv, turns=turns))
        said = [f"prompt tokens in [{min_prompt_tokens}, {max_prompt_tokens or 'any'}]"]
        if max_output_tokens:
            said.append(f"answer tokens <= {max_output_tokens}")
        if max_turns:
            said.append(f"at most {max_turns} turns")
        if not kept:
            raise TraceError(f"{self.path}: no conversation of {len(self.conversations)} passes the filters "
                             f"({'; '.join(said)}, lengths estimated)")
        return replace(self, conversations=tuple(kept), filters=(*self.filters, *said))

    def sampled(self, n: int | None, seed: int = 0) -> Dataset:
        """``n`` conversations drawn without replacement, seeded (all of them, shuffled alike, for ``None``)."""
        rng = random.Random(f"dataset:{seed}:{self.sha256}")
        order = list(self.conversations)
        rng.shuffle(order)
        return replace(self, conversations=tuple(order[:n] if n else order), sample=n, seed=seed)

    def with_answer_tokens(self, counts: list[list[int | None]], counted_by: str) -> Dataset:
        """The answers' lengths as the lane's tokenizer counted them (one list per conversation, per turn)."""
        convs = tuple(replace(c, turns=tuple(replace(t, answer_tokens=n) for t, n in zip(c.turns, ns, strict=True)))
                      for c, ns in zip(self.conversations, counts, strict=True))
        return replace(self, conversations=convs, counted_by=counted_by)

    def evidence(self) -> dict[str, Any]:
        turns = [t for c in self.conversations for t in c.turns]
        return {"path": self.path, "format": self.format, "sha256": self.sha256, "size_bytes": self.size_bytes,
                "conversations_read": self.read, "conversations_used": len(self.conversations),
                "turns_used": len(turns), "filters": list(self.filters), "sample": self.sample, "seed": self.seed,
                "lengths": f"filters on lengths estimated at {CHARS_PER_TOKEN:g} characters a token; answer "
                           f"lengths sent: {self.counted_by}",
                "synthesised": "nothing: prompts are the dataset's text; a system turn opens the first message"}


def _problem(path: Path, line: int, what: str) -> TraceError:
    return TraceError(f"{path}:{line}: {what}")


_SPACE = re.compile(r"[ \t\r\n\ufeff]*")  # a byte-order mark read as white space


class _ArrayItems:
    """A JSON array's items, read in chunks and decoded one at a time, each with the line it starts on.

    Why not ``json.load``: the whole file's objects at once, and no line to name. Why not ``ijson``: its items
    carry no line either, and it is a dependency for what ``json.JSONDecoder.raw_decode`` does at C speed once
    it is handed a buffer that holds the item. The buffer is the text from the current item on: a chunk is
    read when an item does not decode yet (the held text at least doubled each time, so a long item is decoded
    O(log n) times, linear in all), the consumed text is dropped once it is half the buffer, and the lines are
    counted over each character once. An item longer than ``max_item_chars`` is refused by its line, after
    holding at most that much."""

    def __init__(self, path: Path, src: InputFile, max_item_chars: int) -> None:
        self.path, self.src, self.max_item_chars = path, src, max_item_chars
        self.text = ""
        self.pos = 0
        self.line = 1  # the line of self.pos
        self.eof = False
        self._decoder = codecs.getincrementaldecoder("utf-8")()
        self._json = json.JSONDecoder()

    def _fill(self, at_least: int = 0) -> bool:
        """Appends the next chunk(s) (``at_least`` bytes); False at the end of the file."""
        if self.eof:
            return False
        if self.pos > len(self.text) // 2:  # drop what is consumed, once it is half the buffer
            self.text, self.pos = self.text[self.pos:], 0
        data = self.src.read(max(CHUNK_BYTES, at_least))
        self.eof = not data
        try:
            self.text += self._decoder.decode(data, final=self.eof)
        except UnicodeDecodeError as exc:
            raise _problem(self.path, self.line, f"not UTF-8 text ({exc.reason})") from None
        return not self.eof

    def _advance(self, to: int) -> None:
        self.line += self.text.count("\n", self.pos, to)
        self.pos = to

    def _next_char(self, what: str) -> str:
        """The next character past white space (reading on as needed); ``what`` is refused at the end."""
        while True:
            self._advance(_SPACE.match(self.text, self.pos).end())  # type: ignore[union-attr]
            if self.pos < len(self.text):
                return self.text[self.pos]
            if not self._fill():
                raise _problem(self.path, self.line, what)

    def __iter__(self) -> Iterator[tuple[int, Any]]:
        if self._next_char("no JSON array") != "[":
            raise _problem(self.path, self.line, "not a JSON array")
        self._advance(self.pos + 1)
        if self._next_char("the JSON array is not closed") == "]":
            return
        while True:
            yield self.line, self._item()
            char = self._next_char("the JSON array is not closed")
            if char == "]":
                return
            if char != ",":
                raise _problem(self.path, self.line, f"expected ',' or ']' after an item of the JSON array, got "
                                                     f"{char!r}")
            self._advance(self.pos + 1)
            self._next_char("the JSON array is not closed")

    def _item(self) -> Any:
        while True:
            try:
                item, end = self._json.raw_decode(self.text, self.pos)
            except json.JSONDecodeError as exc:  # the item goes on past the buffer, or is not JSON
                cut = exc.msg.startswith("Unterminated string") or exc.pos >= len(self.text) - 8
                if self.eof or not cut:
                    raise _problem(self.path, self.line + self.text.count("\n", self.pos, exc.pos),
                                   f"not JSON ({exc.msg})") from None
            except RecursionError:
                raise _problem(self.path, self.line, "JSON nested too deep (the decoder's bound is about "
                                                     f"{sys.getrecursionlimit():,} levels; a dataset item nests "
                                                     "at most 4)") from None
            else:
                if end < len(self.text) or self.eof:  # a number cut at the buffer's end may go on
                    self._advance(end)
                    return item
            held = len(self.text) - self.pos
            if held > self.max_item_chars:
                raise _problem(self.path, self.line, f"an item longer than {self.max_item_chars:,} characters "
                                                     "(the dataset line limit)")
            self._fill(held)


def _json_items(path: Path, src: InputFile, max_line_bytes: int) -> Iterator[tuple[int, Any]]:
    """A JSON array's items (streamed: ``_ArrayItems``), or a JSONL file's lines, each with its line."""
    if src.head().lstrip(b" \t\r\n\xef\xbb\xbf").startswith(b"["):
        yield from _ArrayItems(path, src, max_line_bytes)
        return
    for line, row in src.lines(max_line_bytes, "the dataset line limit"):
        if row.strip():
            yield line, json_line(path, line, row, "not a JSON object (a JSONL dataset has one a line)")


def _sniff(path: Path, first: Any) -> str:
    if isinstance(first, dict):
        if "conversations" in first:
            return "sharegpt"
        if "messages" in first:
            return "openai"
        if "prompt" in first:
            return "prompt"
    raise _problem(path, 1, "not a dataset satbench reads: expected ShareGPT JSON (conversations of from/value "
                            "turns), OpenAI chat JSONL (messages of role/content) or prompt JSONL (prompt)")


def _turns(path: Path, line: int, messages: Any, key: str, role_key: str, text_key: str) -> tuple[Turn, ...]:
    if not isinstance(messages, list) or not messages:
        raise _problem(path, line, f"empty conversation ({key} must be a non-empty list of turns)")
    turns: list[Turn] = []
    system = ""
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or not isinstance(msg.get(text_key), str) or msg.get(role_key) not in _USER:
            raise _problem(path, line, f"{key}[{i}] is not a turn: it needs {role_key!r} (one of "
                                       f"{', '.join(sorted(set(_USER)))}) and {text_key!r} text")
        role, text = _USER[msg[role_key]], msg[text_key]
        if role == "system":
            system += text + "\n\n"
        elif role == "user":
            if not turns and system:
                text, system = system + text, ""
            turns.append(Turn(text))
        elif turns and turns[-1].answer is None:
            turns[-1] = replace(turns[-1], answer=text)
    if not turns or not any(t.user.strip() for t in turns):
        raise _problem(path, line, f"empty conversation (no user turn with text in {key})")
    return tuple(turns)


def read_dataset(path: Path | str, fmt: str = "auto", *, max_line_bytes: int | None = None) -> Dataset:
    """Reads and checks a whole dataset file, once (module docstring); ``TraceError`` on the first bad item.
    ``max_line_bytes``: the longest line (or JSON array item) read, ``MAX_DATASET_LINE_BYTES`` by default."""
    path = Path(path)
    if fmt not in DATASET_FORMATS:
        raise TraceError(f"{path}: unknown dataset format {fmt!r} (one of {', '.join(DATASET_FORMATS)})")
    if not path.exists() or path.is_dir():  # a named pipe reads too: each file is read once
        raise TraceError(f"{path}: no such dataset file")
    convs: list[Conversation] = []
    with InputFile(path) as src:
        for line, item in _json_items(path, src, max_line_bytes or MAX_DATASET_LINE_BYTES):
            if fmt == "auto":
                fmt = _sniff(path, item)
            if not isinstance(item, dict):
                raise _problem(path, line, "not a JSON object")
            if fmt == "sharegpt":
                turns = _turns(path, line, item.get("conversations"), "conversations", "from", "value")
            elif fmt == "openai":
                turns = _turns(path, line, item.get("messages"), "messages", "role", "content")
            else:
                prompt, out = item.get("prompt"), item.get("output_tokens")
                if not isinstance(prompt, str) or not prompt.strip():
                    raise _problem(path, line, "prompt must be non-empty text")
                if out is not None and (isinstance(out, bool) or not isinstance(out, int)
                                        or not 1 <= out <= MAX_TOKENS):
                    raise _problem(path, line, f"output_tokens must be a whole number in [1, {MAX_TOKENS:,}] (the "
                                               f"declared limit), got {str(out)[:40]}")
                turns = (Turn(prompt, None, out),)
            convs.append(Conversation(turns, line))
        if not convs:
            raise _problem(path, 1, "no conversation in the dataset")
        digest, size = src.finish()
    return Dataset(str(path), fmt, digest, size, tuple(convs), read=len(convs))


def load_dataset(config: DatasetConfig | None) -> Dataset | None:
    """The configured dataset, read and checked whole, filtered and sampled (``None`` without one)."""
    if config is None:
        return None
    data = read_dataset(config.path, config.format).filtered(
        min_prompt_tokens=config.min_prompt_tokens, max_prompt_tokens=config.max_prompt_tokens,
        max_output_tokens=config.max_output_tokens, max_turns=config.max_turns)
    return data.sampled(config.sample, config.seed)
