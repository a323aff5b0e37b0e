"""Progress on every output: a live line on a terminal, a plain line per finished rung elsewhere.

On a terminal (stderr a tty, not under CI) the runner rewrites one line in place once a second (lane, rung,
phase, elapsed, requests, live throughput and p95 TTFT; no extra task, no busy loop) and leaves a line per
finished rung. Elsewhere (CI, a log file, compose) only the finished rungs' lines are written, so a long
walk is never silent and a log holds no carriage returns. ``progress = false`` silences both.
"""

from __future__ import annotations

import os
import sys
from typing import TextIO

from satbench.core.figures import StepFigures

__all__ = ["Progress", "progress_wanted", "rung_line"]


def progress_wanted(requested: bool | None, stream: TextIO | None = None) -> bool:
    """Whether the live line is wanted: as requested, else on a terminal outside CI."""
    if requested is not None:
        return requested
    stream = stream or sys.stderr
    if os.environ.get("CI") or os.environ.get("SATBENCH_NO_PROGRESS"):
        return False
    return bool(getattr(stream, "isatty", lambda: False)())


class Progress:
    """``enabled``: the live line; ``lines``: a line per finished rung (``done``) even without it."""

    def __init__(self, enabled: bool, stream: TextIO | None = None, *, lines: bool = True) -> None:
        self.enabled = enabled
        self.lines = lines or enabled
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
        if not self.lines:
            return
        if not self.enabled:
            self.stream.write(text + "\n")
            self.stream.flush()
            return
        self.stream.write("\r" + text + " " * max(0, self._width - len(text)) + "\n")
        self.stream.flush()
        self._width = 0


def rung_line(figures: StepFigures) -> str:
    """The line a finished rung leaves: its throughput, latency, counts and window (and why it is invalid)."""
    ttft = "-" if figures.ttft_s.p95 is None else f"{figures.ttft_s.p95 * 1e3:.0f} ms"
    itl = "-" if figures.itl_s.p95 is None else f"{figures.itl_s.p95 * 1e3:.1f} ms"
    line = (f"  {figures.lane} c={figures.concurrency}: {figures.throughput_tok_s:.1f} tok/s, TTFT p95 {ttft}, "
            f"ITL p95 {itl}, {figures.requests} requests, {figures.errors} errors in {figures.window_s:.1f} s")
    return line + _cache_said(figures) + ("" if figures.valid else f" (invalid: {figures.reason})")


def _cache_said(figures: StepFigures) -> str:
    """What the runtime said its prompt cache served of the window's prompts, where it said (``cache_n``)."""
    cached, prompt = figures.cached_prompt_tokens, figures.cache_reported_prompt_tokens
    if cached is None or not prompt:
        return ""
    return f", the prompt cache served {cached} of {prompt} prompt tokens ({cached / prompt:.0%})"


def rate_line(figures: StepFigures, passed: bool | None) -> str:
    """The line a finished rate rung leaves: offered and served rates, goodput, latency from intended send."""
    ttft = "-" if figures.ttft_intended_s.p95 is None else f"{figures.ttft_intended_s.p95 * 1e3:.0f} ms"
    lag = "-" if figures.schedule_lag_s.p99 is None else f"{figures.schedule_lag_s.p99 * 1e3:.1f} ms"
    share = "" if figures.attainment is None else f", {figures.attainment:.0%} within objectives"
    offered = 0.0 if figures.offered_rps is None else figures.offered_rps
    verdict = {True: "passes", False: "fails", None: "not judged"}[passed]
    line = (f"  {figures.lane} {figures.rate_rps:.10g} req/s: offered {offered:.2f}/s, "  # the rate as named
            f"served {figures.requests_per_s:.2f}/s{share}, TTFT p95 from intended {ttft}, schedule lag p99 {lag}, "
            f"{figures.errors} errors in {figures.window_s:.1f} s{_cache_said(figures)}: {verdict}")
    return line + ("" if figures.valid else f" (invalid: {figures.reason})")
