"""Response bodies shaped exactly like llama-server's (field names and order from the recorded fixtures).

Pure builders: they take an engine ``Request`` plus what the HTTP layer knows (model name, ids) and return
JSON-ready dicts or pre-encoded SSE lines. Streaming chunks are built with string formatting from
pre-escaped token text, because they are the hot path (one per token per stream).

Timings follow llama-server: ``prompt_n`` counts the evaluated prompt tokens and ``cache_n`` the reused
ones; the generation rate leaves out the first token, which comes from the last prompt batch's logits and
costs no decode step (``predicted_per_token_ms = predicted_ms / (predicted_n - 1)``, 0 for one token).
"""

from __future__ import annotations

import json
import random
import string
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from satbench.simulator.engine import Request
from satbench.simulator.tokens import BOS, VOCAB, token_at

__all__ = [
    "GENERATION_SETTINGS",
    "ChatIds",
    "completion_chunk",
    "completion_final",
    "completion_progress_chunk",
    "error_body",
    "finish_reason",
    "generation_settings",
    "merge_settings",
    "new_completion_id",
    "output_text",
    "pick_fields",
    "progress",
    "sse",
    "timings",
    "usage",
]

_VOCAB_JSON = tuple(json.dumps(v, ensure_ascii=False) for v in VOCAB)
_ID_CHARS = string.ascii_letters + string.digits

GENERATION_SETTINGS: dict[str, Any] = {
    "seed": 4294967295, "temperature": 0.800000011920929, "dynatemp_range": 0.0, "dynatemp_exponent": 1.0,
    "top_k": 40, "top_p": 0.949999988079071, "min_p": 0.05000000074505806, "top_n_sigma": -1.0,
    "xtc_probability": 0.0, "xtc_threshold": 0.10000000149011612, "typical_p": 1.0, "repeat_last_n": 64,
    "repeat_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0, "dry_multiplier": 0.0,
    "dry_base": 1.75, "dry_allowed_length": 2, "dry_penalty_last_n": 64,
    "dry_sequence_breakers": ["\n", ":", "\"", "*"], "mirostat": 0, "mirostat_tau": 5.0,
    "mirostat_eta": 0.10000000149011612, "adaptive_target": -1.0, "adaptive_decay": 0.8999999761581421,
    "stop": [], "max_tokens": -1, "n_predict": -1, "n_keep": 0, "n_discard": 0, "ignore_eos": False,
    "stream": False, "logit_bias": [], "n_probs": 0, "min_keep": 0, "grammar": "", "grammar_lazy": False,
    "grammar_triggers": [], "preserved_tokens": [], "chat_format": "Content-only",
    "reasoning_format": "deepseek", "reasoning_in_content": False, "generation_prompt": "",
    "samplers": ["penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature"],
    "speculative.types": "none", "timings_per_token": False, "post_sampling_probs": False,
    "backend_sampling": False, "lora": [],
}  # fmt: skip
# /props and /slots list the sampling params without these request-only keys
_PARAMS_ONLY_DROP = ("dry_sequence_breakers", "stop", "logit_bias", "grammar", "grammar_lazy",
                     "grammar_triggers", "preserved_tokens")  # fmt: skip
# sampling settings held as C floats by llama-server, so 0.8 reads back 0.800000011920929
_FLOAT32 = {k for k, v in GENERATION_SETTINGS.items() if isinstance(v, float)}
_ECHOED = {k for k in GENERATION_SETTINGS if k not in ("max_tokens", "n_predict", "stream", "ignore_eos",
                                                        "logit_bias", "chat_format", "samplers", "lora")}


def _f32(x: float) -> float:
    return float(struct.unpack("f", struct.pack("f", x))[0])


