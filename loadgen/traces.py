"""Recorded traffic: request traces read as published, windowed, scaled, and their prompts synthesised.

An answer measured on synthetic lengths, or without the traffic's prefix sharing (so without its prompt-cache
hits), is an answer for another workload. A trace says when each request came and how long it was; replaying
it open-loop (``loadgen.trace_step``) at a speed factor asks "how many times this traffic does one node take".

The formats, with their columns as published:

- **Mooncake** JSONL (kvcache-ai/Mooncake, ``FAST25-release/traces``; the format AIPerf, guidellm and
  sglang replay): one object a line, ``timestamp`` (ms since the first request), ``input_length``,
  ``output_length`` (tokens) and ``hash_ids``, the ids of the prompt's blocks of 512 tokens (a block's id
  depends on the block and every block before it, so an equal leading run of ids is an equal prefix).
- **BurstGPT** CSV (HPMLL/BurstGPT, ``data/BurstGPT_*.csv``): ``Timestamp`` (s since the trace's start),
  ``Model``, ``Request tokens``, ``Response tokens``, ``Total tokens``, ``Log Type``. Its failed requests
  have 0 ``Response tokens``: they are left out, and counted in the evidence.
- **Azure LLM inference** CSV (Azure/AzurePublicDataset, ``AzureLLMInferenceTrace_{code,conv}.csv`` 2023
  and the 2024 week): ``TIMESTAMP`` (a date and time, up to 7 fractional digits), ``ContextTokens``,
  ``GeneratedTokens``.

``read_trace(path)`` checks the whole file before anything is sent: a missing column, a non-number, a
timestamp that goes back, a file in another format is one ``TraceError`` line naming the file, the line and the
problem. ``Trace.window(offset_s, length_s)`` keeps a stretch of it (re-based to 0); ``Trace.offsets(factor)``
are the send times at a speed factor (``t / factor``). The evidence (``Trace.evidence``) is the file's sha256,
size, format, the window and what is synthesised.

Prompts (``TracePrompts``): a trace carries lengths, not text. A block id is always the same text (512 words
drawn from ``(seed, id)`` out of the short common words ``loadgen.workload`` uses, one token each in the usual
vocabularies), so two requests that share leading ids share that many tokens of prompt, and the runtime's
prompt cache sees the reuse the trace recorded; past its ids (BurstGPT and Azure have none) a request's text is
its own (a unique head, then words drawn from its index). ``implied_cache_share`` is what the ids imply an
unbounded prefix cache would hit: each request's leading ids already seen before it, in tokens, over all
prompt tokens.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import random
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from satbench.loadgen.config import TraceConfig

__all__ = ["BLOCK_TOKENS", "FORMATS", "Trace", "TraceError", "TracePrompts", "TraceRequest", "file_digest",
           "load_trace", "read_trace"]

BLOCK_TOKENS = 512  # Mooncake's published traces hash the prompt in blocks of 512 tokens
FORMATS = ("auto", "mooncake", "burstgpt", "azure")

_BURSTGPT = ("Timestamp", "Request tokens", "Response tokens")
_AZURE = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_WORDS = ("the", "of", "and", "to", "in", "is", "for", "on", "with", "as", "at", "by", "from", "it", "an", "be",
          "this", "that", "are", "was", "or", "not", "but", "all", "can", "one", "time", "year", "day", "way", "man",
          "new", "old", "good", "first", "last", "long", "great", "little", "own", "other", "right", "big", "high",
          "small", "large", "next", "early", "young", "few", "public", "bad", "same", "able")


class TraceError(ValueError):
    """A trace (or dataset) file refused: ``FILE:LINE: problem``, one line."""


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One recorded request: its arrival (s since the window's start), its lengths in tokens, its block ids,
    and the line of the file it came from."""

    at_s: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()
    line: int = 0


def file_digest(path: Path) -> tuple[str, int]:
    """The file's sha256 (hex) and size in bytes."""
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


