"""Read-only views of the engine: ``/props``, ``/slots``, ``/v1/models``, ``/metrics``, ``/sim/*``.

Pure functions of the engine, the profile and a time mapping. The llama-server views copy the field names
of the recorded fixtures. ``/metrics`` follows llama-server's semantics: counters are lifetime totals,
``prompt_tokens_seconds`` and ``predicted_tokens_seconds`` are computed over a bucket that every scrape
resets (tokens over the summed per-slot processing time since the previous scrape, 0 when nothing
finished), and ``n_busy_slots_per_decode`` is a lifetime average (busy slots summed over steps / steps).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from satbench.simulator.dropin import ServerOptions
from satbench.simulator.engine import Engine, Request, TruthRecord
from satbench.simulator.payloads import generation_settings, merge_settings
from satbench.simulator.profile import Profile

__all__ = [
    "BUILD_INFO",
    "TimeMap",
    "active_record_json",
    "gpu_view",
    "metrics_text",
    "models_view",
    "props_view",
    "slots_view",
    "truth_record_json",
]

BUILD_INFO = "b0-satbench-simulator"
SIM_NOTE = "satbench simulator: timings and memory are a model of the profile, not a real runtime or GPU"


@dataclass(frozen=True)
class TimeMap:
    """Maps model (monotonic) time to Unix seconds with one offset taken at start."""

    offset: float
    started_mono: float

    def unix(self, t: float | None) -> float | None:
        return None if t is None else round(t + self.offset, 6)


def default_params(options: ServerOptions) -> dict[str, Any]:
    """The server's default sampling settings (``/props``), from its ``--seed``, ``--temp`` and ``-n``."""
    out = generation_settings(None, False, for_params=True)
    out["temperature"] = merge_settings({"temperature": options.temperature}, {})["temperature"]
    if options.seed is not None:
        out["seed"] = options.seed
    out["n_predict"] = out["max_tokens"] = options.n_predict
    for key in ("dry_sequence_breakers", "stop", "logit_bias", "grammar", "grammar_lazy", "grammar_triggers",
                "preserved_tokens"):
        out.pop(key, None)
    return out


def props_view(
    profile: Profile, slots_enabled: bool, metrics_enabled: bool, options: ServerOptions | None = None
) -> dict[str, Any]:
    m = profile.model
    options = options or ServerOptions()
    return {
        "default_generation_settings": {
            "params": default_params(options),
            "n_ctx": profile.server.n_ctx_slot,
        },
        "total_slots": profile.server.slots,
        "model_alias": options.model_id(profile),
        "model_ftype": m.ftype,
        "model_path": options.model_path or m.name,
        "modalities": {"vision": False, "video": False, "audio": False},
        "media_marker": "<__media__>",
        "endpoint_slots": slots_enabled,
        "endpoint_props": False,
        "endpoint_metrics": metrics_enabled,
        "ui": options.ui,
        "ui_settings": {},
        "chat_template": (
            "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}"
            "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
        ),
        "chat_template_caps": {
            "supports_object_arguments": False,
            "supports_parallel_tool_calls": False,
            "supports_preserve_reasoning": False,
            "supports_reasoning_effort": False,
            "supports_string_content": True,
            "supports_system_role": True,
            "supports_tool_calls": False,
            "supports_tools": False,
            "supports_typed_content": False,
        },
        "bos_token": "<s>",
        "eos_token": "</s>",
        "build_info": BUILD_INFO,
        "is_sleeping": False,
        "cors_proxy_enabled": False,
        "simulator": {
            "simulated": True,
            "profile": profile.name,
            "description": m.description,
            "admission": profile.server.admission,
            "batch": profile.server.batch,
            "ubatch": profile.server.ubatch,
            "ctx_size": profile.server.ctx_tokens,
            "kv_unified": profile.server.kv_unified,
            "time_scale": profile.server.time_scale,
            "note": SIM_NOTE,
        },
    }


def _slot_json(slot_id: int, n_ctx: int, req: Request | None, busy: bool, task_id: int) -> dict[str, Any]:
    """A slot as llama-server shows it; an idle slot keeps its last task's tokens but no budget.

    ``n_prompt_tokens`` is what the real build shows (``prompt.tokens.size()``, fixture
    router/slots_busy_tiny-llama-dense.json): the tokens the slot holds, i.e. the prompt processed so far
    (cached ones included) plus every token decoded so far, busy or idle."""
    out: dict[str, Any] = {"id": slot_id, "n_ctx": n_ctx, "speculative": False, "is_processing": busy}
    if req is None:
        return out
    out.update(
        {
            "id_task": task_id,
            "n_prompt_tokens": req.kv_tokens,
            "n_prompt_tokens_processed": req.prompt_n if busy else 0,
            "n_prompt_tokens_cache": req.cache_n if busy else 0,
            "params": generation_settings(req, True, for_params=True),
            "next_token": [
                {
                    "has_next_token": busy,
                    "has_new_line": False,
                    "n_remain": max(req.n_predict - req.output, 0) if busy else -1,
                    "n_decoded": req.output if busy else 0,
                }
            ],
        }
    )
    return out


