"""A trace rung: an open-loop rung whose schedule and requests are a recorded trace's, at a speed factor.

Replay is open-loop load with recorded arrivals, so a trace rung is ``loadgen.open_step.OpenStepRun`` with the
trace's send offsets (``Trace.offsets(factor)``: factor 2 sends the recorded window in half its time) and the
trace's requests (its input lengths, the prompt text ``loadgen.traces.TracePrompts`` synthesises from its
block ids, its output lengths with ``ignore_eos``; each pass over the window at each factor a replay of its
own, ``TracePrompts.replay``: the trace's sharing within it, none with another). Its ``rate_rps`` is the
window's recorded rate times the
factor, and its window carries the ``speed_factor``; every record has its intended send time, so the step
figures, the looks and the attainment verdict (``core.attainment.rate_verdict``) apply as they are.

The warm-up is the window itself, played once and discarded; then the whole recorded window is measured, from
its first request to its last (``trace_plan``). The question is "does this node take this traffic, going on
like this": the state the node is in when the window begins is what the traffic before it left, and the
window's own end is that traffic in the answer's meaning (the truth, ``testkit.trace_truth``, is the window
sent again and again). A pass of it reproduces that state wherever the node forgets in less than a window
(a node that does not is one whose backlog outlives a whole window: not sustained, which the carry-over says).
The trace's recorded segment before the window would be the other choice, but there is none at its start, it
is other traffic at another rate, and the window is the traffic the answer is about. What it never does is cut
recorded traffic: the open rung's warm-up cut (MSER-5, ``core.attainment.warmup_cut``) looks for where a
stationary process's initial transient ends, and on a recorded schedule, which is not stationary, it took a
burst in the window's first seconds for that transient (moving the start 34-71 s past it and answering 1.8x
where the node takes 0.35x). The literature on warm-up deletion (White 1997; Hoad, Robinson and Davies 2010)
assumes a process with a steady state; a trace has none to find. The looks ask nothing of steadiness, and there
is no early end at a decided look: the trace's later stretch is as much the workload as its start.

So warm-up and window are whole passes of the scaled window (period: its length over the factor): at least
one pass, and as many as ``warmup_s`` and ``min_window_s`` need where a pass is shorter, the window beginning
and ending at the same moment of the schedule (``period_s`` on the window). That is what makes "sustained"
mean the same as for a stationary rate without assuming one: the step figures' backlog growth of a trace rung
is the backlog against itself one pass earlier (``core.backlog.pass_growth``), not the slope over the
window, which reads a ramp's rising rate (more in flight on any server) as a growing queue. A trace rung takes
two passes and the drain where it took one.

The speed-factor search (``next_factor``) is ``loadgen.rates.next_rate`` run in factors (a capacity of 1):
``trace.factors`` as its relative rates, 1.25x steps up to ``trace.max_factor``, ``trace.search_steps``
bisections; each rung judged by ``loadgen.rates.judge``. A rung measured at the recorded rate times its factor
is known again by its factor (``loadgen.rates.rate_key`` of rate over recorded rate), never by a rate rounded
on the way, so listed factors are replayed and labelled as listed (``loadgen.rates.factor_label``: 0.5x,
9.765625x) and the search ends within ``loadgen.rates.rung_bound`` rungs (``factor_search_end`` says why).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from satbench.answer.rate_analysis import TOLERANCE
from satbench.core.manifest import StepWindow
from satbench.loadgen.config import ArrivalConfig, TraceConfig
from satbench.loadgen.open_step import OpenStepRun
from satbench.loadgen.rates import RateOutcome, factor_label, next_rate, rate_key, search_end
from satbench.loadgen.traces import Trace, TracePrompts
from satbench.loadgen.workload import RequestSpec, text_body

__all__ = ["NARROW", "TracePlan", "TraceStepRun", "factor_search_end", "next_factor", "replay_prompt", "trace_plan"]

# the factor search bisects on while its decided ends are further apart than this: a bracket this narrow holds
# any answer inside it within the answer's tolerance (0.9 x high <= answer <= 1.1 x low)
NARROW = 1 + TOLERANCE


@dataclass(frozen=True, slots=True)
class TracePlan:
    """A trace rung's schedule (module docstring): one pass of the scaled window, the warm-up and the window,
    in seconds since the rung began; the window is ``[warmup_s, warmup_s + window_s]``."""

    period_s: float
    warmup_s: float
    window_s: float

    @property
    def until_s(self) -> float:
        """When the rung stops sending: the window's end."""
        return self.warmup_s + self.window_s