@dataclass(frozen=True, slots=True)
class Trace:
    """A trace file read and checked (module docstring); ``requests`` sorted by arrival, the first at 0."""

    path: str
    format: str
    sha256: str
    size_bytes: int
    requests: tuple[TraceRequest, ...]
    skipped: int = 0  # rows the format says are not requests (BurstGPT's failures)
    offset_s: float = 0.0  # the window's start in the file's own time
    length_s: float | None = None  # the window's length (None: to the end)
    block_tokens: int = BLOCK_TOKENS

    @property
    def duration_s(self) -> float:
        """The window's span: its stated length, else from 0 to the last arrival."""
        if self.length_s is not None:
            return self.length_s
        return self.requests[-1].at_s if self.requests else 0.0

    @property
    def rate_rps(self) -> float:
        """The recorded mean rate: requests over the window's span (speed factor 1)."""
        span = self.duration_s
        n = len(self.requests)
        if span <= 0:
            return float(n)
        return n / span if self.length_s is not None else max(n - 1, 1) / span

    def window(self, offset_s: float = 0.0, length_s: float | None = None) -> Trace:
        """The requests that arrived in ``[offset_s, offset_s + length_s)`` of the file's time, re-based to 0."""
        if offset_s < 0 or (length_s is not None and length_s <= 0):
            raise TraceError(f"{self.path}: the window must start at 0 or later and last more than 0 s "
                             f"(offset {offset_s:g} s, length {length_s} s)")
        end = math.inf if length_s is None else offset_s + length_s
        kept = tuple(replace(r, at_s=r.at_s - offset_s) for r in self.requests if offset_s <= r.at_s < end)
        if not kept:
            raise TraceError(f"{self.path}: no request in the window [{offset_s:g} s, {end:g} s) of a trace of "
                             f"{self.duration_s:g} s")
        return replace(self, requests=kept, offset_s=self.offset_s + offset_s, length_s=length_s)

    def offsets(self, factor: float) -> list[float]:
        """Send offsets at a speed factor: factor 2 sends the window in half its time."""
        if not (factor > 0 and math.isfinite(factor)):
            raise ValueError(f"speed factor must be a positive number, got {factor!r}")
        return [r.at_s / factor for r in self.requests]

    def implied_cache_share(self) -> float:
        """The share of prompt tokens an unbounded prefix cache would hit (module docstring)."""
        seen: set[int] = set()
        hit = total = 0
        for r in self.requests:
            lead = 0
            for h in r.hash_ids:
                if h not in seen:
                    break
                lead += 1
            hit += min(lead * self.block_tokens, max(r.input_tokens - 1, 0))
            total += r.input_tokens
            seen.update(r.hash_ids)
        return hit / total if total else 0.0

    def evidence(self, factor: float | None = None) -> dict[str, Any]:
        """What a reader needs to know which traffic was replayed (the manifest's ``traces`` entry)."""
        out: dict[str, Any] = {
            "path": self.path, "format": self.format, "sha256": self.sha256, "size_bytes": self.size_bytes,
            "window": {"offset_s": self.offset_s, "length_s": self.length_s, "requests": len(self.requests)},
            "recorded_rate_rps": self.rate_rps, "skipped_rows": self.skipped,
            "synthesised": "prompt text: one fixed text of common words per block id (block_tokens each), "
                           "unique text past a request's ids; output lengths as recorded (ignore_eos)",
            "block_tokens": self.block_tokens,
            "implied_cache_share": round(self.implied_cache_share(), 6),
        }
        if factor is not None:
            out["speed_factor"] = factor
        return out


def _problem(path: Path, line: int, what: str) -> TraceError:
    return TraceError(f"{path}:{line}: {what}")