def slots_view(engine: Engine, last: list[Request | None]) -> list[dict[str, Any]]:
    """``last`` holds, per slot, the last request it served (llama-server keeps showing it when idle)."""
    n_ctx = engine.profile.server.n_ctx_slot
    out = []
    for i, req in enumerate(engine.slots):
        shown = req if req is not None else last[i]
        out.append(_slot_json(i, n_ctx, shown, req is not None, shown.seq if shown else -1))
    return out


def models_view(profile: Profile, created: int, options: ServerOptions | None = None) -> dict[str, Any]:
    m = profile.model
    options = options or ServerOptions()
    model_id = options.model_id(profile)
    aliases = sorted(options.aliases) if options.aliases else [model_id]
    return {
        "models": [
            {
                "name": model_id, "model": model_id, "modified_at": "", "size": "", "digest": "",
                "type": "model", "description": "", "tags": [""], "capabilities": ["completion"],
                "parameters": "",
                "details": {"parent_model": "", "format": "gguf", "family": "", "families": [""],
                            "parameter_size": "", "quantization_level": ""},
            }
        ],
        "object": "list",
        "data": [
            {
                "id": model_id, "aliases": aliases, "tags": sorted(options.tags), "object": "model",
                "architecture": {"input_modalities": ["text"], "output_modalities": ["text"]},
                "created": created, "owned_by": "llamacpp",
                "meta": {"vocab_type": 1, "n_vocab": m.n_vocab, "n_ctx": profile.server.n_ctx_slot,
                         "n_ctx_train": m.n_ctx_train, "n_embd": m.n_embd, "n_params": m.n_params,
                         "size": profile.memory.weights_bytes, "ftype": m.ftype},
            }
        ],
    }  # fmt: skip


_METRICS: tuple[tuple[str, str, str], ...] = (
    ("prompt_tokens_total", "counter", "Number of prompt tokens processed, excluding cached tokens"),
    ("prompt_tokens_cached_total", "counter", "Number of prompt tokens reused from the cache"),
    ("prompt_seconds_total", "counter", "Total time spent processing prompts"),
    ("tokens_predicted_total", "counter", "Number of generation tokens processed"),
    ("tokens_predicted_seconds_total", "counter", "Total time spent generating tokens"),
    ("n_decode_total", "counter",
     "Total number of llama_decode() calls, excluding speculative decoding and multimodal decoding"),
    ("n_tokens_max", "counter", "Largest observed sequence length (prompt + generation)"),
    ("spec_decode_num_draft_tokens_total", "counter", "Speculative: Total draft tokens generated"),
    ("spec_decode_num_accepted_tokens_total", "counter",
     "Speculative: Total draft tokens accepted by the target model"),
    ("spec_decode_num_drafts_total", "counter", "Speculative: Total speculative decoding verification steps"),
    ("prompt_tokens_seconds", "gauge", "Average prompt throughput in tokens/s"),
    ("predicted_tokens_seconds", "gauge", "Average generation throughput in tokens/s"),
    ("requests_processing", "gauge", "Number of requests processing"),
    ("requests_deferred", "gauge", "Number of requests deferred"),
    ("n_busy_slots_per_decode", "gauge", "Average number of busy slots per llama_decode() call"),
)  # fmt: skip


def _fmt(v: float | int) -> str:
    if isinstance(v, int):
        return str(v)
    return f"{v:.6f}".rstrip("0").rstrip(".") or "0"


