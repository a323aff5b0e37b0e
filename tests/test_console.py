"""The console script on a closed stdout: ``satbench capabilities | head -1`` ends quietly.

A reader that stops early (``head -1``, a pager quit) closes its end of the pipe; the next write raises
BrokenPipeError. The script must then exit with 141 (128 + SIGPIPE, as a tool the shell sees killed by the
signal) and print nothing on stderr, neither a traceback nor the interpreter's "Exception ignored" at exit.

The reader is a real process that closes its end and says so before satbench starts, so the write always
meets a closed pipe (a reader that reads a line first races the writer: a short output fits in the pipe's
buffer before the reader is gone).
"""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from satbench import cli

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "docs" / "recommendations-sample.json"
READER = "import os, sys, time; os.close(0); print('closed', flush=True); time.sleep(30)"


def _into_a_closed_reader(argv: list[str], *, unbuffered: bool) -> subprocess.CompletedProcess[str]:
    read, write = os.pipe()
    reader = subprocess.Popen([sys.executable, "-c", READER], stdin=read, stdout=subprocess.PIPE, text=True)
    try:
        os.close(read)
        assert reader.stdout is not None and reader.stdout.readline() == "closed\n"
        env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"} | {"PYTHONPATH": str(ROOT)}
        if unbuffered:  # each print is written at once; else at the buffer's flush
            env["PYTHONUNBUFFERED"] = "1"
        return subprocess.run([sys.executable, "-m", "satbench.cli", *argv], stdout=write, stderr=subprocess.PIPE,
                              text=True, env=env, timeout=60, check=False)
    finally:
        os.close(write)
        reader.kill()
        reader.wait(timeout=10)
        assert reader.stdout is not None
        reader.stdout.close()


CAPABILITIES = ["capabilities", "--file", str(SAMPLE), "--format", "prometheus"]


@pytest.mark.parametrize(("argv", "unbuffered"), [
    (CAPABILITIES, False),  # the write fails at the flush
    (CAPABILITIES, True),  # the write fails in print
    (["--help"], False),  # argparse prints and exits; the flush fails (unbuffered, argparse drops the error)
], ids=["capabilities-buffered", "capabilities-unbuffered", "help-buffered"])
def test_a_closed_stdout_ends_quietly_with_141(argv: list[str], unbuffered: bool) -> None:
    done = _into_a_closed_reader(argv, unbuffered=unbuffered)
    assert done.stderr == ""
    assert done.returncode == 141


def test_a_broken_pipe_elsewhere_is_not_taken_for_a_closed_stdout(monkeypatch: pytest.MonkeyPatch) -> None:
    """A subcommand whose socket broke, with stdout still open, fails as before: its error is not swallowed."""
    def main(args: object) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    module = types.ModuleType("satbench_broken_socket")
    module.configure = lambda parser: None  # type: ignore[attr-defined]
    module.main = main  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(cli.SUBCOMMANDS, "broken-socket", (module.__name__, "a socket that breaks"))
    with pytest.raises(BrokenPipeError):
        cli.main(["broken-socket"])
