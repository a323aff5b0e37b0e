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
problem. The file is read once (``InputFile``: parsed, hashed and measured in the same pass) and within declared
bounds, so a hostile file is refused in one line with memory bounded: a line of at most ``MAX_TRACE_LINE_BYTES``
(read with a bounded ``readline``, never whole), a CSV field within the csv module's ``field_size_limit``, JSON
nested no deeper than the decoder's recursion bound, lengths in ``[1, MAX_TOKENS]`` tokens
(``core.config_files``), timestamps within ``MAX_TRACE_SPAN_S`` of the first, block ids of 64 bits.
``Trace.window(offset_s, length_s)`` keeps a stretch of it (re-based to 0); ``Trace.offsets(factor)`` are the send
times at a speed factor (``t / factor``). The evidence (``Trace.evidence``) is the file's sha256,
size, format, the window and what is synthesised.

Prompts (``TracePrompts``): a trace carries lengths, not text. Within a replay a block id is always the same
text (a word of its own, 8 hex digits of a digest of the replay's nonce and the id, then 511 words drawn from
``(seed, nonce, id)`` out of the short common words ``loadgen.workload`` uses, one token each in the usual
vocabularies), so two requests that share leading ids share exactly that many tokens of prompt (the next block
differs at its first token), and the runtime's prompt cache sees the reuse the trace recorded and nothing
more; past its ids (BurstGPT and Azure have none) a request's text is its own (a unique head, then words drawn
from its index). ``replay(key)`` is the text of another replay (a new run, lane, speed factor or pass over the
window: ``loadgen.trace_step``): every block new, as the trace's sharing is the recorded traffic's within its
window, not with an earlier replay a runtime's cache still holds. ``implied_cache_share`` is what the ids imply
an unbounded prefix cache would hit: each request's leading ids already seen before it, in tokens, over all
prompt tokens.
"""

from __future__ import annotations

import csv
import hashlib
import io
import itertools
import json
import math
import random
import re
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from satbench.core.config_files import MAX_TOKENS, MAX_TRACE_SPAN_S

if TYPE_CHECKING:
    from satbench.loadgen.config import TraceConfig

__all__ = ["BLOCK_TOKENS", "CHUNK_BYTES", "FORMATS", "MAX_TRACE_LINE_BYTES", "MAX_TRACE_SPAN_S", "InputFile", "Trace",
           "TraceError", "TracePrompts", "TraceRequest", "json_line", "load_trace", "read_trace"]

BLOCK_TOKENS = 512  # Mooncake's published traces hash the prompt in blocks of 512 tokens
CHUNK_BYTES = 1 << 20  # what one read takes from a file
# The longest Mooncake line a request of MAX_TOKENS makes (32,768 block ids of up to 20 digits) is about 700 KB;
# a CSV trace's line is under 100 bytes.
MAX_TRACE_LINE_BYTES = 1 << 20
_ID_BOUND = 1 << 63
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


class InputFile:
    """A trace or dataset file read once, front to back, in bounded pieces, hashed as it is read.

    The readers take their lines (``lines``) or chunks (``read``) from here, so a file is opened once, its
    sha256 and size are the bytes the parser saw (``finish`` reads whatever the parser left and returns them),
    and no piece is larger than its caller's bound: ``lines(max_line_bytes)`` reads each line with
    ``readline(limit)`` and refuses a longer one by its number, never holding more than the limit."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._fh = io.BufferedReader(io.FileIO(path, "rb"), buffer_size=CHUNK_BYTES)
        except OSError as exc:
            raise TraceError(f"{path}: cannot read ({exc.strerror or exc})") from None
        self._digest = hashlib.sha256()
        self.size = 0

    def __enter__(self) -> InputFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self._fh.close()

    def head(self) -> bytes:
        """The file's first bytes (up to ``CHUNK_BYTES``), without consuming them."""
        return self._fh.peek(CHUNK_BYTES)[:CHUNK_BYTES]

    def read(self, n: int) -> bytes:
        data = self._fh.read(n)
        self._digest.update(data)
        self.size += len(data)
        return data

    def lines(self, max_line_bytes: int, what: str) -> Iterator[tuple[int, str]]:
        """Each line (1-based number, text with its newline), decoded; ``TraceError`` names a line longer than
        ``max_line_bytes`` (``what``: the limit's name in the message) or one that is not UTF-8."""
        number = 0
        while True:
            raw = self._fh.readline(max_line_bytes + 1)
            if not raw:
                return
            number += 1
            self._digest.update(raw)
            self.size += len(raw)
            if len(raw) > max_line_bytes and not raw.endswith(b"\n"):
                raise _problem(self.path, number, f"line longer than {max_line_bytes:,} bytes ({what})")
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise _problem(self.path, number, f"not UTF-8 text ({exc.reason})") from None
            yield number, text.removeprefix("\ufeff") if number == 1 else text

    def finish(self) -> tuple[str, int]:
        """Reads what the parser left (bounded chunks) and returns the whole file's sha256 (hex) and size."""
        while self.read(CHUNK_BYTES):
            pass
        return self._digest.hexdigest(), self.size