def merge_settings(body: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """The sampling settings of one request: server defaults, then the request's own values (as echoed)."""
    out = dict(GENERATION_SETTINGS)
    out.update(defaults)
    for key in _ECHOED:
        if key not in body:
            continue
        value, ref = body[key], GENERATION_SETTINGS[key]
        if isinstance(ref, bool):
            if isinstance(value, bool):
                out[key] = value
        elif isinstance(ref, float):
            if isinstance(value, int | float) and not isinstance(value, bool):
                out[key] = _f32(float(value))
        elif isinstance(ref, int):
            if isinstance(value, int) and not isinstance(value, bool):
                out[key] = value if key != "seed" or value >= 0 else GENERATION_SETTINGS["seed"]
        elif isinstance(ref, str):
            if isinstance(value, str):
                out[key] = value
        elif key == "stop":
            if isinstance(value, str):
                out[key] = [value]
            elif isinstance(value, list) and all(isinstance(v, str) for v in value):
                out[key] = list(value)
        elif isinstance(value, list):
            out[key] = value
    return out


def generation_settings(req: Request | None, stream: bool, for_params: bool = False) -> dict[str, Any]:
    out = dict(GENERATION_SETTINGS)
    if req is not None:
        if req.spec.params:
            out.update(req.spec.params)
        out["max_tokens"] = out["n_predict"] = req.spec.max_tokens
        out["ignore_eos"] = req.spec.ignore_eos
        if req.spec.ignore_eos:
            out["logit_bias"] = [{"bias": None, "token": 2}]  # llama-server bans EOS this way
    out["stream"] = stream
    if for_params:
        for key in _PARAMS_ONLY_DROP:
            out.pop(key, None)
    return out


def new_completion_id(rng: random.Random) -> str:
    return "chatcmpl-" + "".join(rng.choices(_ID_CHARS, k=32))


def sse(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


def error_body(code: int, message: str, kind: str, **extra: Any) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "type": kind, **extra}}


def output_text(req: Request) -> str:
    key = req.text_key
    return "".join(token_at(key, i)[1] for i in range(req.output))


def output_ids(req: Request) -> list[int]:
    key = req.text_key
    return [token_at(key, i)[0] for i in range(req.output)]


def finish_reason(req: Request) -> str:
    return "length" if req.finish_reason in ("length", "cancelled") else "stop"


def timings(req: Request, n_out: int | None = None, at: float | None = None) -> dict[str, float | int]:
    """The request's ``timings``; with ``n_out``/``at``, as they stood when that token was sent."""
    p_n, p_ms = req.prompt_n, req.prompt_ms
    g_n, g_ms = req.output, req.predicted_ms
    if at is not None:
        if req.prompt_end is None or at < req.prompt_end:
            p_ms = (at - req.prompt_start) * 1000.0 if req.prompt_start is not None else 0.0
        g_n = n_out if n_out is not None else g_n
        g_ms = (at - req.first_token) * 1000.0 if req.first_token is not None and g_n else 0.0
    return {
        "cache_n": req.cache_n,
        "prompt_n": p_n,
        "prompt_ms": round(max(p_ms, 0.0), 3),
        "prompt_per_token_ms": p_ms / p_n if p_n and p_ms > 0 else 0.0,
        "prompt_per_second": 1e3 * p_n / p_ms if p_ms > 0 else 0.0,
        "predicted_n": g_n,
        "predicted_ms": round(max(g_ms, 0.0), 3),
        "predicted_per_token_ms": g_ms / (g_n - 1) if g_n > 1 and g_ms > 0 else 0.0,
        "predicted_per_second": 1e3 * (g_n - 1) / g_ms if g_n > 1 and g_ms > 0 else 0.0,
    }


def progress(req: Request, processed: int, at: float) -> tuple[dict[str, Any], dict[str, int]]:
    """``timings`` and ``prompt_progress`` of one prompt progress report (``processed`` counts the cache)."""
    ms = (at - req.prompt_start) * 1000.0 if req.prompt_start is not None else 0.0
    ms = max(ms, 0.0)
    n = processed - req.cache_n
    t = {
        "cache_n": req.cache_n, "prompt_n": n, "prompt_ms": round(ms, 3),
        "prompt_per_token_ms": ms / n if n and ms > 0 else 0.0,
        "prompt_per_second": 1e3 * n / ms if ms > 0 else 0.0,
        "predicted_n": 0, "predicted_ms": 0.0, "predicted_per_token_ms": 0.0, "predicted_per_second": 0.0,
    }  # fmt: skip
    pp = {"total": req.spec.prompt_tokens, "cache": req.cache_n, "processed": processed, "time_ms": int(ms)}
    return t, pp


def usage(reqs: Sequence[Request]) -> dict[str, Any]:
    p = reqs[0].spec.prompt_tokens
    out = sum(r.output for r in reqs)
    return {
        "completion_tokens": out,
        "prompt_tokens": p,
        "total_tokens": p + out,
        "prompt_tokens_details": {"cached_tokens": sum(r.cache_n for r in reqs)},
    }


