"""Inputs are bounded: every hostile value is refused in one line naming it, before anything starts, in bounded
memory, and a file is read once, front to back, in time linear in its size (issue 39).

The hostile values are the ones a review found accepted, each failing only after the runtimes and the ladder
ran (a ``MemoryError``, a ``ZeroDivisionError``, an OOM, or exit 0 after tracebacks): lengths of 10^12 tokens,
a timestamp of 1e300, a window of 1e300 s, a timeout of ``inf``, JSON nested 100,000 deep, a CSV field of
200,000 characters, a line of 200 MB. Each goes through ``satbench run`` as a user would give it (a config
file, ``--trace``, ``--dataset``): exit 2, one line naming the setting or the file and line, no run folder and
no child process (nothing was started). The limits are the declared ones (``core.config_files``,
``loadgen.traces``, ``loadgen.datasets``), so a value past them is refused; the values just inside stay
accepted (a test that a bound is not set below what a real workload needs).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import tracemalloc
from pathlib import Path

import psutil
import pytest

from satbench.cli import main
from satbench.core.config_files import MAX_CONFIG_BYTES, MAX_SECONDS, MAX_TOKENS
from satbench.loadgen.config import LoadgenConfig, TraceConfig, load_config
from satbench.loadgen.datasets import MAX_DATASET_LINE_BYTES, read_dataset
from satbench.loadgen.inputs import Inputs
from satbench.loadgen.runner import LadderRunner
from satbench.loadgen.traces import CHUNK_BYTES, MAX_TRACE_LINE_BYTES, TraceError, read_trace

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "examples" / "traces"
NESTED = "[" * 100_000 + "]" * 100_000


def _moon(**row: object) -> str:
    base: dict[str, object] = {"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [1]}
    return json.dumps(base) + "\n" + json.dumps({**base, "timestamp": 5, **row}) + "\n"


# (config TOML, the setting the one line must name)
HOSTILE_CONFIG = [
    ("[loadgen.workload.prompt_tokens]\nvalue = 1e12\n", "loadgen.workload.prompt_tokens.value"),
    ("[loadgen.workload.prompt_tokens]\nkind = 'uniform'\nhigh = 1000000000000\n",
     "loadgen.workload.prompt_tokens.high"),
    ("[loadgen.workload.output_tokens]\nvalue = 1000000000000\n", "loadgen.workload.output_tokens.value"),
    ("[loadgen]\nmin_window_s = 1e300\nmax_window_s = 1e300\n", "loadgen.min_window_s"),
    ("[loadgen]\nrequest_timeout_s = inf\n", "loadgen.request_timeout_s"),
    ("[loadgen]\nwarmup_s = nan\n", "loadgen.warmup_s"),
    ("[loadgen.ladder]\nconcurrency = [1, 1000000000]\nmax_concurrency = 1000000000\n",
     "loadgen.ladder.concurrency[1]"),
    ("[loadgen.arrival]\nprocess = 'poisson'\nrates = [1e300]\n", "loadgen.arrival.rates[0]"),
    ("[[lanes]]\nname = 'big'\nctx_size = 1000000000000\n", "lanes[big].ctx_size"),
    ("[prometheus]\nstart_timeout_s = inf\n", "prometheus.start_timeout_s"),
]


def _run(tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """``satbench run`` in this process: exit 2, one line on stderr, no run folder, no child process."""
    out = tmp_path / "runs"
    before = _children()
    code = main(["run", "--out", str(out), *args])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("satbench run: ") and "Traceback" not in err, err
    assert not out.exists()
    assert _children() <= before, "a refused run started a process"
    return lines[0]


def _children() -> set[int]:
    """This process' children now (a server another test of this worker left running for its module is one)."""
    return {child.pid for child in psutil.Process().children(recursive=True)}


@pytest.mark.parametrize(("toml", "setting"), HOSTILE_CONFIG, ids=[s for _, s in HOSTILE_CONFIG])
def test_a_hostile_config_value_is_one_line_naming_it_before_anything_starts(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], toml: str, setting: str) -> None:
    config = tmp_path / "session.toml"
    config.write_text(toml)
    line = _run(tmp_path, capsys, "--config", str(config))
    assert f"{setting}: " in line, line