def json_line(path: Path, line: int, text: str, what: str) -> Any:
    """One JSON value of a line; ``TraceError`` (``what``: its message) for bad JSON, or for JSON nested deeper than
    the decoder's recursion bound (``sys.getrecursionlimit()``, 1,000 levels by default; no input satbench
    reads nests more than 4)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise _problem(path, line, "JSON nested too deep (the decoder's bound is about "
                                   f"{sys.getrecursionlimit():,} levels; an input line nests at most 4)") from None
    except ValueError:
        raise _problem(path, line, what) from None


def _count(path: Path, line: int, row: dict[str, Any], key: str, low: int) -> int:
    value = row.get(key)
    if isinstance(value, str):
        try:
            value = float(value) if value.strip() else None
        except ValueError:
            raise _problem(path, line, f"{key} is not a number: {_shown(value)}") from None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or value != int(value) or not low <= value <= MAX_TOKENS:
        raise _problem(path, line, f"{key} must be a whole number in [{low}, {MAX_TOKENS:,}] tokens (the declared "
                                   f"limit), got {_shown(value)}")
    return int(value)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _seconds(path: Path, line: int, value: Any, key: str, scale: float) -> float:
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise _problem(path, line, f"{key} is not a number: {_shown(value)}") from None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or not 0 <= value * scale <= MAX_TRACE_SPAN_S:
        raise _problem(path, line, f"{key} must be a number in [0, {MAX_TRACE_SPAN_S / scale:g}] (at most "
                                   f"{MAX_TRACE_SPAN_S / 86400:g} days from the trace's start), got {_shown(value)}")
    return float(value) * scale


_AZURE_TIME = re.compile(r"^(\d{4}-\d{2}-\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(?:Z|[+-]\d{2}:?\d{2})?$")


def _azure_time(path: Path, line: int, value: str) -> float:
    """Azure's ``TIMESTAMP`` (``2023-11-16 18:15:46.6805900``) as seconds since the epoch, naive as UTC."""
    m = _AZURE_TIME.match(value.strip())
    hours, minutes, secs = (int(m.group(i)) for i in (2, 3, 4)) if m else (0, 0, 0)
    try:
        if not m or hours > 23 or minutes > 59 or secs > 60:
            raise ValueError
        day = datetime.fromisoformat(m.group(1)).replace(tzinfo=UTC).timestamp()
    except (ValueError, OverflowError):
        raise _problem(path, line, f"TIMESTAMP is not a date and time: {_shown(value)}") from None
    fraction = float("0." + m.group(5)) if m.group(5) else 0.0
    return day + hours * 3600 + minutes * 60 + secs + fraction


