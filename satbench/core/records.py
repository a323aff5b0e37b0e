"""The per-request record (one line of ``records.jsonl``) and its durable writer.

This is the contract between the load generator (which writes one record as each request ends) and every
offline consumer (step figures, the recommender's records source, the report). The fields are those of
DESIGN.md; times are Unix seconds from a monotonic clock mapped once to wall time at run start. What the
runtime reused is recorded as it said it (``cached_prompt_tokens``, ``draft_tokens``,
``draft_accepted_tokens``; ``None`` where it said nothing); ``ttft_visible_s`` is the first *visible* token of a
reasoning model's answer (``None`` when the stream had no thinking tokens, so the first token was visible);
an open-loop request (a rate rung, ``core.arrivals``) carries its rung's ``rate_rps`` and the time it was
meant to be sent (``intended_at``), ``None`` both in a closed loop; ``event_tokens`` is how many tokens each
content event carried as the runtime counted them (its cumulative count per event, or the event's token ids;
``core.sse``), ``None`` where every event carried one or the runtime did not say (``core.step_figures`` then
spreads the server's final count over the events): fields added later have defaults, so older files still
load.

The writer appends a whole line per record in one unbuffered write, so a crash leaves every finished request
on disk; it fsyncs at each step end (``sync()``), so a killed process loses nothing that had ended before the
last sync and at most the OS buffer after it. A write that fails (a full disk: ``ENOSPC``) may have put part
of its line on disk: the writer cuts the file back to its last whole line and raises ``RecordsNotWritten``
from then on, so the file stays every whole record and nothing torn, and the walk can end marked partial
(``core.manifest``). The write itself is injected (``os.write`` by default): a test fills the disk after N
bytes without filling one.

A reader cuts what is not a whole record: a last line without its newline (a process killed mid-write, a
disk that filled before the writer could cut it back) and any line that is not a record. ``read_records_file``
says what it cut (``RecordsRead.cut_lines``, ``cut_bytes``) so every reader can say it; the file is never
rewritten by a reader (a run folder is evidence).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

__all__ = [
    "OUTCOMES",
    "PHASES",
    "Outcome",
    "Phase",
    "RecordsNotWritten",
    "RecordsRead",
    "RecordsWriter",
    "RequestRecord",
    "read_records",
    "read_records_file",
    "write_records",
]

Outcome = Literal["ok", "http_error", "timeout", "dropped", "malformed", "refused"]
Phase = Literal["warmup", "window", "drain"]
OUTCOMES: tuple[Outcome, ...] = ("ok", "http_error", "timeout", "dropped", "malformed", "refused")
PHASES: tuple[Phase, ...] = ("warmup", "window", "drain")


_GAPS_SLOT = "\x00gaps\x00"
_GAPS_SLOT_JSON = json.dumps(_GAPS_SLOT)
_GAP_FORMAT = "{:.7f}".format


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One request as the client saw it. ``None`` means not measured (e.g. no first token arrived)."""

    run_id: str
    lane: str
    concurrency: int
    user: int
    request_id: str
    phase: Phase
    sent_at: float
    ttft_s: float | None
    e2e_s: float | None
    queue_s: float | None
    itl_s: tuple[float, ...]
    prompt_tokens: int | None
    output_tokens: int
    outcome: Outcome
    status: int | None = None
    error: str | None = None
    retried: bool = False
    cached_prompt_tokens: int | None = None
    draft_tokens: int | None = None
    draft_accepted_tokens: int | None = None
    ttft_visible_s: float | None = None
    rate_rps: float | None = None
    intended_at: float | None = None
    event_tokens: tuple[int, ...] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"

    @property
    def first_token_at(self) -> float | None:
        return None if self.ttft_s is None else self.sent_at + self.ttft_s

    @property
    def ended_at(self) -> float | None:
        return None if self.e2e_s is None else self.sent_at + self.e2e_s

    def token_times(self) -> list[float]:
        """Arrival times (Unix seconds) of every content token: the first one, then each gap after it."""
        first = self.first_token_at
        if first is None:
            return []
        times = [first]
        t = first
        for gap in self.itl_s:
            t += gap
            times.append(t)
        return times

    @property
    def lag_s(self) -> float:
        """How late the request was sent against its schedule (0 in a closed loop)."""
        return 0.0 if self.intended_at is None else max(0.0, self.sent_at - self.intended_at)

    @property
    def tpot_s(self) -> float | None:
        if self.e2e_s is None or self.ttft_s is None or self.output_tokens < 2:
            return None
        return (self.e2e_s - self.ttft_s) / (self.output_tokens - 1)

    def to_json(self) -> str:
        """One JSON line. The writer's hot path: no ``asdict`` deep copy, and the gaps are formatted with
        ``{:.7f}`` (0.1 us resolution) and spliced in, three times cheaper than ``json.dumps`` of rounded
        floats."""
        data = {name: getattr(self, name) for name in _FIELD_NAMES}
        data["itl_s"] = _GAPS_SLOT
        if not self.extra:
            data.pop("extra")
        if self.event_tokens is None:
            data.pop("event_tokens")
        gaps = "[" + ",".join(map(_GAP_FORMAT, self.itl_s)) + "]"
        return json.dumps(data, separators=(",", ":")).replace(_GAPS_SLOT_JSON, gaps, 1)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RequestRecord:
        known = {f.name for f in fields(cls)}
        missing = [n for n in ("run_id", "lane", "concurrency", "request_id", "sent_at", "outcome") if n not in data]
        if missing:
            raise ValueError(f"record lacks field(s) {', '.join(missing)}")
        kwargs = {k: v for k, v in data.items() if k in known}
        kwargs["itl_s"] = tuple(float(g) for g in data.get("itl_s") or ())
        if data.get("event_tokens") is not None:
            kwargs["event_tokens"] = tuple(int(n) for n in data["event_tokens"])
        kwargs.setdefault("user", 0)
        kwargs.setdefault("phase", "window")
        kwargs.setdefault("ttft_s", None)
        kwargs.setdefault("e2e_s", None)
        kwargs.setdefault("queue_s", None)
        kwargs.setdefault("prompt_tokens", None)
        kwargs.setdefault("output_tokens", 0)
        return cls(**kwargs)


