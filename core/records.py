"""The per-request record (one line of ``records.jsonl``) and its durable writer.

This is the contract between the load generator (which writes one record as each request ends) and every
offline consumer (step figures, the recommender's records source, the report). The fields are those of
DESIGN.md; times are Unix seconds from a monotonic clock mapped once to wall time at run start. What the
runtime reused is recorded as it said it (``cached_prompt_tokens``, ``draft_tokens``,
``draft_accepted_tokens``; ``None`` where it said nothing); ``ttft_visible_s`` is the first *visible* token of a
reasoning model's answer (``None`` when the stream had no thinking tokens, so the first token was visible);
an open-loop request (a rate rung, ``core.arrivals``) carries its rung's ``rate_rps`` and the time it was
meant to be sent (``intended_at``), ``None`` both in a closed loop: fields added later have defaults, so older
files still load.

The writer appends and flushes a line per record, so a crash leaves every finished request on disk; it
fsyncs at each step end (``sync()``), so a killed process loses nothing that had ended before the last sync
and at most the OS buffer after it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import IO, Any, Literal

__all__ = [
    "OUTCOMES",
    "PHASES",
    "Outcome",
    "Phase",
    "RecordsWriter",
    "RequestRecord",
    "read_records",
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
        kwargs.setdefault("user", 0)
        kwargs.setdefault("phase", "window")
        kwargs.setdefault("ttft_s", None)
        kwargs.setdefault("e2e_s", None)
        kwargs.setdefault("queue_s", None)
        kwargs.setdefault("prompt_tokens", None)
        kwargs.setdefault("output_tokens", 0)
        return cls(**kwargs)


class RecordsWriter:
    """Appends records to a JSONL file: one flushed line per record, fsync on ``sync()`` and ``close()``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fh: IO[str] | None = path.open("a", encoding="utf-8")
        self.count = 0

    def write(self, record: RequestRecord) -> None:
        if self._fh is None:
            raise ValueError(f"records file {self.path} is closed")
        self._fh.write(record.to_json() + "\n")
        self._fh.flush()
        self.count += 1

    def sync(self) -> None:
        if self._fh is not None:
            self._fh.flush()
            os.fsync(self._fh.fileno())

    def close(self) -> None:
        if self._fh is not None:
            self.sync()
            self._fh.close()
            self._fh = None

    def __enter__(self) -> RecordsWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in fields(RequestRecord))


def read_records(path: Path | str, *, strict: bool = False) -> Iterator[RequestRecord]:
    """Yields the records of a JSONL file. A torn last line (a crash mid-write) is skipped unless ``strict``."""
    with Path(path).open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            line = line.strip()
            if not line:
                continue
            try:
                yield RequestRecord.from_dict(json.loads(line))
            except (ValueError, TypeError) as exc:
                if strict:
                    raise ValueError(f"{path}:{lineno}: {exc}") from exc


def write_records(path: Path, records: Iterable[RequestRecord]) -> None:
    with RecordsWriter(path) as writer:
        for record in records:
            writer.write(record)