def _sniff(path: Path, head: str) -> str:
    head = head.strip()
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


Rows = Iterator[tuple[int, float, int, int, tuple[int, ...]]]
Lines = Iterator[tuple[int, str]]


def _mooncake(path: Path, lines: Lines) -> Rows:
    for line, text in lines:
        if not text.strip():
            continue
        row = json_line(path, line, text, "not a JSON object (a Mooncake trace has one a line)")
        if not isinstance(row, dict):
            raise _problem(path, line, "not a JSON object (a Mooncake trace has one a line)")
        for key in ("timestamp", "input_length", "output_length"):
            if key not in row:
                raise _problem(path, line, f"missing {key!r} (a Mooncake line has timestamp, input_length, "
                                           "output_length and hash_ids)")
        ids = row.get("hash_ids", [])
        if not isinstance(ids, list) or len(ids) > MAX_TOKENS // BLOCK_TOKENS \
                or any(isinstance(h, bool) or not isinstance(h, int) or not -_ID_BOUND <= h < _ID_BOUND for h in ids):
            raise _problem(path, line, f"hash_ids must be a list of whole numbers (at most "
                                       f"{MAX_TOKENS // BLOCK_TOKENS:,}, each of 64 bits), got {_shown(ids)}")
        yield (line, _seconds(path, line, row["timestamp"], "timestamp", 1e-3),
               _count(path, line, row, "input_length", 1), _count(path, line, row, "output_length", 1),
               tuple(ids))


def _csv_rows(path: Path, lines: Lines, columns: Sequence[str], name: str) -> Iterator[tuple[int, dict[str, str]]]:
    """The rows of a CSV trace, each record (a quoted field may span lines) at most ``MAX_TRACE_LINE_BYTES``
    characters, each field within the csv module's ``field_size_limit`` (128 KiB by default)."""
    held = at = 0

    def bounded() -> Iterator[str]:
        nonlocal held, at
        for number, text in lines:
            held += len(text)
            at = number
            if held > MAX_TRACE_LINE_BYTES:
                raise _problem(path, number, f"a CSV record longer than {MAX_TRACE_LINE_BYTES:,} characters "
                                             "(the trace line limit)")
            yield text

    reader = csv.DictReader(bounded())
    try:
        header = [c.strip() for c in reader.fieldnames or ()]
        missing = [c for c in columns if c not in header]
        if missing:
            raise _problem(path, 1, f"missing column {missing[0]!r} of a {name} trace (header: "
                                    f"{_shown(', '.join(header))})")
        reader.fieldnames = header
        for row in reader:
            held = 0
            yield reader.line_num, row
    except csv.Error as exc:  # a field past the csv module's field_size_limit (128 KiB by default) among others
        raise _problem(path, at, f"not CSV ({exc})") from None


def _burstgpt(path: Path, lines: Lines) -> Rows:
    for line, row in _csv_rows(path, lines, _BURSTGPT, "BurstGPT"):
        out = _count(path, line, row, "Response tokens", 0)
        yield (line, _seconds(path, line, row["Timestamp"], "Timestamp", 1.0),
               _count(path, line, row, "Request tokens", 1), out, ())


def _azure(path: Path, lines: Lines) -> Rows:
    for line, row in _csv_rows(path, lines, _AZURE, "Azure LLM inference"):
        yield (line, _azure_time(path, line, row["TIMESTAMP"] or ""), _count(path, line, row, "ContextTokens", 1),
               _count(path, line, row, "GeneratedTokens", 0), ())