class RecordsNotWritten(OSError):
    """A record could not be written (a full disk): the file holds every record before it, whole."""


class RecordsWriter:
    """Appends records to a JSONL file: one whole line per record in one write, fsync on ``sync()`` and
    ``close()``; ``write`` is the syscall (``os.write``), injected by tests that fill the disk."""

    def __init__(self, path: Path, *, write: Callable[[int, memoryview], int] = os.write) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._write = write
        self._whole = os.fstat(self._fd).st_size  # where the last whole line ends
        self.failed: RecordsNotWritten | None = None
        self.count = 0

    def write(self, record: RequestRecord) -> None:
        if self.failed is not None:
            raise self.failed
        if self._fd is None:
            raise ValueError(f"records file {self.path} is closed")
        data = (record.to_json() + "\n").encode()
        view = memoryview(data)
        try:
            while view:
                view = view[self._write(self._fd, view):]
        except OSError as exc:
            self.failed = self._cut_back(exc)
            raise self.failed from exc
        self._whole += len(data)
        self.count += 1

    def _cut_back(self, exc: OSError) -> RecordsNotWritten:
        """Cuts the file back to its last whole line (what the failed write put there is torn)."""
        cut = "its last whole line kept"
        try:
            assert self._fd is not None
            os.ftruncate(self._fd, self._whole)
        except OSError as again:
            cut = f"its torn tail could not be cut ({again.strerror or again}): readers cut it"
        why = exc.strerror or str(exc)
        return RecordsNotWritten(exc.errno, f"{self.path.name}: {why} after {self.count} records ({cut})")

    def sync(self) -> None:
        if self._fd is not None and self.failed is None:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd is not None:
            try:
                self.sync()
            finally:
                os.close(self._fd)
                self._fd = None

    def __enter__(self) -> RecordsWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in fields(RequestRecord))


@dataclass(frozen=True, slots=True)
class RecordsRead:
    """A records file read whole: its records, and what was cut (module docstring)."""

    records: list[RequestRecord]
    cut_lines: int = 0  # lines that were not a whole record: a torn last line, a malformed one
    cut_bytes: int = 0
    torn_tail: bool = False  # the last line had no newline: the writer was stopped mid-line

    def said(self, name: str = "records.jsonl") -> str | None:
        """One line saying what was cut, or None when nothing was."""
        if not self.cut_lines:
            return None
        torn = "a torn last line" if self.torn_tail else "no torn line"
        return (f"{name}: {self.cut_lines} line(s), {self.cut_bytes} bytes cut ({torn}; "
                f"{len(self.records)} whole records read)")


def _scan(path: Path | str, strict: bool, tally: list[int]) -> Iterator[RequestRecord]:
    """The records of ``path``, counting into ``tally`` (lines cut, bytes cut, torn tail) what is not one."""
    with Path(path).open("rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            line = raw.strip()
            if not line:
                continue
            whole = raw.endswith(b"\n")
            try:
                if not whole:
                    raise ValueError("torn last line (no newline: its writer was stopped mid-line)")
                yield RequestRecord.from_dict(json.loads(line))
            except (ValueError, TypeError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
                if strict:
                    raise ValueError(f"{path}:{lineno}: {exc}") from exc
                tally[0] += 1
                tally[1] += len(raw)
                tally[2] = int(not whole)


def read_records(path: Path | str, *, strict: bool = False) -> Iterator[RequestRecord]:
    """Yields the records of a JSONL file, cutting what is not a whole record unless ``strict``
    (``read_records_file`` says what it cut)."""
    yield from _scan(path, strict, [0, 0, 0])


def read_records_file(path: Path | str) -> RecordsRead:
    """Every whole record of ``path`` and what was cut (module docstring)."""
    tally = [0, 0, 0]
    records = list(_scan(path, False, tally))
    return RecordsRead(records, cut_lines=tally[0], cut_bytes=tally[1], torn_tail=bool(tally[2]))


def write_records(path: Path, records: Iterable[RequestRecord]) -> None:
    with RecordsWriter(path) as writer:
        for record in records:
            writer.write(record)
