"""Generated traces and datasets, and the trace answer's truth from the simulator's engine in virtual time.

``generate_mooncake(...)`` writes a Mooncake-format trace (``loadgen.traces``) whose traffic is known by
construction: Poisson arrivals at ``rate_rps``, each request opening with one of ``groups`` shared prefixes of
``prefix_blocks`` blocks (a system prompt: the same ids, so the same text) with probability ``share``, then
blocks of its own; lengths drawn uniformly. ``generate_burstgpt`` and ``generate_azure`` write the same
arrivals and lengths in those formats (no block ids); ``generate_sharegpt``, ``generate_openai`` and
``generate_prompts`` write the same generated conversations as the three dataset formats. The samples in
``examples/traces`` are these generators' output (``python -m testkit.trace_truth examples/traces``).

Truth (``true_max_factor``) is the engine's alone, never the load generator's windows, statistics or search:
the engine (``simulator.virtual.run_requests``) is fed the trace's own requests at ``offset / factor`` (the
lengths as recorded, the prompts' token ids as the simulator's tokenizer reads ``loadgen.traces.TracePrompts``'
text, so its prompt cache sees the sharing; each pass over the window a replay of its own, as the load
generator sends it), the window sent ``cycles`` times in a row (8: the traffic of a long stretch like it),
every request followed to its end; a factor passes where at least ``target`` of the requests after the first
pass attain every objective (TTFT and e2e from the intended send, the request's TPOT). A factor the engine
cannot keep up with queues without end, so its long-run attainment falls below any target. The answer is the
largest passing factor, bisected to 1 %.

Measurement (``measured_trace_rung``): one trace rung as the load generator measures it
(``loadgen.trace_step``: the window replayed again while warm-up and window last), in virtual time: the same
sends fed to the engine, the window looked at once at its end (``core.attainment.rate_look``), its records and
window; the load generator's figures, verdict and search then apply to them as they are.
"""

from __future__ import annotations

import itertools
import json
import math
import random
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from satbench.core.attainment import rate_look
from satbench.core.manifest import StepWindow
from satbench.core.objectives import Objectives
from satbench.core.records import RequestRecord
from satbench.loadgen.traces import BLOCK_TOKENS, Trace, TracePrompts
from satbench.simulator.engine import Engine, RequestSpec
from satbench.simulator.profile import Profile
from satbench.simulator.tokens import tokenize
from satbench.simulator.virtual import run_requests

__all__ = ["TraceServed", "generate_azure", "generate_burstgpt", "generate_mooncake", "generate_openai",
           "generate_prompts", "generate_sharegpt", "measured_trace_rung", "serve_trace", "trace_attainment",
           "true_max_factor"]


@dataclass(frozen=True, slots=True)
class _Row:
    at_s: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...]


