"""A records file cut mid-line (a kill, a full disk) keeps every whole record, and what is cut is said.

The truth is the file the test wrote itself: which lines are whole, how many bytes the torn tail has, and, for
the full disk, the byte at which the injected write stops (``OSError(ENOSPC)`` after N bytes), from which the
records that fit whole are counted here, not by the writer.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from satbench.core.records import RecordsNotWritten, RecordsWriter, RequestRecord, read_records, read_records_file


def _record(i: int) -> RequestRecord:
    return RequestRecord(run_id="r", lane="dense", concurrency=2, user=i % 2, request_id=f"q{i}", phase="window",
                         sent_at=1000.0 + i, ttft_s=0.05, e2e_s=0.3, queue_s=0.0, itl_s=(0.01,) * (i % 5 + 1),
                         prompt_tokens=64, output_tokens=i % 5 + 2, outcome="ok", status=200)


def test_a_torn_last_line_is_cut_and_said(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    lines = [_record(i).to_json() + "\n" for i in range(5)]
    torn = _record(5).to_json()[:57]  # a process killed mid-write
    path.write_text("".join(lines) + torn)
    read = read_records_file(path)
    assert [r.request_id for r in read.records] == [f"q{i}" for i in range(5)]
    assert (read.cut_lines, read.cut_bytes, read.torn_tail) == (1, 57, True)
    said = read.said()
    assert said is not None and "1 line(s), 57 bytes cut" in said and "a torn last line" in said
    assert "5 whole records" in said
    assert path.read_text().endswith(torn)  # a reader never rewrites the evidence
    with pytest.raises(ValueError, match=r"records.jsonl:6: torn last line"):
        list(read_records(path, strict=True))


def test_a_last_line_that_parses_but_has_no_newline_is_torn_too(tmp_path: Path) -> None:
    # the writer's line is JSON then a newline in one write: JSON without its newline was stopped mid-write
    path = tmp_path / "records.jsonl"
    last = _record(1).to_json()
    path.write_text(_record(0).to_json() + "\n" + last)
    read = read_records_file(path)
    assert len(read.records) == 1 and (read.cut_lines, read.cut_bytes) == (1, len(last))


def test_a_whole_file_says_nothing_and_a_bad_middle_line_is_counted(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    path.write_text("".join(_record(i).to_json() + "\n" for i in range(3)))
    whole = read_records_file(path)
    assert len(whole.records) == 3 and whole.said() is None
    path.write_text(_record(0).to_json() + "\n" + "\x00\x00{not json\n" + _record(1).to_json() + "\n")
    bad = read_records_file(path)
    assert len(bad.records) == 2 and (bad.cut_lines, bad.cut_bytes, bad.torn_tail) == (1, 12, False)


class FullDisk:
    """``os.write`` on a disk with ``room`` bytes left: a write past it puts what fits, then ENOSPC."""

    def __init__(self, room: int) -> None:
        self.room = room

    def __call__(self, fd: int, data: memoryview) -> int:
        if self.room <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        part = bytes(data[: self.room])
        self.room -= len(part)
        return os.write(fd, part)


def test_a_full_disk_keeps_every_whole_record_and_nothing_torn(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    lines = [(_record(i).to_json() + "\n").encode() for i in range(20)]
    room = sum(len(line) for line in lines[:7]) + len(lines[7]) // 2  # the disk fills inside record 7
    writer = RecordsWriter(path, write=FullDisk(room))
    with writer:
        for i in range(7):
            writer.write(_record(i))
        with pytest.raises(RecordsNotWritten) as caught:
            writer.write(_record(7))
        with pytest.raises(RecordsNotWritten):  # and every write after it: the rung is not whole any more
            writer.write(_record(8))
    assert caught.value.errno == errno.ENOSPC
    assert "No space left on device after 7 records" in str(caught.value)
    assert path.read_bytes() == b"".join(lines[:7])  # cut back to the last whole line
    read = read_records_file(path)
    assert [r.request_id for r in read.records] == [f"q{i}" for i in range(7)] and read.said() is None


def test_a_writer_appends_after_what_a_file_holds(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    path.write_text(_record(0).to_json() + "\n")
    room = len(_record(1).to_json()) // 2
    writer = RecordsWriter(path, write=FullDisk(room))
    with writer, pytest.raises(RecordsNotWritten):
        writer.write(_record(1))
    assert path.read_text() == _record(0).to_json() + "\n"  # cut back to what it held, not to zero