def metrics_text(engine: Engine) -> str:
    """Renders ``/metrics`` and resets the throughput bucket, exactly once per call (as llama-server)."""
    c = engine.counters
    values: dict[str, float | int] = {
        "prompt_tokens_total": c.prompt_tokens_total,
        "prompt_tokens_cached_total": c.prompt_tokens_cached_total,
        "prompt_seconds_total": c.prompt_seconds_total,
        "tokens_predicted_total": c.tokens_predicted_total,
        "tokens_predicted_seconds_total": c.tokens_predicted_seconds_total,
        "n_decode_total": c.n_decode_total,
        "n_tokens_max": c.n_tokens_max,
        "spec_decode_num_draft_tokens_total": 0,
        "spec_decode_num_accepted_tokens_total": 0,
        "spec_decode_num_drafts_total": 0,
        "prompt_tokens_seconds": (
            1e3 * c.bucket_prompt_tokens / c.bucket_prompt_ms if c.bucket_prompt_ms else 0.0
        ),
        "predicted_tokens_seconds": (
            1e3 * c.bucket_predicted_tokens / c.bucket_predicted_ms if c.bucket_predicted_ms else 0.0
        ),
        "requests_processing": engine.busy_slots,
        "requests_deferred": len(engine.waiting),
        "n_busy_slots_per_decode": c.n_busy_slots_total / c.n_decode_total if c.n_decode_total else 0.0,
    }
    c.bucket_prompt_tokens = c.bucket_predicted_tokens = 0
    c.bucket_prompt_ms = c.bucket_predicted_ms = 0.0
    lines = []
    for name, kind, help_text in _METRICS:
        lines += [f"# HELP llamacpp:{name} {help_text}", f"# TYPE llamacpp:{name} {kind}",
                  f"llamacpp:{name} {_fmt(values[name])}"]  # fmt: skip
    return "\n".join(lines) + "\n"


def _gpu_entry(engine: Engine, i: int, now: float) -> dict[str, Any]:
    """One modelled GPU: its share of the memory, the power and (where the model has the counter) the energy."""
    mem, n = engine.profile.memory, engine.profile.memory.gpu_count
    used = mem.weights_bytes + mem.compute_buffer_bytes + engine.kv_used_tokens * mem.kv_bytes_per_token
    entry: dict[str, Any] = {"index": i, "name": mem.gpu_name, "simulated": True,
                             "memory_total_bytes": mem.gpu_total_bytes // n, "memory_used_bytes": used // n,
                             "power_watts": round(engine.power.watts(now) / n, 6)}
    if engine.profile.power.energy_counter:
        entry["energy_joules"] = round(engine.power.joules(now) / n, 6)
    return entry


def gpu_view(engine: Engine, now_unix: float, now: float) -> dict[str, Any]:
    """``/sim/gpu`` at engine time ``now`` (``now_unix`` on the wall clock)."""
    p, mem = engine.profile, engine.profile.memory
    kv_tokens = engine.kv_used_tokens
    kv_bytes = kv_tokens * mem.kv_bytes_per_token
    used = mem.weights_bytes + mem.compute_buffer_bytes + kv_bytes
    return {
        "simulated": True,
        "note": SIM_NOTE,
        "profile": p.name,
        "time": round(now_unix, 6),
        "memory_total_bytes": mem.gpu_total_bytes,
        "memory_used_bytes": used,
        "weights_bytes": mem.weights_bytes,
        "compute_buffer_bytes": mem.compute_buffer_bytes,
        "kv_used_bytes": kv_bytes,
        "kv_used_tokens": kv_tokens,
        "kv_reserved_tokens": engine.kv_reserved_tokens,
        "kv_capacity_tokens": p.server.ctx_tokens,
        "kv_capacity_bytes": p.server.ctx_tokens * mem.kv_bytes_per_token,
        "host_rss_bytes": mem.host_rss_bytes,
        "energy_counter": p.power.energy_counter,
        "gpus": [_gpu_entry(engine, i, now) for i in range(mem.gpu_count)],
    }  # fmt: skip


def truth_record_json(rec: TruthRecord, tm: TimeMap) -> dict[str, Any]:
    return {
        "request_id": rec.request_id,
        "user": rec.user,
        "slot": rec.slot,
        "arrival": tm.unix(rec.arrival),
        "admitted": tm.unix(rec.admitted),
        "first_token": tm.unix(rec.first_token),
        "last_token": tm.unix(rec.last_token),
        "prompt_tokens": rec.prompt_tokens,
        "output_tokens": rec.output_tokens,
        "finish_reason": rec.finish_reason,
    }


def active_record_json(req: Request, tm: TimeMap) -> dict[str, Any]:
    """A request still waiting or running, in the ``requests`` shape (``finish_reason`` null)."""
    return {
        "request_id": req.spec.request_id,
        "user": req.spec.user,
        "slot": req.slot,
        "arrival": tm.unix(req.arrival),
        "admitted": tm.unix(req.admitted),
        "first_token": tm.unix(req.first_token),
        "last_token": tm.unix(req.last_token),
        "prompt_tokens": req.spec.prompt_tokens,
        "output_tokens": req.output,
        "finish_reason": None,
    }
