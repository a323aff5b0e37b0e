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

import json
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from satbench.loadgen.traces import TraceError, file_digest

if TYPE_CHECKING:
    from satbench.loadgen.config import DatasetConfig

__all__ = ["CHARS_PER_TOKEN", "Conversation", "Dataset", "Turn", "estimate_tokens", "load_dataset", "read_dataset"]

CHARS_PER_TOKEN = 4.0
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


def _json_items(path: Path, text: str) -> Iterator[tuple[int, Any]]:
    """A JSON array's items, or a JSONL file's lines, each with the line it starts on."""
    stripped = text.lstrip()
    if stripped.startswith("["):
        decoder = json.JSONDecoder()
        pos = text.index("[") + 1
        while True:
            while pos < len(text) and text[pos] in " \t\r\n,":
                pos += 1
            if pos >= len(text):
                raise _problem(path, text.count("\n") + 1, "the JSON array is not closed")
            if text[pos] == "]":
                return
            line = text.count("\n", 0, pos) + 1
            try:
                item, pos = decoder.raw_decode(text, pos)
            except json.JSONDecodeError as exc:
                raise _problem(path, line, f"not JSON ({exc.msg})") from None
            yield line, item
    for line, row in enumerate(text.splitlines(), 1):
        if not row.strip():
            continue
        try:
            yield line, json.loads(row)
        except ValueError:
            raise _problem(path, line, "not a JSON object (a JSONL dataset has one a line)") from None


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


def read_dataset(path: Path | str, fmt: str = "auto") -> Dataset:
    """Reads and checks a whole dataset file (module docstring); ``TraceError`` on the first bad item."""
    path = Path(path)
    if fmt not in DATASET_FORMATS:
        raise TraceError(f"{path}: unknown dataset format {fmt!r} (one of {', '.join(DATASET_FORMATS)})")
    if not path.is_file():
        raise TraceError(f"{path}: no such dataset file")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise _problem(path, 1, f"not UTF-8 text ({exc.reason})") from None
    convs: list[Conversation] = []
    for line, item in _json_items(path, text):
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
            if out is not None and (isinstance(out, bool) or not isinstance(out, int) or out < 1):
                raise _problem(path, line, f"output_tokens must be a whole number >= 1, got {out!r}")
            turns = (Turn(prompt, None, out),)
        convs.append(Conversation(turns, line))
    if not convs:
        raise _problem(path, 1, "no conversation in the dataset")
    digest, size = file_digest(path)
    return Dataset(str(path), fmt, digest, size, tuple(convs), read=len(convs))


def load_dataset(config: DatasetConfig | None) -> Dataset | None:
    """The configured dataset, read and checked whole, filtered and sampled (``None`` without one)."""
    if config is None:
        return None
    data = read_dataset(config.path, config.format).filtered(
        min_prompt_tokens=config.min_prompt_tokens, max_prompt_tokens=config.max_prompt_tokens,
        max_output_tokens=config.max_output_tokens, max_turns=config.max_turns)
    return data.sampled(config.sample, config.seed)