def test_a_nested_or_oversized_config_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "session.toml"
    config.write_text("x = " + NESTED + "\n")
    assert "nests too deep" in _run(tmp_path, capsys, "--config", str(config))
    with config.open("w") as fh:  # 17 MB, a hole past its first line: read no further than the limit
        fh.write("[loadgen]\n")
        fh.truncate(MAX_CONFIG_BYTES + (1 << 20))
    assert f"longer than {MAX_CONFIG_BYTES:,} bytes" in _run(tmp_path, capsys, "--config", str(config))
    assert "nests too deep" in _run(tmp_path, capsys, "--set", "loadgen.x=" + "[" * 50_000 + "]" * 50_000)


def test_the_bounds_leave_every_real_value_accepted() -> None:
    config = load_config(None, {"workload.prompt_tokens.value": MAX_TOKENS, "request_timeout_s": MAX_SECONDS,
                                "min_window_s": 3600.0, "max_window_s": MAX_SECONDS,
                                "ladder.concurrency": [1, 4096], "ladder.max_concurrency": 4096})
    assert config.workload.prompt_tokens.value == 1 << 24 and config.request_timeout_s == 7 * 86400


# (file name, its text, the flag that gives it, what the one line must say)
HOSTILE_FILES = [
    ("m.jsonl", _moon(input_length=10**12), "--trace", "m.jsonl:2: input_length must be a whole number in"),
    ("m.jsonl", _moon(output_length=10**12), "--trace", "m.jsonl:2: output_length must be a whole number in"),
    ("m.jsonl", _moon(timestamp=1e300), "--trace", "m.jsonl:2: timestamp must be a number in"),
    ("m.jsonl", _moon(timestamp=400 * 86400 * 1000), "--trace", "m.jsonl:2: timestamp must be a number in"),
    ("m.jsonl", _moon(hash_ids=[2**70]), "--trace", "m.jsonl:2: hash_ids must be a list of whole numbers"),
    ("m.jsonl", _moon() + NESTED + "\n", "--trace", "m.jsonl:3: JSON nested too deep"),
    ("b.csv", "Timestamp,Model,Request tokens,Response tokens\n0,a,10,2\n1e300,a,10,2\n", "--trace",
     "b.csv:3: Timestamp must be a number in"),
    ("b.csv", "Timestamp,Model,Request tokens,Response tokens\n0,a,10,2\n1,a,1000000000000,2\n", "--trace",
     "b.csv:3: Request tokens must be a whole number in"),
    ("b.csv", "Timestamp,Model,Request tokens,Response tokens\n0,a,10,2\n1,\"" + "x" * 200_000 + "\",10,2\n",
     "--trace", "b.csv:3: not CSV (field larger than field limit"),
    ("a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,10,2\n2023-13-45 18:15:46,10,2\n",
     "--trace", "a.csv:3: TIMESTAMP is not a date and time"),
    ("a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,10,2\n2025-11-16 18:15:46,10,2\n",
     "--trace", "a.csv:3: timestamp 6.31584e+07 s after the first line's"),
    ("p.jsonl", '{"prompt": "a"}\n{"prompt": "b", "output_tokens": 1000000000000}\n', "--dataset",
     "p.jsonl:2: output_tokens must be a whole number in"),
    ("p.jsonl", '{"prompt": "a"}\n' + NESTED + "\n", "--dataset", "p.jsonl:2: JSON nested too deep"),
    ("s.json", '[{"conversations": [{"from": "human", "value": "hi"}]},\n' + NESTED + "]", "--dataset",
     "s.json:2: JSON nested too deep"),
]


@pytest.mark.parametrize(("name", "text", "flag", "said"), HOSTILE_FILES, ids=[s[:60] for *_, s in HOSTILE_FILES])
def test_a_hostile_input_file_is_one_line_naming_it_before_anything_starts(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, text: str, flag: str, said: str) -> None:
    (tmp_path / name).write_text(text)
    line = _run(tmp_path, capsys, flag, str(tmp_path / name))
    assert said in line, line