def merged_timings(reqs: Sequence[Request]) -> dict[str, float | int]:
    if len(reqs) == 1:
        return timings(reqs[0])
    parts = [timings(r) for r in reqs]
    out = dict(parts[0])
    for key in ("cache_n", "prompt_n", "predicted_n"):
        out[key] = sum(int(p[key]) for p in parts)
    for key in ("prompt_ms", "predicted_ms"):
        out[key] = max(float(p[key]) for p in parts)
    return out


def _json(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


def _pieces(req: Request, n_out: int, first: int | None) -> tuple[str, str]:
    """The JSON text and the comma-separated ids of tokens ``first..n_out`` (1-based; the ``n_out``-th alone
    when ``first`` is None): one stream event that carries several tokens (``[server] stream_interval``)."""
    if first is None or first >= n_out:
        tid, _ = token_at(req.text_key, n_out - 1)
        return _VOCAB_JSON[tid - 1000], str(tid)
    tids = [token_at(req.text_key, i)[0] for i in range(first - 1, n_out)]
    return json.dumps("".join(VOCAB[t - 1000] for t in tids), ensure_ascii=False), ",".join(map(str, tids))


def _usage(req: Request, n_out: int) -> str:
    """vLLM's ``continuous_usage_stats``: the counts so far, in every chunk."""
    p = req.spec.prompt_tokens
    return f',"usage":{{"prompt_tokens":{p},"completion_tokens":{n_out},"total_tokens":{p + n_out}}}'


def completion_chunk(req: Request, n_out: int, index: int = 0, timing: Mapping[str, Any] | None = None,
                     first: int | None = None) -> bytes:
    """One native ``/completion`` SSE event for the ``n_out``-th token (1-based), or tokens ``first..n_out``."""
    text, tids = _pieces(req, n_out, first)
    tail = f',"timings":{_json(timing)}' if timing is not None else ""
    return (
        f'data: {{"index":{index},"content":{text},"tokens":[{tids}],"stop":false,"id_slot":-1,'
        f'"tokens_predicted":{n_out},"tokens_evaluated":{req.spec.prompt_tokens}{tail}}}\n\n'
    ).encode()


def completion_progress_chunk(req: Request, processed: int, at: float, index: int = 0) -> bytes:
    t, pp = progress(req, processed, at)
    return (
        f'data: {{"index":{index},"content":"","tokens":[0],"stop":false,"id_slot":-1,"tokens_predicted":0,'
        f'"tokens_evaluated":{req.spec.prompt_tokens},"timings":{_json(t)},"prompt_progress":{_json(pp)}}}\n\n'
    ).encode()


def completion_final(
    req: Request, model: str, prompt_text: str, stream: bool, index: int = 0, return_tokens: bool = False
) -> dict[str, Any]:
    """The last ``/completion`` event when streaming, or the whole body when not."""
    return {
        "index": index,
        "content": "" if stream else output_text(req),
        "tokens": output_ids(req) if return_tokens and not stream else [],
        "id_slot": req.slot if req.slot is not None else -1,
        "stop": True,
        "model": model,
        "tokens_predicted": req.output,
        "tokens_evaluated": req.spec.prompt_tokens,
        "generation_settings": generation_settings(req, stream),
        "prompt": f"{BOS} {prompt_text}",
        "has_new_line": False,
        "truncated": req.truncated,
        "stop_type": "limit" if finish_reason(req) == "length" else "eos",
        "stopping_word": "",
        "tokens_cached": req.spec.prompt_tokens + max(req.output - 1, 0),
        "timings": timings(req),
    }


def pick_fields(body: Mapping[str, Any], fields: Sequence[str]) -> dict[str, Any]:
    """``response_fields``: only those keys, a ``a/b`` path read from inside and kept under its path."""
    out: dict[str, Any] = {}
    for path in fields:
        node: Any = body
        for part in str(path).split("/"):
            if not isinstance(node, Mapping) or part not in node:
                break
            node = node[part]
        else:
            out[str(path)] = node
    return out


@dataclass(frozen=True)
class ChatIds:
    """What every OpenAI-style chunk of one response repeats."""

    id: str
    created: int
    model: str
    fingerprint: str

    def _tail(self) -> str:
        return (f'"created":{self.created},"model":{json.dumps(self.model)},'
                f'"system_fingerprint":{json.dumps(self.fingerprint)},"object":"text_completion",'
                f'"id":"{self.id}"')  # fmt: skip

    def text_chunk(self, req: Request, n_out: int, index: int = 0, timing: Mapping[str, Any] | None = None,
                   first: int | None = None, usage: bool = False) -> bytes:
        text, _ = _pieces(req, n_out, first)
        tail = f',"timings":{_json(timing)}' if timing is not None else ""
        if usage:
            tail += _usage(req, n_out)
        return (
            f'data: {{"choices":[{{"text":{text},"index":{index},"logprobs":null,'
            f'"finish_reason":null}}],{self._tail()}{tail}}}\n\n'
        ).encode()

    def text_progress_chunk(self, req: Request, processed: int, at: float, index: int = 0) -> bytes:
        t, pp = progress(req, processed, at)
        return (
            f'data: {{"choices":[{{"text":"","index":{index},"logprobs":null,"finish_reason":null}}],'
            f'{self._tail()},"timings":{_json(t)},"prompt_progress":{_json(pp)}}}\n\n'
        ).encode()

    def text_final(self, reqs: Sequence[Request], stream: bool, include_usage: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {
            "choices": [
                {
                    "text": "" if stream else output_text(r),
                    "index": i,
                    "logprobs": None,
                    "finish_reason": finish_reason(r),
                }
                for i, r in enumerate(reqs)
            ],
            "created": self.created,
            "model": self.model,
            "system_fingerprint": self.fingerprint,
            "object": "text_completion",
        }
        if include_usage:
            out["usage"] = usage(reqs)
        out["id"] = self.id
        out["timings"] = merged_timings(reqs)
        return out

    def _chat_head(self) -> str:
        return f'"created":{self.created},"id":"{self.id}","model":{json.dumps(self.model)},'

    def _chat_tail(self) -> str:
        return f'"system_fingerprint":{json.dumps(self.fingerprint)},"object":"chat.completion.chunk"'

    def chat_role_chunk(self, index: int = 0) -> bytes:
        return (
            f'data: {{"choices":[{{"finish_reason":null,"index":{index},"delta":{{"role":"assistant",'
            f'"content":null}}}}],{self._chat_head()}{self._chat_tail()}}}\n\n'
        ).encode()

    def chat_progress_chunk(self, req: Request, processed: int, at: float, index: int = 0) -> bytes:
        t, pp = progress(req, processed, at)
        return (
            f'data: {{"choices":[{{"finish_reason":null,"index":{index},"delta":{{"role":"assistant",'
            f'"content":null}}}}],{self._chat_head()}{self._chat_tail()},"timings":{_json(t)},'
            f'"prompt_progress":{_json(pp)}}}\n\n'
        ).encode()

    def chat_chunk(self, req: Request, n_out: int, index: int = 0, timing: Mapping[str, Any] | None = None,
                   first: int | None = None, usage: bool = False) -> bytes:
        text, _ = _pieces(req, n_out, first)
        tail = f',"timings":{_json(timing)}' if timing is not None else ""
        if usage:
            tail += _usage(req, n_out)
        return (
            f'data: {{"choices":[{{"finish_reason":null,"index":{index},"delta":{{"content":'
            f"{text}}}}}],{self._chat_head()}{self._chat_tail()}{tail}}}\n\n"
        ).encode()

    def chat_finals(
        self, reqs: Sequence[Request], include_usage: bool, index: int | None = None
    ) -> list[dict[str, Any]]:
        """The finish chunk of one choice, or of all with the usage chunk when ``include_usage`` is set."""
        base = {"created": self.created, "id": self.id, "model": self.model,
                "system_fingerprint": self.fingerprint, "object": "chat.completion.chunk"}  # fmt: skip
        out: list[dict[str, Any]] = []
        for i, req in enumerate(reqs):
            finish: dict[str, Any] = {
                "choices": [{"finish_reason": finish_reason(req), "index": i if index is None else index,
                             "delta": {}}],
                **base,
            }
            if not include_usage:
                finish["timings"] = timings(req)
            out.append(finish)
        if include_usage:
            out.append({"choices": [], **base, "usage": usage(reqs), "timings": merged_timings(reqs)})
        return out

    def chat_body(self, reqs: Sequence[Request]) -> dict[str, Any]:
        return {
            "choices": [
                {
                    "finish_reason": finish_reason(r),
                    "index": i,
                    "message": {"role": "assistant", "content": output_text(r)},
                }
                for i, r in enumerate(reqs)
            ],
            "created": self.created,
            "model": self.model,
            "system_fingerprint": self.fingerprint,
            "object": "chat.completion",
            "usage": usage(reqs),
            "id": self.id,
            "timings": merged_timings(reqs),
        }
