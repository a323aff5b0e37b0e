"""What the load generator asks a lane's runtime besides its load: ``/props``, ``/health`` round trips and
``/tokenize``, each answer optional (a failure is a missing fact, said in the evidence, never a crash).

``lane_facts``: ``/props`` (runtime build, slots, model path: the manifest's client evidence; and a slot's
context, ``default_generation_settings.n_ctx``, which bounds the prefill walk's prompts) and the median of
``round_trips`` ``/health`` round trips. A lane that names its model asks ``/props?model=M&autoload=false``: a
router-mode llama-server answers a bare ``/props`` for the router, without ``total_slots``, and the model's own
props (its slots) only when asked by name (``autoload=false``: never load a model just to describe it); a
single-model server ignores both.

``tokens_per_word``: how many tokens the lane's tokenizer makes of a word of the load generator's text
(``POST /tokenize``), so a prompt asked for in tokens is sent at that length.

``fingerprint_batch``: the logical batch (``-b``) of the fingerprint the session took of the lane (its exporter
reads the server's command line; llama-server's ``/props`` does not say it).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import aiohttp

from satbench.core.lane_evidence import manifest_lane
from satbench.core.manifest import RunManifest
from satbench.loadgen.config import LaneConfig
from satbench.loadgen.workload import PromptText

__all__ = ["LaneFacts", "fingerprint_batch", "lane_facts", "tokens_per_word"]

_ERRORS = (TimeoutError, aiohttp.ClientError, OSError, ValueError)


def _positive_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


@dataclass(frozen=True, slots=True)
class LaneFacts:
    """The manifest's client evidence of a lane (``props``, ``rtt_s``, ``evidence_error``) and a slot's context."""

    evidence: dict[str, Any]
    slot_context: int | None = None

    @property
    def slots(self) -> int | None:
        return _positive_int((self.evidence.get("props") or {}).get("total_slots"))


async def _json(session: aiohttp.ClientSession, method: str, url: str, **kwargs: Any) -> Any:
    """The JSON body of a 200 answer, else None."""
    async with session.request(method, url, **kwargs) as resp:
        return await resp.json(content_type=None) if resp.status == 200 else None


async def lane_facts(lane: LaneConfig, round_trips: int = 5) -> LaneFacts:
    """``/props`` and the ``/health`` round trips (module docstring)."""
    out: dict[str, Any] = {}
    slot_context = None
    params = {"model": lane.model, "autoload": "false"} if lane.model else None
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=3.0)) as session:
            props = await _json(session, "GET", lane.url + "/props", params=params)
            if isinstance(props, dict):
                out["props"] = {k: props[k] for k in ("build_info", "total_slots", "model_path") if k in props}
                settings = props.get("default_generation_settings")
                slot_context = _positive_int(settings.get("n_ctx")) if isinstance(settings, dict) else None
            rtts = []
            for _ in range(round_trips):
                t0 = time.perf_counter()
                async with session.get(lane.url + "/health") as resp:
                    await resp.read()
                rtts.append(time.perf_counter() - t0)
            if rtts:
                out["rtt_s"] = sorted(rtts)[len(rtts) // 2]
    except _ERRORS as exc:
        out.setdefault("evidence_error", str(exc)[:200])
    return LaneFacts(out, slot_context)


async def tokens_per_word(lane: LaneConfig, text: PromptText, words: int = 512,
                          timeout_s: float = 10.0) -> float | None:
    """Tokens per word of ``text``'s first ``words`` words as the lane's ``/tokenize`` counts them; None where
    the lane does not answer it."""
    words = min(words, text.max_tokens)
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as session:
            answer = await _json(session, "POST", lane.url + "/tokenize", json={"content": text.prompt(words)})
    except _ERRORS:
        return None
    tokens = answer.get("tokens") if isinstance(answer, dict) else None
    return len(tokens) / words if isinstance(tokens, list) and tokens else None


def fingerprint_batch(header: RunManifest, key: str) -> int | None:
    """The ``-b`` of the fingerprint the session took of lane ``key`` (module docstring); None without one."""
    measured = manifest_lane(header, key).measured
    return None if measured is None else _positive_int((measured.settings or {}).get("batch"))
