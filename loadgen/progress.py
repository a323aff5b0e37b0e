"""A one-line live progress display on a terminal; silent when stderr is not a tty or under CI.

Shows lane, rung, phase, elapsed, requests, live throughput and p95 TTFT, rewritten in place once a second
by the runner (no extra task, no busy loop).
"""

from __future__ import annotations

import os
import sys
from typing import TextIO

__all__ = ["Progress", "progress_wanted"]


def progress_wanted(requested: bool | None, stream: TextIO | None = None) -> bool:
    if requested is not None:
        return requested
    stream = stream or sys.stderr
    if os.environ.get("CI") or os.environ.get("SATBENCH_NO_PROGRESS"):
        return False
    return bool(getattr(stream, "isatty", lambda: False)())


class Progress:
    def __init__(self, enabled: bool, stream: TextIO | None = None) -> None:
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self._width = 0

    def show(self, lane: str, concurrency: int, phase: str, elapsed_s: float, requests: int,
             throughput_tok_s: float, ttft_p95_s: float | None) -> None:
        if not self.enabled:
            return
        ttft = "-" if ttft_p95_s is None else f"{ttft_p95_s * 1e3:.0f} ms"
        line = (f"{lane} c={concurrency} {phase:<6} {elapsed_s:6.1f}s  req {requests:<6} "
                f"{throughput_tok_s:9.1f} tok/s  p95 TTFT {ttft}")
        pad = max(0, self._width - len(line))
        self._width = len(line)
        self.stream.write("\r" + line + " " * pad)
        self.stream.flush()

    def done(self, text: str) -> None:
        if not self.enabled:
            return
        self.stream.write("\r" + text + " " * max(0, self._width - len(text)) + "\n")
        self.stream.flush()
        self._width = 0
