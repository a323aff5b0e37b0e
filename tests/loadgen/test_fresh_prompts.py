"""Prompts are fresh unless sharing is asked for: what a prefix cache could serve, computed from the prompts.

The truth is the prompts themselves: the longest common prefix (in words, one token each by construction) of each
prompt with every prompt sent before it, by its rung, an earlier rung, an earlier session (another run id), an
open-loop rung at another rate, a trace replayed at another factor or on another pass over its window. Outside
what is declared it is 0 words. Declared sharing is kept exactly: a shared prefix of T words opens every request
that drew it, within a session; a trace's requests share exactly the tokens their leading block ids say
(``min(k x block, both lengths)`` for k equal leading ids), computed from the ids, not from ``TracePrompts``.
The bodies are built by the load generator's own paths (``UserWorkload`` + ``build_body`` as a closed rung's
users do, ``OpenStepRun._request``, ``TraceStepRun._request``). Against the simulator with a host-memory prompt
cache (``--cache-ram``), a second session of the same ladder is served nothing but the start token.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from satbench.core.records import read_records
from satbench.loadgen.config import LoadgenConfig
from satbench.loadgen.metrics import LoadgenMetrics
from satbench.loadgen.open_step import OpenStepRun
from satbench.loadgen.progress import Progress
from satbench.loadgen.runner import run_ladder
from satbench.loadgen.trace_step import TraceStepRun
from satbench.loadgen.traces import Trace, TracePrompts, TraceRequest
from satbench.loadgen.workload import PromptText, UserWorkload, build_body, max_prompt_tokens
from testkit.sim import InProcessSimulator

LANE = {"name": "dense", "url": "http://127.0.0.1:9", "api": "llamacpp"}


def _config(**workload: Any) -> LoadgenConfig:
    return LoadgenConfig.model_validate({"lanes": [LANE], "metrics_port": None, "progress": False,
                                         "arrival": {"process": "poisson", "rates": [1.0]},
                                         "workload": {"seed": 3, **workload}})


def _lcp(a: list[str], b: list[str]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _served(prompts: Iterable[list[str]]) -> list[int]:
    """Each prompt's longest common prefix with any prompt before it (what an unbounded prefix cache serves)."""
    seen: list[list[str]] = []
    out = []
    for p in prompts:
        out.append(max((_lcp(p, q) for q in seen), default=0))
        seen.append(p)
    return out


def _closed(cfg: LoadgenConfig, text: PromptText, rungs: tuple[int, ...], per_user: int) -> list[tuple[Any, str]]:
    """(spec, prompt) of each request of a closed ladder, built as ``StepRun._user`` builds them."""
    out = []
    for c in rungs:
        for user in range(c):
            workload = UserWorkload(cfg.workload, "dense", c, user, text)
            for _ in range(per_user):
                spec = workload.next_spec()
                body = json.loads(build_body("llamacpp", "", spec, text, cfg.workload, f"u{user}"))
                out.append((spec, body["prompt"]))
    return out


def _step_kwargs(cfg: LoadgenConfig, run_id: str, text: PromptText | None = None) -> dict[str, Any]:
    return {"config": cfg, "lane": cfg.lanes[0], "run_id": run_id, "client": None, "writer": None, "clock": None,
            "metrics": LoadgenMetrics(CollectorRegistry()), "progress": Progress(False),
            "text": text or PromptText(64, cfg.workload.seed, nonce=run_id)}


def _open(cfg: LoadgenConfig, text: PromptText, rate: float, n: int) -> list[str]:
    step = OpenStepRun(rate=rate, **_step_kwargs(cfg, text.nonce, text))
    return [json.loads(step._request(i)[1])["prompt"] for i in range(n)]


def test_rungs_sessions_and_rates_send_no_prompt_an_earlier_one_began_with() -> None:
    cfg = _config(prompt_tokens={"kind": "lognormal", "median": 200, "sigma": 0.6, "low": 16, "high": 800})
    prompts: list[str] = []
    for run_id in ("20261205T000000Z-a", "20261205T000000Z-b"):  # two sessions, the same config
        text = PromptText(max_prompt_tokens(cfg.workload) + 8, cfg.workload.seed, nonce=run_id)
        prompts += [p for _, p in _closed(cfg, text, (1, 2, 4, 8), 6)]
        for rate in (1.0, 2.0, 2.5):
            prompts += _open(cfg, text, rate, 12)
    words = [p.split(" ") for p in prompts]
    served = _served(words)
    assert len(words) == 2 * (15 * 6 + 36) and sum(map(len, words)) > 40_000
    assert max(served) == 0, [(i, n) for i, n in enumerate(served) if n][:5]
    # the lengths are the seed's alone: the same on every run, whatever its id
    other = PromptText(max_prompt_tokens(cfg.workload) + 8, cfg.workload.seed, nonce="another")
    assert [len(p.split(" ")) for _, p in _closed(cfg, other, (1, 2), 6)] == [len(w) for w in words[:18]]


