"""Each slot's context, from the server's own count of the workload's longest request, with a stated margin.

Why not the nominal lengths: the workload's prompt lengths are word counts of the load generator's text
(``loadgen.workload``), which a real vocabulary encodes as roughly one token each, and the server adds its
own: the BOS token, the chat template's role markers around every message, the request's unique head
(``3fa9c21e u12:``). Sized from the nominal figures, a prompt of 1000 plus 24 output tokens asks exactly 1024,
and every such request overflows a 1024-token slot: llama.cpp stops the answer at the slot's end
(``stop_type: limit``). So the tune builds the workload's longest request exactly as the load generator
would (``build_body``: its longest prompt, or the prefill probe, with a shared prefix where the workload
has one, and in a conversation the deepest turn with every earlier exchange at its longest, each answer the
prepared text at the longest output), sends it through the lane's own template and tokenizer once, on a
server started for that alone (``POST /apply-template`` for a chat lane, then ``POST /tokenize`` with
``add_special``: BOS included), and sets

    ctx_per_slot = prompt tokens + longest output + margin (``tune.ctx_margin``, default 64), rounded up to 256

(llama.cpp pads a context to 256 cells). The margin covers what one count cannot: a longer unique head on
another user's request, an answer that re-tokenizes a few tokens longer inside a conversation. A runtime
without those routes (404) gets the nominal figure plus the margin, and the tune says so.

A truncated answer during a walk is a finding, not a silent ``limit``: ``truncated_requests`` counts the
records the server ended before the asked output (``extra.asked_output_tokens`` on a request that ignored
EOS, so only the context could have stopped it) or refused for context (an error naming the context size).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from satbench.core.api import ApiFlavour
from satbench.core.records import read_records
from satbench.loadgen.config import WorkloadConfig
from satbench.loadgen.workload import PromptText, RequestSpec, build_body, max_prompt_tokens

__all__ = ["ContextNeed", "count_prompt_tokens", "longest_request", "need_from_count", "round_context",
           "truncated_requests"]

_HEAD_USER, _HEAD_INDEX = 99999, 999999
_HEAD = "0a1b2c3d"  # the widest unique head a walk sends (``0a1b2c3d u99999:``): hex digits, letters and digits apart
_CONTEXT_WORDS = ("context size", "context length", "exceeds the available context")


@dataclass(frozen=True, slots=True)
class ContextNeed:
    """The context per slot the tune sets, and how it was told."""

    ctx_per_slot: int
    prompt_tokens: int | None
    output_tokens: int
    margin: int
    source: str  # server | nominal | config
    detail: str


def round_context(tokens: int) -> int:
    return 256 * math.ceil(max(1, tokens) / 256)


def _longest_output(workload: WorkloadConfig) -> int:
    out = workload.output_tokens
    return out.value if out.kind == "fixed" else out.high


def longest_request(workload: WorkloadConfig, api: ApiFlavour) -> dict[str, Any]:
    """The body of the workload's longest request as the load generator builds it (module docstring)."""
    prompt, output = max_prompt_tokens(workload), _longest_output(workload)
    text = PromptText(max(prompt, output) + 16, workload.seed)
    prefix = 0 if workload.shared_prefix is not None else None
    history: tuple[tuple[RequestSpec, str], ...] = ()
    turns = workload.conversation.turns if workload.conversation is not None else 1
    for turn in range(turns - 1):
        earlier = RequestSpec(_HEAD_USER, _HEAD_INDEX - turns + turn, prompt, output, False,
                              prefix if turn == 0 else None, head=_HEAD)
        history = (*history, (earlier, " " + text.prompt(output)))
    spec = RequestSpec(_HEAD_USER, _HEAD_INDEX, prompt, output, False, prefix if not history else None, history,
                       head=_HEAD)
    return dict(json.loads(build_body(api, "", spec, text, workload, "tune")))


def count_prompt_tokens(client: httpx.Client, url: str, api: ApiFlavour, body: dict[str, Any]) -> int | None:
    """The server's token count of ``body``'s prompt through its template, BOS included; None where the
    runtime has no such routes."""
    if api == "openai-chat":
        resp = client.post(f"{url}/apply-template", json={"messages": body["messages"]})
        if resp.status_code == 404:
            return None
        resp.raise_for_status()
        prompt = resp.json()["prompt"]
    else:
        prompt = body["prompt"]
    resp = client.post(f"{url}/tokenize", json={"content": prompt, "add_special": True, "parse_special": True})
    if resp.status_code == 404:
        return None
    resp.raise_for_status()
    tokens = resp.json().get("tokens")
    return len(tokens) if isinstance(tokens, list) else None


def need_from_count(workload: WorkloadConfig, margin: int, count: Callable[[], int | None],
                    unreachable: str | None = None) -> ContextNeed:
    """The context per slot from the server's count (``count``), else from the nominal lengths, both with
    ``margin``; ``unreachable`` says why no server could be asked."""
    output = _longest_output(workload)
    turns = workload.conversation.turns if workload.conversation is not None else 1
    tokens = None
    why = unreachable
    if why is None:
        try:
            tokens = count()
        except (httpx.HTTPError, ValueError, KeyError) as exc:
            why = f"the server's count failed ({type(exc).__name__}: {exc})"
        else:
            if tokens is None:
                why = "the runtime has no /tokenize or /apply-template"
    if tokens is not None:
        need = tokens + output + margin
        return ContextNeed(round_context(need), tokens, output, margin, "server",
                           f"longest request {tokens} prompt tokens (the server's count through the lane's "
                           f"template, BOS included) + {output} output + {margin} margin = {need}, rounded up to 256")
    nominal = (max_prompt_tokens(workload) + output) * turns
    need = nominal + margin
    return ContextNeed(round_context(need), None, output, margin, "nominal",
                       f"{why}: the nominal longest request {nominal} tokens + {margin} margin = {need}, "
                       "rounded up to 256 (template and BOS not counted)")


def truncated_requests(records: Path, ignore_eos: bool) -> tuple[int, list[str]]:
    """Requests the server cut short at its context during a walk, and a few of them said (module docstring)."""
    count, said = 0, list[str]()
    try:
        for r in read_records(records):
            asked = r.extra.get("asked_output_tokens")
            cut = ignore_eos and r.ok and isinstance(asked, int) and r.output_tokens < asked
            refused = not r.ok and any(w in (r.error or "").lower() for w in _CONTEXT_WORDS)
            if cut or refused:
                count += 1
                if len(said) < 3:
                    said.append(f"c={r.concurrency} {r.request_id}: " + (
                        f"{r.output_tokens} of {asked} output tokens" if cut else (r.error or "")[:160]))
    except OSError:
        return 0, []
    return count, said