def _rows(n: int, rate_rps: float, seed: int, groups: int, prefix_blocks: int, share: float,
          own_blocks: tuple[int, int], output_tokens: tuple[int, int]) -> list[_Row]:
    rng = random.Random(f"trace:{seed}")
    next_id = groups * prefix_blocks
    t = 0.0
    rows = []
    for _ in range(n):
        ids: list[int] = []
        if groups and rng.random() < share:
            g = rng.randrange(groups)
            ids = list(range(g * prefix_blocks, (g + 1) * prefix_blocks))
        own = rng.randint(*own_blocks)
        ids += range(next_id, next_id + own)
        next_id += own
        # the last block partly filled, as a recorded prompt's is
        length = max(len(ids) - 1, 0) * BLOCK_TOKENS + rng.randint(BLOCK_TOKENS // 4, BLOCK_TOKENS)
        rows.append(_Row(round(t, 3), length, rng.randint(*output_tokens), tuple(ids)))
        t += rng.expovariate(rate_rps)
    return rows


def generate_mooncake(path: Path, n: int = 200, rate_rps: float = 2.0, seed: int = 0, *, groups: int = 2,
                      prefix_blocks: int = 2, share: float = 0.8, own_blocks: tuple[int, int] = (1, 2),
                      output_tokens: tuple[int, int] = (16, 96)) -> Path:
    """A Mooncake-format trace of known traffic (module docstring)."""
    rows = _rows(n, rate_rps, seed, groups, prefix_blocks, share, own_blocks, output_tokens)
    with path.open("w", encoding="utf-8") as fh:
        for r in rows:
            fh.write(json.dumps({"timestamp": round(r.at_s * 1000), "input_length": r.input_tokens,
                                 "output_length": r.output_tokens, "hash_ids": list(r.hash_ids)}) + "\n")
    return path


def generate_burstgpt(path: Path, n: int = 200, rate_rps: float = 2.0, seed: int = 0) -> Path:
    """The same arrivals and lengths as a BurstGPT CSV (one failed request, 0 response tokens, among them)."""
    rows = _rows(n, rate_rps, seed, 0, 0, 0.0, (1, 3), (16, 96))
    with path.open("w", encoding="utf-8") as fh:
        fh.write("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n")
        for i, r in enumerate(rows):
            out = 0 if i == n // 2 else r.output_tokens
            fh.write(f"{r.at_s:.3f},ChatGPT,{r.input_tokens},{out},{r.input_tokens + out},Conversation log\n")
    return path


def generate_azure(path: Path, n: int = 200, rate_rps: float = 2.0, seed: int = 0) -> Path:
    """The same arrivals and lengths as an Azure LLM inference trace CSV."""
    rows = _rows(n, rate_rps, seed, 0, 0, 0.0, (1, 3), (16, 96))
    with path.open("w", encoding="utf-8") as fh:
        fh.write("TIMESTAMP,ContextTokens,GeneratedTokens\n")
        for r in rows:
            whole = int(r.at_s)
            frac = round((r.at_s - whole) * 1e7)
            minutes, seconds = divmod(15 * 60 + 46 + whole, 60)
            fh.write(f"2023-11-16 18:{minutes:02d}:{seconds:02d}.{frac:07d},{r.input_tokens},{r.output_tokens}\n")
    return path


@dataclass(frozen=True, slots=True)
class TraceServed:
    """One replayed request in virtual time: meant to be sent at ``sent``, its token times, its prompt length."""

    sent: float
    tokens: tuple[float, ...]
    prompt_tokens: int

    def attained(self, objectives: Objectives) -> bool:
        if not self.tokens:
            return False
        tpot = (self.tokens[-1] - self.tokens[0]) / (len(self.tokens) - 1) if len(self.tokens) > 1 else None
        return not objectives.misses(ok=True, ttft_s=self.tokens[0] - self.sent, tpot_s=tpot, pause_excess_s=None,
                                     e2e_s=self.tokens[-1] - self.sent, prompt_tokens=self.prompt_tokens)


def _run_sends(profile: Profile, trace: Trace, sends: list[tuple[float, int]],
               seed: int) -> tuple[Engine, list[tuple[float, RequestSpec]], dict[str, list[float]]]:
    """The engine fed ``sends`` (virtual time, index into the trace), each request's prompt synthesised from its
    blocks as the load generator does: the engine, the arrivals and each request's token times."""
    base = TracePrompts(seed, trace.block_tokens)
    passes: dict[int, TracePrompts] = {}
    n = len(trace.requests)
    arrivals = []
    for at, i in sends:
        req = trace.requests[i % n]
        prompts = passes.setdefault(i // n, base.replay(str(i // n)))
        ids = tuple(tokenize(prompts.prompt(req, i % n)))
        arrivals.append((at, RequestSpec(f"r{i}", len(ids), req.output_tokens, ignore_eos=True, user="user-0",
                                         prompt_ids=ids)))
    engine, emissions = run_requests(profile, arrivals)
    tokens: dict[str, list[float]] = defaultdict(list)
    for at, rid, _ in emissions:
        tokens[rid].append(at)
    return engine, arrivals, tokens


def serve_trace(profile: Profile, trace: Trace, factor: float, cycles: int = 1,
                seed: int = 0) -> tuple[list[TraceServed], float]:
    """The engine's answer to the trace at a speed factor, its window sent ``cycles`` times in a row (module
    docstring), and the share of prompt tokens its prompt cache served."""
    period = len(trace.requests) / trace.rate_rps / factor
    engine, arrivals, tokens = _run_sends(profile, trace, _replayed(trace, factor, cycles * period), seed)
    served = [TraceServed(at, tuple(tokens.get(spec.request_id, ())), spec.prompt_tokens) for at, spec in arrivals]
    total = sum(spec.prompt_tokens for _, spec in arrivals)
    return served, engine.counters.prompt_tokens_cached_total / total if total else 0.0


def trace_attainment(served: list[TraceServed], objectives: Objectives) -> float:
    return sum(s.attained(objectives) for s in served) / len(served) if served else 0.0


def true_max_factor(profile: Profile, trace: Trace, *, objectives: Objectives, target: float = 0.9,
                    cycles: int = 8, high: float = 64.0) -> float:
    """The largest speed factor, to 1 %, at which the engine serves the trace's window, sent ``cycles`` times in
    a row, with ``target`` of the requests after the first pass within ``objectives`` (module docstring)."""
    n = len(trace.requests)

    def ok(factor: float) -> bool:
        served, _ = serve_trace(profile, trace, factor, cycles)
        return trace_attainment(served[n:], objectives) >= target

    low = 1.0
    while not ok(low) and low > 1e-3:
        high, low = low, low / 2
    while low * 2 <= high and ok(low * 2):
        low *= 2
    high = min(high, low * 2)
    while high / low > 1.01:
        mid = math.sqrt(low * high)
        low, high = (mid, high) if ok(mid) else (low, mid)
    return low


def _replayed(trace: Trace, factor: float, until_s: float) -> list[tuple[float, int]]:
    """The trace rung's sends (``loadgen.trace_step``): (offset, request index), the window again from its start
    each period until ``until_s``."""
    n = len(trace.requests)
    period = n / trace.rate_rps / factor
    out = []
    i = 0
    while (at := (i // n) * period + trace.requests[i % n].at_s / factor) < until_s:
        out.append((at, i))
        i += 1
    return out


def measured_trace_rung(profile: Profile, trace: Trace, factor: float, *, objectives: Objectives,
                        target: float = 0.9, confidence: float = 0.95, capacity_rps: float | None = None,
                        warmup_s: float = 2.0, min_window_s: float = 8.0,
                        lane: str = "x") -> tuple[list[RequestRecord], StepWindow]:
    """One trace rung as the load generator measures it, in virtual time: the engine fed the rung's own sends
    (the trace at ``factor``, replayed again while the window lasts), the whole window looked at once at its end
    (``core.attainment.rate_look``: its warm-up cut), its records and window."""
    rate = trace.rate_rps * factor
    period = len(trace.requests) / trace.rate_rps / factor
    window_s = max(min_window_s, period - warmup_s)
    engine, arrivals, tokens = _run_sends(profile, trace, _replayed(trace, factor, warmup_s + window_s), 0)
    admitted = {r.request_id: r.admitted for r in engine.truth}
    start, end = warmup_s, warmup_s + window_s
    done, pending = [], []
    for at, spec in arrivals:
        times = tokens.get(spec.request_id, [])
        served = TraceServed(at, tuple(times), spec.prompt_tokens)
        last = times[-1] if times else math.inf
        if last <= end:
            done.append((at, (times[0] if times else math.inf) - at, last, served.attained(objectives)))
        else:
            first = times[0] if times else math.inf
            wait = min(first, end) - at
            pending.append((at, wait, wait > (objectives.ttft_s or math.inf)))
    look = rate_look(done, pending, start, end, rate, target=target, confidence=confidence,
                     capacity_rps=capacity_rps)
    start = look.start if look.start is not None else start
    records = []
    for at, spec in arrivals:
        times = tokens.get(spec.request_id, [])
        last = times[-1] if times else at
        admit = admitted.get(spec.request_id)
        records.append(RequestRecord(
            run_id="virtual", lane=lane, concurrency=0, user=0, request_id=spec.request_id,
            phase="window" if start <= at <= end else "warmup", sent_at=at,
            ttft_s=times[0] - at if times else None, e2e_s=last - at,
            queue_s=None if admit is None else admit - at,
            itl_s=tuple(b - a for a, b in itertools.pairwise(times)), prompt_tokens=spec.prompt_tokens,
            output_tokens=len(times), outcome="ok", rate_rps=rate, intended_at=at))
    window = StepWindow(lane=lane, concurrency=0, start=start, end=end, slots=profile.server.slots, rate_rps=rate,
                        steady=look.steady, speed_factor=factor)
    return records, window


_TOPICS = ("a garden", "the river", "an old map", "a small town", "the first train", "a public library")
_WORDS = ("the", "of", "and", "to", "in", "is", "for", "on", "with", "as", "at", "by", "from", "it", "an", "be",
          "this", "that", "are", "was", "or", "not", "but", "all", "can", "one", "time", "year", "day", "way")


def _conversations(n: int, seed: int) -> list[list[tuple[str, str]]]:
    """``n`` conversations of 1-4 exchanges, each (user message, answer), words drawn from ``seed``."""
    rng = random.Random(f"dataset:{seed}")
    out = []
    for c in range(n):
        topic = rng.choice(_TOPICS)
        turns = []
        for t in range(rng.randint(1, 4)):
            ask = f"Question {t + 1} of conversation {c} about {topic}: " + " ".join(
                rng.choice(_WORDS) for _ in range(rng.randint(20, 160))) + "?"
            answer = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(16, 120))) + "."
            turns.append((ask, answer))
        out.append(turns)
    return out


def generate_sharegpt(path: Path, n: int = 40, seed: int = 0) -> Path:
    """A ShareGPT-format JSON array of generated conversations (``human``/``gpt`` turns)."""
    items = [{"id": f"c{i}", "conversations": [{"from": role, "value": text} for ask, answer in conv
                                               for role, text in (("human", ask), ("gpt", answer))]}
             for i, conv in enumerate(_conversations(n, seed))]
    path.write_text(json.dumps(items, indent=1) + "\n", encoding="utf-8")
    return path


def generate_openai(path: Path, n: int = 40, seed: int = 0) -> Path:
    """The same conversations as OpenAI chat JSONL (``messages``, a system message first)."""
    with path.open("w", encoding="utf-8") as fh:
        for conv in _conversations(n, seed):
            messages = [{"role": "system", "content": "You answer briefly."}]
            for ask, answer in conv:
                messages += [{"role": "user", "content": ask}, {"role": "assistant", "content": answer}]
            fh.write(json.dumps({"messages": messages}) + "\n")
    return path


def generate_prompts(path: Path, n: int = 40, seed: int = 0) -> Path:
    """The conversations' first messages as prompt JSONL, with the first answer's length in words."""
    with path.open("w", encoding="utf-8") as fh:
        for conv in _conversations(n, seed):
            ask, answer = conv[0]
            fh.write(json.dumps({"prompt": ask, "output_tokens": len(answer.split())}) + "\n")
    return path


def main(argv: list[str]) -> int:
    """Writes the shipped samples into a folder (``examples/traces``)."""
    out = Path(argv[0] if argv else "examples/traces")
    out.mkdir(parents=True, exist_ok=True)
    generate_mooncake(out / "mooncake_sample.jsonl")
    generate_burstgpt(out / "burstgpt_sample.csv")
    generate_azure(out / "azure_sample.csv")
    generate_sharegpt(out / "sharegpt_sample.json")
    generate_openai(out / "openai_sample.jsonl")
    generate_prompts(out / "prompts_sample.jsonl")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