def _count(path: Path, line: int, row: dict[str, Any], key: str, low: int) -> int:
    value = row.get(key)
    if isinstance(value, str):
        try:
            value = float(value) if value.strip() else None
        except ValueError:
            raise _problem(path, line, f"{key} is not a number: {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or value != int(value) or value < low:
        raise _problem(path, line, f"{key} must be a whole number >= {low}, got {value!r}")
    return int(value)


def _seconds(path: Path, line: int, value: Any, key: str, scale: float) -> float:
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise _problem(path, line, f"{key} is not a number: {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise _problem(path, line, f"{key} must be a number >= 0, got {value!r}")
    return float(value) * scale


_AZURE_TIME = re.compile(r"^(\d{4}-\d{2}-\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(?:Z|[+-]\d{2}:?\d{2})?$")


def _azure_time(path: Path, line: int, value: str) -> float:
    """Azure's ``TIMESTAMP`` (``2023-11-16 18:15:46.6805900``) as seconds since the epoch, naive as UTC."""
    m = _AZURE_TIME.match(value.strip())
    if not m:
        raise _problem(path, line, f"TIMESTAMP is not a date and time: {value!r}")
    day = datetime.fromisoformat(m.group(1)).timestamp()
    fraction = float("0." + m.group(5)) if m.group(5) else 0.0
    return day + int(m.group(2)) * 3600 + int(m.group(3)) * 60 + int(m.group(4)) + fraction


def _sniff(path: Path) -> str:
    with path.open(encoding="utf-8", errors="replace") as fh:
        head = fh.readline().strip()
    if head.startswith("{"):
        return "mooncake"
    columns = {c.strip() for c in head.split(",")}
    if "ContextTokens" in columns or "TIMESTAMP" in columns:
        return "azure"
    if "Request tokens" in columns or "Timestamp" in columns:
        return "burstgpt"
    raise _problem(path, 1, "not a trace satbench reads: expected Mooncake JSONL (timestamp, input_length, "
                            "output_length, hash_ids), a BurstGPT CSV header (Timestamp, Request tokens, Response "
                            "tokens) or an Azure LLM trace CSV header (TIMESTAMP, ContextTokens, GeneratedTokens)")


def _mooncake(path: Path) -> Iterator[tuple[int, float, int, int, tuple[int, ...]]]:
    with path.open(encoding="utf-8") as fh:
        for line, text in enumerate(fh, 1):
            if not text.strip():
                continue
            try:
                row = json.loads(text)
            except ValueError:
                raise _problem(path, line, "not a JSON object (a Mooncake trace has one a line)") from None
            if not isinstance(row, dict):
                raise _problem(path, line, "not a JSON object (a Mooncake trace has one a line)")
            for key in ("timestamp", "input_length", "output_length"):
                if key not in row:
                    raise _problem(path, line, f"missing {key!r} (a Mooncake line has timestamp, input_length, "
                                               "output_length and hash_ids)")
            ids = row.get("hash_ids", [])
            if not isinstance(ids, list) or any(isinstance(h, bool) or not isinstance(h, int) for h in ids):
                raise _problem(path, line, f"hash_ids must be a list of whole numbers, got {ids!r}"[:200])
            yield (line, _seconds(path, line, row["timestamp"], "timestamp", 1e-3),
                   _count(path, line, row, "input_length", 1), _count(path, line, row, "output_length", 1),
                   tuple(ids))


def _csv_rows(path: Path, columns: Sequence[str], name: str) -> Iterator[tuple[int, dict[str, str]]]:
    with path.open(encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        header = [c.strip() for c in reader.fieldnames or ()]
        missing = [c for c in columns if c not in header]
        if missing:
            raise _problem(path, 1, f"missing column {missing[0]!r} of a {name} trace (header: {', '.join(header)})")
        reader.fieldnames = header
        for row in reader:
            yield reader.line_num, row


def _burstgpt(path: Path) -> Iterator[tuple[int, float, int, int, tuple[int, ...]]]:
    for line, row in _csv_rows(path, _BURSTGPT, "BurstGPT"):
        out = _count(path, line, row, "Response tokens", 0)
        yield (line, _seconds(path, line, row["Timestamp"], "Timestamp", 1.0),
               _count(path, line, row, "Request tokens", 1), out, ())


def _azure(path: Path) -> Iterator[tuple[int, float, int, int, tuple[int, ...]]]:
    for line, row in _csv_rows(path, _AZURE, "Azure LLM inference"):
        yield (line, _azure_time(path, line, row["TIMESTAMP"] or ""), _count(path, line, row, "ContextTokens", 1),
               _count(path, line, row, "GeneratedTokens", 0), ())


def read_trace(path: Path | str, fmt: str = "auto") -> Trace:
    """Reads and checks a whole trace file (module docstring); ``TraceError`` on the first bad line."""
    path = Path(path)
    if fmt not in FORMATS:
        raise TraceError(f"{path}: unknown trace format {fmt!r} (one of {', '.join(FORMATS)})")
    if not path.is_file():
        raise TraceError(f"{path}: no such trace file")
    fmt = _sniff(path) if fmt == "auto" else fmt
    rows = {"mooncake": _mooncake, "burstgpt": _burstgpt, "azure": _azure}[fmt](path)
    requests: list[TraceRequest] = []
    skipped = 0
    last: tuple[int, float] | None = None
    try:
        for line, at, n_in, n_out, ids in rows:
            if last is not None and at < last[1]:
                raise _problem(path, line, f"timestamp goes back ({at - last[1]:+.3f} s after line {last[0]}): a "
                                           "trace must be sorted by arrival")
            last = (line, at)
            if n_out == 0:  # BurstGPT's failed requests (and Azure's empty answers): nothing to replay
                skipped += 1
                continue
            requests.append(TraceRequest(at, n_in, n_out, ids, line))
    except UnicodeDecodeError as exc:
        raise _problem(path, 1, f"not UTF-8 text ({exc.reason})") from None
    if not requests:
        raise _problem(path, 1, "no request in the trace")
    first = requests[0].at_s
    digest, size = file_digest(path)
    return Trace(str(path), fmt, digest, size, tuple(replace(r, at_s=r.at_s - first) for r in requests), skipped)


class TracePrompts:
    """Prompt text for a trace's requests (module docstring): ``prompt(request, index)`` has the request's input
    length in words (less ``bos``, the runtime's own start token), its leading blocks the text of its ids."""

    def __init__(self, seed: int = 0, block_tokens: int = BLOCK_TOKENS, bos: int = 1) -> None:
        self.seed = seed
        self.block_tokens = block_tokens
        self.bos = bos
        self._blocks: dict[int, list[str]] = {}

    def block(self, block_id: int) -> list[str]:
        words = self._blocks.get(block_id)
        if words is None:
            if len(self._blocks) >= 4096:  # a long window: keep the memory bounded (the text is redrawn alike)
                self._blocks.clear()
            rng = random.Random(f"trace-block:{self.seed}:{block_id}")
            words = self._blocks[block_id] = [rng.choice(_WORDS) for _ in range(self.block_tokens)]
        return words

    def prompt(self, request: TraceRequest, index: int) -> str:
        n = max(1, request.input_tokens - self.bos)
        words: list[str] = []
        for h in request.hash_ids:
            if len(words) >= n:
                break
            words += self.block(h)
        if len(words) < n:  # past its ids the request is its own: a unique head, then its own words
            rng = random.Random(f"trace-tail:{self.seed}:{index}")
            words += [f"q{index}"] + [rng.choice(_WORDS) for _ in range(n - len(words) - 1)]
        return " ".join(words[:n])


def load_trace(config: TraceConfig | None) -> Trace | None:
    """The configured trace's window, read and checked whole (``None`` without one)."""
    if config is None:
        return None
    return read_trace(config.path, config.format).window(config.offset_s, config.length_s)