def test_a_declared_shared_prefix_is_shared_exactly_within_a_session_and_new_in_the_next() -> None:
    tokens = 40
    cfg = _config(prompt_tokens={"value": 120}, shared_prefix={"share": 0.5, "prefixes": 3, "tokens": tokens})
    sent: list[tuple[str, int | None, list[str]]] = []
    for run_id in ("20261205T000000Z-a", "20261205T000000Z-b"):
        text = PromptText(128, cfg.workload.seed, nonce=run_id)
        sent += [(run_id, spec.prefix, p.split(" ")) for spec, p in _closed(cfg, text, (1, 2, 4), 5)]
    opened = {prefix for _, prefix, _ in sent if prefix is not None}
    assert opened == {0, 1, 2} and sum(prefix is None for _, prefix, _ in sent) > 10
    for i, (run, prefix, words) in enumerate(sent):
        for earlier_run, earlier_prefix, earlier in sent[:i]:
            declared = tokens if prefix is not None and (earlier_run, earlier_prefix) == (run, prefix) else 0
            assert _lcp(words, earlier) == declared, (i, run, prefix, earlier_prefix)


def _trace(block: int) -> Trace:
    """60 requests, half opening with a shared 2-block system prompt, some sharing a third block, each with blocks
    of its own; lengths cut inside their last block."""
    rng = random.Random(5)
    reqs, nid = [], 1000
    for i in range(60):
        ids = [1, 2] + ([3] if rng.random() < 0.3 else []) if rng.random() < 0.5 else []
        own = rng.randint(1, 3)
        ids += range(nid, nid + own)
        nid += own
        reqs.append(TraceRequest(i * 0.5, len(ids) * block - rng.randint(0, block // 2), 8, tuple(ids), i + 1))
    return Trace("t.jsonl", "mooncake", "0" * 64, 0, tuple(reqs), block_tokens=block)


def _implied(requests: list[TraceRequest], block: int, bos: int = 1) -> list[int]:
    """The words each request shares with one before it, from the block ids alone: k equal leading ids share
    k blocks, cut to both prompts' lengths (input tokens less the start token)."""
    out = []
    for i, r in enumerate(requests):
        best = 0
        for q in requests[:i]:
            k = _lcp([str(h) for h in r.hash_ids], [str(h) for h in q.hash_ids])
            best = max(best, min(k * block, r.input_tokens - bos, q.input_tokens - bos) if k else 0)
        out.append(best)
    return out


def test_a_trace_replay_shares_exactly_what_its_block_ids_say_and_nothing_with_another() -> None:
    block = 16
    trace = _trace(block)
    n = len(trace.requests)
    cfg = _config()
    prompts = TracePrompts(0, block, nonce="20261205T000000Z-a:dense")
    replays: dict[tuple[float, int], list[list[str]]] = {}
    for factor in (1.0, 2.0):
        step = TraceStepRun(trace=trace, factor=factor, prompts=prompts, warmup_s=1.0,
                            **_step_kwargs(cfg, "20261205T000000Z-a"))
        for index in range(2 * n):  # two passes over the window
            replays.setdefault((factor, index // n), []).append(json.loads(step._request(index)[1])["prompt"]
                                                                .split(" "))
    implied = _implied(list(trace.requests), block)
    assert sum(implied) > 0.2 * sum(r.input_tokens for r in trace.requests)  # the trace does share
    earlier: list[list[str]] = []
    for key, words in replays.items():
        assert [len(w) for w in words] == [r.input_tokens - 1 for r in trace.requests]
        assert _served(words) == implied, key  # within a replay: exactly the ids' sharing
        assert max((_lcp(w, e) for w in words for e in earlier), default=0) == 0, key  # none with another
        earlier += words


@pytest.mark.slow
def test_a_second_session_gets_nothing_from_a_host_memory_prompt_cache(tmp_path: Path) -> None:
    """The simulator's prompt cache (llama-server's ``cache_prompt`` with ``--cache-ram``: every prompt a slot gives
    up kept) serves each request the longest prefix any earlier prompt shares; over two sessions of a 3-rung
    ladder it serves the start token and nothing more, and each step says so (``cached_prompt_tokens``)."""
    cfg = LoadgenConfig.model_validate({
        "lanes": [{**LANE, "url": "http://127.0.0.1:9"}], "ladder": {"concurrency": [1, 2, 4]},
        "warmup_s": 0.2, "min_window_s": 0.6, "max_window_s": 0.8, "min_requests": 2, "drain_timeout_s": 2.0,
        "progress": False, "metrics_port": None, "max_loop_lag_s": 1.0,
        "workload": {"output_tokens": {"value": 4}, "prompt_tokens": {"value": 300}}})
    sim = InProcessSimulator("dense")
    sim.profile = dataclasses.replace(sim.profile, server=dataclasses.replace(sim.profile.server,
                                                                              cache_ram_tokens=1 << 24))
    with sim:
        lane = cfg.lanes[0].model_copy(update={"url": sim.url})
        cfg = cfg.model_copy(update={"lanes": [lane]})
        for run in ("a", "b"):
            asyncio.run(run_ladder(cfg, tmp_path / run, run_id=f"20261205T000000Z-{run}"))
    records = [r for run in ("a", "b") for r in read_records(tmp_path / run / "records.jsonl") if r.ok]
    assert len(records) > 20 and all(r.prompt_tokens == 300 for r in records)
    assert max(r.cached_prompt_tokens or 0 for r in records) <= 1  # the start token every prompt opens with
    for run in ("a", "b"):
        steps = json.loads((tmp_path / run / "steps.json").read_text())
        assert [s["concurrency"] for s in steps if not s.get("drift_reference")] == [1, 2, 4]
        assert all(s["cached_prompt_tokens"] is not None and s["cached_prompt_tokens"] <= s["requests"]
                   for s in steps)