@pytest.mark.slow  # the console script in a process of its own (a second to import)
def test_the_console_script_refuses_a_hostile_config_and_trace_with_exit_2(tmp_path: Path) -> None:
    config, trace, out = tmp_path / "session.toml", tmp_path / "m.jsonl", tmp_path / "runs"
    config.write_text("[loadgen]\nrequest_timeout_s = inf\n")
    trace.write_text(_moon(input_length=10**12))
    for args, said in ((["--config", str(config)], "loadgen.request_timeout_s: Input should be a finite number"),
                       (["--trace", str(trace)], "m.jsonl:2: input_length must be a whole number in")):
        done = subprocess.run([sys.executable, "-m", "satbench.cli", "run", "--out", str(out), *args], cwd=ROOT,
                              capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        assert done.returncode == 2 and said in done.stderr and len(done.stderr.strip().splitlines()) == 1, done
        assert not out.exists()


def test_satbench_loadgen_refuses_a_hostile_trace_before_any_load(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    config, trace, out = tmp_path / "loadgen.toml", tmp_path / "m.jsonl", tmp_path / "out"
    trace.write_text(_moon(output_length=10**12))
    config.write_text(f'[[lanes]]\nname = "d"\nurl = "http://127.0.0.1:9"\n[trace]\npath = "{trace}"\n')
    assert main(["loadgen", "--config", str(config), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("satbench loadgen: ") and "m.jsonl:2: output_length must be" in err, err
    assert len(err.splitlines()) == 1 and not out.exists()


def test_satbench_tune_refuses_a_hostile_dataset_before_any_runtime(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    config, dataset, out = tmp_path / "tune.toml", tmp_path / "p.jsonl", tmp_path / "runs"
    dataset.write_text('{"prompt": "a"}\n' + NESTED + "\n")
    config.write_text(f'[tune]\nparallel = [2, 4]\n[loadgen.workload.dataset]\npath = "{dataset}"\n')
    before = _children()
    assert main(["tune", "--config", str(config), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("satbench tune: ") and "p.jsonl:2: JSON nested too deep" in err, err
    assert len(err.splitlines()) == 1 and not out.exists()
    assert _children() <= before, "a refused tune started a process"


def _peak_bytes(read: object, *args: object, **kwargs: object) -> tuple[int, str]:
    tracemalloc.start()
    try:
        with pytest.raises(TraceError) as caught:
            read(*args, **kwargs)  # type: ignore[operator]
        return tracemalloc.get_traced_memory()[1], str(caught.value)
    finally:
        tracemalloc.stop()


def test_a_200_mb_line_is_refused_by_its_number_holding_no_more_than_the_limit(tmp_path: Path) -> None:
    trace, dataset = tmp_path / "m.jsonl", tmp_path / "p.jsonl"
    for path, first in ((trace, _moon().splitlines()[0]), (dataset, '{"prompt": "a"}')):
        with path.open("w") as fh:  # the rest of line 2 is a hole: 200 MB on disk in no time
            fh.write(first + "\n" + '{"prompt": "')
            fh.truncate(200_000_000)
    peak, said = _peak_bytes(read_trace, trace)
    assert said.endswith(f"m.jsonl:2: line longer than {MAX_TRACE_LINE_BYTES:,} bytes (the trace line limit)")
    assert peak < 3 * MAX_TRACE_LINE_BYTES + CHUNK_BYTES, peak  # was 1.9 GB: the whole line, then its objects
    peak, said = _peak_bytes(read_dataset, dataset, max_line_bytes=MAX_DATASET_LINE_BYTES // 8)
    assert said.endswith(f"p.jsonl:2: line longer than {MAX_DATASET_LINE_BYTES // 8:,} bytes (the dataset line "
                         "limit)")
    assert peak < 3 * (MAX_DATASET_LINE_BYTES // 8) + CHUNK_BYTES, peak


def test_a_long_json_array_item_is_refused_holding_no_more_than_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    cap = 1 << 20
    path.write_text('[\n {"conversations": [{"from": "human", "value": "hi"}]},\n {"conversations": [{"from": '
                    '"human", "value": "' + "a" * (6 * cap) + '"}]}\n]')
    peak, said = _peak_bytes(read_dataset, path, max_line_bytes=cap)
    assert said.endswith(f"s.json:3: an item longer than {cap:,} characters (the dataset line limit)"), said
    assert peak < 8 * cap, peak  # the file is 6 MiB: only what the cap allows (and its last chunk) was held
    assert read_dataset(path, max_line_bytes=8 * cap).read == 2  # within a larger cap it reads


def test_a_json_array_streams_across_chunks_and_names_the_line_of_a_bad_item(tmp_path: Path) -> None:
    # items of ~10 KB over several 1 MiB chunks, so items straddle every chunk boundary
    convs = [{"id": i, "conversations": [{"from": "human", "value": f"q{i} " + "word " * 2000},
                                         {"from": "gpt", "value": f"a{i}"}]} for i in range(400)]
    path = tmp_path / "s.json"
    text = json.dumps(convs, indent=1)
    assert len(text) > 3 * CHUNK_BYTES
    path.write_text(text)
    data = read_dataset(path)
    assert [c.turns[0].user.split()[0] for c in data.conversations] == [f"q{i}" for i in range(400)]
    assert [c.line for c in data.conversations] == [n + 1 for n, row in enumerate(text.splitlines())
                                                   if row == " {"]
    assert data.size_bytes == len(text.encode())
    convs[350]["conversations"] = []
    text = json.dumps(convs, indent=1)
    path.write_text(text)
    line = text[:text.index('"id": 350')].count("\n")  # the line of the item's opening brace
    with pytest.raises(TraceError, match=rf"s\.json:{line}: empty conversation"):
        read_dataset(path)


@pytest.mark.parametrize(("text", "said"), [
    ('[{"conversations": [{"from": "human", "value": "hi"}]} {"conversations": []}]', ":1: expected ',' or ']'"),
    ('[{"conversations": [{"from": "human", "value": "hi"}]},\n{"conversations": [}]', ":2: not JSON"),
    ('[{"conversations": [{"from": "human", "value": "hi"}]},\n', ":2: the JSON array is not closed"),
])
def test_a_broken_json_array_is_one_line(tmp_path: Path, text: str, said: str) -> None:
    path = tmp_path / "s.json"
    path.write_text(text)
    with pytest.raises(TraceError) as caught:
        read_dataset(path)
    assert said in str(caught.value) and "\n" not in str(caught.value), caught.value


def _through_a_pipe(tmp_path: Path, content: bytes) -> tuple[Path, threading.Thread]:
    """A named pipe that yields ``content`` once: a reader that opens it a second time finds no writer."""
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)

    def write() -> None:
        with pipe.open("wb") as fh:
            fh.write(content)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    return pipe, writer


@pytest.mark.parametrize("sample", ["mooncake_sample.jsonl", "burstgpt_sample.csv", "azure_sample.csv"])
def test_a_trace_is_read_once(tmp_path: Path, sample: str) -> None:
    content = (SAMPLES / sample).read_bytes()
    pipe, writer = _through_a_pipe(tmp_path, content)
    trace = read_trace(pipe)  # format sniffed, rows parsed and the file hashed from the one pass
    writer.join(5)
    assert trace.requests and trace.size_bytes == len(content)
    assert trace.sha256 == read_trace(SAMPLES / sample).sha256


def test_a_dataset_is_read_once(tmp_path: Path) -> None:
    content = (b'[{"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "ho"}]},\n'
               b' {"conversations": [{"from": "human", "value": "again"}]}]')
    pipe, writer = _through_a_pipe(tmp_path, content)
    data = read_dataset(pipe)
    writer.join(5)
    assert data.read == 2 and data.size_bytes == len(content)


@pytest.mark.slow  # the runner loads scipy (a second)
def test_the_walk_takes_the_inputs_the_entry_point_read(tmp_path: Path) -> None:
    trace = read_trace(SAMPLES / "mooncake_sample.jsonl")
    config = LoadgenConfig.model_validate({"lanes": [{"name": "d", "url": "http://127.0.0.1:9"}]}).model_copy(
        update={"trace": TraceConfig(path=tmp_path / "gone.jsonl")})
    with pytest.raises(TraceError, match=r"gone\.jsonl: no such trace file"):  # the file itself is gone
        LadderRunner(config, tmp_path / "out")
    runner = LadderRunner(config, tmp_path / "out", inputs=Inputs(trace=trace))  # not read again
    assert runner.trace is trace
    runner.close()