def trace_plan(trace: Trace, factor: float, warmup_s: float, min_window_s: float) -> TracePlan:
    """Warm-up and window as whole passes of the window at ``factor``: at least one each, enough to last
    ``warmup_s`` and ``min_window_s``."""
    if not factor > 0:
        raise ValueError(f"speed factor must be positive, got {factor!r}")
    period = len(trace.requests) / trace.rate_rps / factor
    return TracePlan(period, period * max(1, math.ceil(warmup_s / period - 1e-9)),
                     period * max(1, math.ceil(min_window_s / period - 1e-9)))


def replay_prompt(prompts: TracePrompts, trace: Trace, index: int,
                  passes: dict[int, TracePrompts] | None = None) -> str:
    """The text of the ``index``-th request a trace rung sends: the trace's request ``index % n``, each pass over
    the window a replay of its own (``TracePrompts.replay``: its block ids drawn as new text), so the requests of
    a pass share exactly what the trace's ids imply within the window and never a prompt the pass before sent
    (the warm-up pass would otherwise leave the measured one in the prompt cache). ``passes`` keeps the pass
    being sent, so its blocks are drawn once."""
    n = len(trace.requests)
    cycle, i = divmod(index, n)
    replay = None if passes is None else passes.get(cycle)
    if replay is None:
        replay = prompts.replay(str(cycle))
        if passes is not None:
            passes.clear()
            passes[cycle] = replay
    return replay.prompt(trace.requests[i], i)


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
        self.prompts = prompts.replay(repr(rate_key(factor)))  # each factor a replay of its own
        self._passes: dict[int, TracePrompts] = {}  # the pass being sent, its text drawn once
        config = kwargs["config"]
        self.plan = trace_plan(trace, factor, warmup_s, config.min_window_s)  # type: ignore[attr-defined]
        super().__init__(rate=trace.rate_rps * factor, warmup_s=self.plan.warmup_s, **kwargs)  # type: ignore[arg-type]
        self.decide_early = False
        self.fixed_window = True
        self.look_period = self.plan.period_s

    def _stream(self) -> _Replay:
        return _Replay(self.trace.offsets(self.factor), self.plan.period_s, self.plan.until_s)

    def _window_cap_s(self) -> float:
        return self.plan.window_s

    def _request(self, index: int) -> tuple[RequestSpec, bytes]:
        n = len(self.trace.requests)
        req = self.trace.requests[index % n]
        spec = RequestSpec(0, index, req.input_tokens, req.output_tokens, False)
        body = text_body(self.lane.api, self.lane.model, replay_prompt(self.prompts, self.trace, index, self._passes),
                         req.output_tokens, self.config.workload, "u0")
        return spec, body

    def _open_window(self, warm_ns: int, lags: list[float], read_lags: list[float], cpu_s: float) -> StepWindow:
        window = super()._open_window(warm_ns, lags, read_lags, cpu_s)
        replays = self.stream.index / len(self.trace.requests)  # type: ignore[attr-defined]
        said = (f"trace {self.trace.sha256[:12]} at {factor_label(self.factor)}: {self.stream.index} requests "  # type: ignore[attr-defined]
                f"sent, {replays:.2f} times its window of {len(self.trace.requests)}")
        return StepWindow(**{**window.to_dict(), "notes": (*window.notes, said), "speed_factor": self.factor,
                              "period_s": self.plan.period_s})


def _search(trace: TraceConfig, arrival: ArrivalConfig) -> ArrivalConfig:
    return arrival.model_copy(update={"rates": None, "relative": trace.factors, "max_relative": trace.max_factor,
                                      "search_steps": trace.search_steps})


def _in_factors(measured: Sequence[RateOutcome], recorded_rps: float) -> list[RateOutcome]:
    """Each rung's outcome at its factor: its rate (recorded rate x factor) over the recorded rate, keyed."""
    return [RateOutcome(rate_key(o.rate / recorded_rps), o.passed, o.decided) for o in measured]


def next_factor(measured: Sequence[RateOutcome], trace: TraceConfig, arrival: ArrivalConfig,
                recorded_rps: float) -> float | None:
    """The next speed factor to replay, or ``None`` when the search is over (module docstring); ``measured``
    holds each rung's outcome at its rate (recorded rate x factor)."""
    # the trace answer's interval is the rate answer's, from the rungs' pass-paired intervals
    # (answer.trace_analysis): the bisection narrows from the decided ends, on while they are too far apart to
    # hold any answer within the tolerance
    return next_rate(_in_factors(measured, recorded_rps), _search(trace, arrival), 1.0, narrow=NARROW)


def factor_search_end(measured: Sequence[RateOutcome], trace: TraceConfig, arrival: ArrivalConfig,
                      recorded_rps: float) -> str | None:
    """Why the factor search is over (``loadgen.rates.search_end`` in factors), ``None`` while it goes on."""
    return search_end(_in_factors(measured, recorded_rps), _search(trace, arrival), 1.0, unit="x", narrow=NARROW)