def read_trace(path: Path | str, fmt: str = "auto") -> Trace:
    """Reads and checks a whole trace file, once (module docstring); ``TraceError`` on the first bad line."""
    path = Path(path)
    if fmt not in FORMATS:
        raise TraceError(f"{path}: unknown trace format {fmt!r} (one of {', '.join(FORMATS)})")
    if not path.exists() or path.is_dir():  # a named pipe reads too: each file is read once
        raise TraceError(f"{path}: no such trace file")
    requests: list[TraceRequest] = []
    skipped = 0
    last: tuple[int, float] | None = None
    start = 0.0
    with InputFile(path) as src:
        lines = src.lines(MAX_TRACE_LINE_BYTES, "the trace line limit")
        first = next(lines, None)
        fmt = _sniff(path, "" if first is None else first[1]) if fmt == "auto" else fmt
        rows = {"mooncake": _mooncake, "burstgpt": _burstgpt, "azure": _azure}[fmt](
            path, itertools.chain([first] if first is not None else [], lines))
        for line, at, n_in, n_out, ids in rows:
            if last is not None and at < last[1]:
                raise _problem(path, line, f"timestamp goes back ({at - last[1]:+.3f} s after line {last[0]}): a "
                                           "trace must be sorted by arrival")
            start = at if last is None else start
            if at - start > MAX_TRACE_SPAN_S:
                raise _problem(path, line, f"timestamp {at - start:.6g} s after the first line's: a trace spans at "
                                           f"most {MAX_TRACE_SPAN_S / 86400:g} days (the declared limit)")
            last = (line, at)
            if n_out == 0:  # BurstGPT's failed requests (and Azure's empty answers): nothing to replay
                skipped += 1
                continue
            requests.append(TraceRequest(at, n_in, n_out, ids, line))
        if not requests:
            raise _problem(path, 1, "no request in the trace")
        digest, size = src.finish()
    first_at = requests[0].at_s
    return Trace(str(path), fmt, digest, size, tuple(replace(r, at_s=r.at_s - first_at) for r in requests), skipped)


class TracePrompts:
    """Prompt text for a trace's requests (module docstring): ``prompt(request, index)`` has the request's input
    length in words (less ``bos``, the runtime's own start token), its leading blocks the text of its ids;
    ``nonce`` names the replay (``replay``)."""

    def __init__(self, seed: int = 0, block_tokens: int = BLOCK_TOKENS, bos: int = 1, nonce: str = "") -> None:
        self.seed = seed
        self.block_tokens = block_tokens
        self.bos = bos
        self.nonce = nonce
        self._blocks: dict[int, list[str]] = {}

    def replay(self, key: str) -> TracePrompts:
        """The prompts of another replay (module docstring): the same lengths, every block's text new."""
        return TracePrompts(self.seed, self.block_tokens, self.bos, f"{self.nonce}/{key}")

    def _word(self, what: str, n: int) -> str:
        return hashlib.blake2b(f"{self.seed}|{self.nonce}|{what}{n}".encode(), digest_size=4).hexdigest()

    def block(self, block_id: int) -> list[str]:
        words = self._blocks.get(block_id)
        if words is None:
            if len(self._blocks) >= 4096:  # a long window: keep the memory bounded (the text is redrawn alike)
                self._blocks.clear()
            rng = random.Random(f"trace-block:{self.seed}:{self.nonce}:{block_id}")
            words = [self._word("b", block_id)] + [rng.choice(_WORDS) for _ in range(self.block_tokens - 1)]
            self._blocks[block_id] = words
        return words

    def prompt(self, request: TraceRequest, index: int) -> str:
        n = max(1, request.input_tokens - self.bos)
        words: list[str] = []
        for h in request.hash_ids:
            if len(words) >= n:
                break
            words += self.block(h)
        if len(words) < n:  # past its ids the request is its own: a unique head, then its own words
            rng = random.Random(f"trace-tail:{self.seed}:{self.nonce}:{index}")
            words += [self._word("q", index)] + [rng.choice(_WORDS) for _ in range(n - len(words) - 1)]
        return " ".join(words[:n])


def load_trace(config: TraceConfig | None) -> Trace | None:
    """The configured trace's window, read and checked whole (``None`` without one)."""
    if config is None:
        return None
    return read_trace(config.path, config.format).window(config.offset_s, config.length_s)
