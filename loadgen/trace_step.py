"""A trace rung: an open-loop rung whose schedule and requests are a recorded trace's, at a speed factor.

Replay is open-loop load with recorded arrivals, so a trace rung is ``loadgen.open_step.OpenStepRun`` with the
trace's send offsets (``Trace.offsets(factor)``: factor 2 sends the recorded window in half its time) and the
trace's requests (its input lengths, the prompt text ``loadgen.traces.TracePrompts`` synthesises from its
block ids, its output lengths with ``ignore_eos``). Its ``rate_rps`` is the window's recorded rate times the
factor, and its window carries the ``speed_factor``; every record has its intended send time, so the step
figures, the looks and the attainment verdict (``core.attainment.rate_verdict``) apply as they are. The whole
replayed window is the measurement (no early end at a decided look: the trace's later stretch is as much the
workload as its start); where the scaled window is shorter than the warm-up and ``min_window_s``, it is
replayed again from its start (period: the window's length over the factor), said in the window's notes.

The speed-factor search (``next_factor``) is ``loadgen.rates.next_rate`` over the trace's recorded rate:
``trace.factors`` as its relative rates, 1.25x steps up to ``trace.max_factor``, ``trace.search_steps``
bisections; each rung judged by ``loadgen.rates.judge``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from satbench.core.manifest import StepWindow
from satbench.loadgen.config import ArrivalConfig, TraceConfig
from satbench.loadgen.open_step import OpenStepRun
from satbench.loadgen.rates import RateOutcome, next_rate
from satbench.loadgen.traces import Trace, TracePrompts
from satbench.loadgen.workload import RequestSpec, text_body

__all__ = ["TraceStepRun", "next_factor"]


@dataclass
class _Replay:
    """The trace's scaled offsets, the window again from its start each ``period_s``, until ``until_s``."""

    offsets: list[float]
    period_s: float
    until_s: float
    index: int = 0

    def next_offset(self) -> float | None:
        n = len(self.offsets)
        cycle, i = divmod(self.index, n)
        at = cycle * self.period_s + self.offsets[i]
        if at >= self.until_s:
            return None
        self.index += 1
        return at


class TraceStepRun(OpenStepRun):
    """Replays ``trace`` at ``factor`` on one lane; ``await run()`` returns its ``StepWindow``."""

    def __init__(self, *, trace: Trace, factor: float, prompts: TracePrompts, warmup_s: float,
                 **kwargs: object) -> None:
        self.trace = trace
        self.factor = factor
        self.prompts = prompts
        self.period_s = len(trace.requests) / trace.rate_rps / factor
        config = kwargs["config"]
        self.window_s = max(config.min_window_s, self.period_s - warmup_s)  # type: ignore[attr-defined]
        super().__init__(rate=trace.rate_rps * factor, warmup_s=warmup_s, **kwargs)  # type: ignore[arg-type]
        self.decide_early = False

    def _stream(self) -> _Replay:
        return _Replay(self.trace.offsets(self.factor), self.period_s, self.warmup_s + self.window_s)

    def _window_cap_s(self) -> float:
        return self.window_s

    def _request(self, index: int) -> tuple[RequestSpec, bytes]:
        n = len(self.trace.requests)
        req = self.trace.requests[index % n]
        spec = RequestSpec(0, index, req.input_tokens, req.output_tokens, False)
        body = text_body(self.lane.api, self.lane.model, self.prompts.prompt(req, index % n), req.output_tokens,
                         self.config.workload, "u0")
        return spec, body

    def _open_window(self, warm_ns: int, lags: list[float], read_lags: list[float], cpu_s: float) -> StepWindow:
        window = super()._open_window(warm_ns, lags, read_lags, cpu_s)
        replays = self.stream.index / len(self.trace.requests)  # type: ignore[attr-defined]
        said = (f"trace {self.trace.sha256[:12]} at {self.factor:g}x: {self.stream.index} requests "  # type: ignore[attr-defined]
                f"sent, {replays:.2f} times its window of {len(self.trace.requests)}")
        return StepWindow(**{**window.to_dict(), "notes": (*window.notes, said), "speed_factor": self.factor})


def _search(trace: TraceConfig, arrival: ArrivalConfig) -> ArrivalConfig:
    return arrival.model_copy(update={"rates": None, "relative": trace.factors, "max_relative": trace.max_factor,
                                      "search_steps": trace.search_steps})


def next_factor(measured: Sequence[RateOutcome], trace: TraceConfig, arrival: ArrivalConfig,
                recorded_rps: float) -> float | None:
    """The next speed factor to replay, or ``None`` when the search is over (module docstring); ``measured``
    holds each rung's outcome at its rate (recorded rate x factor)."""
    # the trace answer reads the bracket around its point curve's crossing (recommender.trace_analysis):
    # plain bisection, not the rate answer's narrowing from decided ends
    rate = next_rate(measured, _search(trace, arrival), recorded_rps, from_decided=False)
    return None if rate is None else float(f"{rate / recorded_rps:.6g}")  # the listed factor, not its rounding
