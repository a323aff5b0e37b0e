"""Response bodies shaped exactly like llama-server's (field names and order from the recorded fixtures).

Pure builders: they take an engine ``Request`` plus what the HTTP layer knows (model name, ids) and return
JSON-ready dicts or pre-encoded SSE lines. Streaming chunks are built with string formatting from
pre-escaped token text, because they are the hot path (one per token per stream).
"""

from __future__ import annotations

import json
import random
import string
from dataclasses import dataclass
from typing import Any

from simulator.engine import Request
from simulator.tokens import BOS, VOCAB, token_at

__all__ = [
    "GENERATION_SETTINGS",
    "ChatIds",
    "completion_chunk",
    "completion_final",
    "error_body",
    "finish_reason",
    "generation_settings",
    "new_completion_id",
    "output_text",
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


def generation_settings(req: Request | None, stream: bool, for_params: bool = False) -> dict[str, Any]:
    out = dict(GENERATION_SETTINGS)
    if req is not None:
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


def sse(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


def error_body(code: int, message: str, kind: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "type": kind}}


def output_text(req: Request) -> str:
    return "".join(token_at(req.seq, i)[1] for i in range(req.output))


def finish_reason(req: Request) -> str:
    return "length" if req.finish_reason in ("length", "cancelled") else "stop"


def timings(req: Request) -> dict[str, float | int]:
    p_ms, g_ms = req.prompt_ms, req.predicted_ms
    p_n, g_n = req.prompt_done, req.output
    return {
        "cache_n": 0,
        "prompt_n": p_n,
        "prompt_ms": round(p_ms, 3),
        "prompt_per_token_ms": p_ms / p_n if p_n else 0.0,
        "prompt_per_second": 1e3 * p_n / p_ms if p_ms > 0 else 0.0,
        "predicted_n": g_n,
        "predicted_ms": round(g_ms, 3),
        "predicted_per_token_ms": g_ms / g_n if g_n else 0.0,
        "predicted_per_second": 1e3 * g_n / g_ms if g_ms > 0 else 0.0,
    }


def usage(req: Request) -> dict[str, Any]:
    p = req.spec.prompt_tokens
    return {
        "completion_tokens": req.output,
        "prompt_tokens": p,
        "total_tokens": p + req.output,
        "prompt_tokens_details": {"cached_tokens": 0},
    }


def completion_chunk(req: Request, n_out: int) -> bytes:
    """One native ``/completion`` SSE event for the ``n_out``-th token (1-based)."""
    tid, _ = token_at(req.seq, n_out - 1)
    text = _VOCAB_JSON[tid - 1000]
    return (
        f'data: {{"index":0,"content":{text},"tokens":[{tid}],"stop":false,"id_slot":-1,'
        f'"tokens_predicted":{n_out},"tokens_evaluated":{req.spec.prompt_tokens}}}\n\n'
    ).encode()


def completion_final(req: Request, model: str, prompt_text: str, stream: bool) -> dict[str, Any]:
    """The last ``/completion`` event when streaming, or the whole body when not."""
    return {
        "index": 0,
        "content": "" if stream else output_text(req),
        "tokens": [],
        "id_slot": req.slot if req.slot is not None else -1,
        "stop": True,
        "model": model,
        "tokens_predicted": req.output,
        "tokens_evaluated": req.spec.prompt_tokens,
        "generation_settings": generation_settings(req, stream),
        "prompt": f"{BOS} {prompt_text}",
        "has_new_line": False,
        "truncated": False,
        "stop_type": "limit" if finish_reason(req) == "length" else "eos",
        "stopping_word": "",
        "tokens_cached": req.spec.prompt_tokens + max(req.output - 1, 0),
        "timings": timings(req),
    }


@dataclass(frozen=True)
class ChatIds:
    """What every OpenAI-style chunk of one response repeats."""

    id: str
    created: int
    model: str
    fingerprint: str

    def text_chunk(self, req: Request, n_out: int) -> bytes:
        tid, _ = token_at(req.seq, n_out - 1)
        return (
            f'data: {{"choices":[{{"text":{_VOCAB_JSON[tid - 1000]},"index":0,"logprobs":null,'
            f'"finish_reason":null}}],"created":{self.created},"model":{json.dumps(self.model)},'
            f'"system_fingerprint":{json.dumps(self.fingerprint)},"object":"text_completion",'
            f'"id":"{self.id}"}}\n\n'
        ).encode()

    def text_final(self, req: Request, stream: bool) -> dict[str, Any]:
        return {
            "choices": [
                {
                    "text": "" if stream else output_text(req),
                    "index": 0,
                    "logprobs": None,
                    "finish_reason": finish_reason(req),
                }
            ],
            "created": self.created,
            "model": self.model,
            "system_fingerprint": self.fingerprint,
            "object": "text_completion",
            "usage": usage(req),
            "id": self.id,
            "timings": timings(req),
        }

    def _chat_head(self) -> str:
        return f'"created":{self.created},"id":"{self.id}","model":{json.dumps(self.model)},'

    def chat_role_chunk(self) -> bytes:
        return (
            f'data: {{"choices":[{{"finish_reason":null,"index":0,"delta":{{"role":"assistant",'
            f'"content":null}}}}],{self._chat_head()}"system_fingerprint":{json.dumps(self.fingerprint)},'
            f'"object":"chat.completion.chunk"}}\n\n'
        ).encode()

    def chat_chunk(self, req: Request, n_out: int) -> bytes:
        tid, _ = token_at(req.seq, n_out - 1)
        return (
            f'data: {{"choices":[{{"finish_reason":null,"index":0,"delta":{{"content":'
            f"{_VOCAB_JSON[tid - 1000]}}}}}],{self._chat_head()}"
            f'"system_fingerprint":{json.dumps(self.fingerprint)},"object":"chat.completion.chunk"}}\n\n'
        ).encode()

    def chat_finals(self, req: Request, include_usage: bool) -> list[dict[str, Any]]:
        """The finish chunk, plus the usage chunk when ``stream_options.include_usage`` is set."""
        base = {"created": self.created, "id": self.id, "model": self.model,
                "system_fingerprint": self.fingerprint, "object": "chat.completion.chunk"}  # fmt: skip
        finish: dict[str, Any] = {
            "choices": [{"finish_reason": finish_reason(req), "index": 0, "delta": {}}],
            **base,
        }
        if not include_usage:
            finish["timings"] = timings(req)
            return [finish]
        return [finish, {"choices": [], **base, "usage": usage(req), "timings": timings(req)}]

    def chat_body(self, req: Request) -> dict[str, Any]:
        return {
            "choices": [
                {
                    "finish_reason": finish_reason(req),
                    "index": 0,
                    "message": {"role": "assistant", "content": output_text(req)},
                }
            ],
            "created": self.created,
            "model": self.model,
            "system_fingerprint": self.fingerprint,
            "object": "chat.completion",
            "usage": usage(req),
            "id": self.id,
            "timings": timings(req),
        }
