"""The ``runtime_*`` series of one scrape, from a :class:`~exporter.snapshot.RuntimeSnapshot`.

Series are collected into a :class:`FamilySet` by name, because a router node publishes the same series
once per model (a ``model`` label) and Prometheus wants one family, one HELP and one TYPE per name. A
single-model node gets exactly the series it always had, with no ``model`` label, so nothing downstream
changes. In router mode the node-wide series (``runtime_up``, ``runtime_models_up``, the router's own
``/props``) carry no ``model`` label and every per-model series does; a model that is not loaded has only
``runtime_model_loaded`` 0 and ``runtime_model_status``, never a ``*_up`` 0 that would read as an outage.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from prometheus_client.metrics_core import Metric

from satbench.exporter.kvcache import kv_usage, resolve_layout
from satbench.exporter.occupancy import OccupancyBook
from satbench.exporter.router import MODEL_STATUSES, ROUTER_SOURCES
from satbench.exporter.snapshot import RuntimeSnapshot, SourceResult

__all__ = ["RUNTIME_SOURCES", "FamilySet", "runtime_series"]

RUNTIME_SOURCES = ("health", "metrics", "slots", "props")
_PER_MODEL = ("metrics", "slots", "props")
_COUNTERS = (
    ("prompt_tokens_total", "runtime_prompt_tokens", "Prompt tokens processed (uncached)."),
    ("prompt_tokens_cached_total", "runtime_prompt_tokens_cached",
     "Prompt tokens served from the prompt cache (no prefill); not in runtime_prompt_tokens_total."),
    ("output_tokens_total", "runtime_output_tokens", "Output tokens generated."),
    ("decode_steps_total", "runtime_decode_steps", "Batched decode steps (llama_decode calls)."),
    ("spec_draft_tokens_total", "runtime_spec_draft_tokens",
     "Speculative decoding: draft tokens proposed (llama.cpp spec_decode_num_draft_tokens_total)."),
    ("spec_accepted_tokens_total", "runtime_spec_accepted_tokens",
     "Speculative decoding: draft tokens the target model accepted; rate() over the draft rate = acceptance."),
    ("spec_drafts_total", "runtime_spec_drafts", "Speculative decoding: draft verification steps."),
)  # fmt: skip


class FamilySet:
    """Metric families by name; samples of one name may carry different label sets (node-wide, per model)."""

    def __init__(self) -> None:
        self._by_name: dict[str, Metric] = {}

    def family(self, kind: str, name: str, doc: str) -> Metric:
        found = self._by_name.get(name)
        if found is None:
            found = self._by_name[name] = Metric(name, doc, kind)
        return found

    def gauge(self, name: str, doc: str, value: float, labels: Mapping[str, str] | None = None) -> None:
        self.family("gauge", name, doc).add_sample(name, dict(labels or {}), value)

    def counter(self, name: str, doc: str, value: float, labels: Mapping[str, str] | None = None) -> None:
        self.family("counter", name, doc).add_sample(name + "_total", dict(labels or {}), value)

    def families(self) -> list[Metric]:
        return list(self._by_name.values())


def _sources(
    fs: FamilySet, sources: Mapping[str, SourceResult], names: Sequence[str], labels: Mapping[str, str],
    budget_s: float,
) -> None:
    for name in names:
        src = sources.get(name)
        key = {"source": name, **labels}
        fs.gauge("runtime_http_status", "HTTP status of each runtime endpoint (0: no answer).",
                 float(src.http_status or 0) if src else 0.0, key)
        fs.gauge("runtime_scrape_duration_seconds", "Time to fetch each runtime source (0: cached).",
                 src.duration_s if src else budget_s, key)
        if name in ("health", "models"):
            continue
        doc = f"1 when the runtime /{name} gave usable data this scrape (0: disabled, failing, slow)."
        if name == "props":
            doc += f" /props is slow-changing and cached by the exporter (runtime_{name}_cached)."
        fs.gauge(f"runtime_{name}_up", doc, float(src.up) if src else 0.0, labels)
    props = sources.get("props")
    fs.gauge("runtime_props_cached", "1 when this scrape reused a cached /props answer.",
             float(bool(props and props.cached)), labels)


def _model_series(
    fs: FamilySet, snap: RuntimeSnapshot, labels: Mapping[str, str], key: str | None,
    argv: Sequence[str] | None, kv_setting: str, occupancy: OccupancyBook,
    environ: Mapping[str, str] | None = None,
) -> None:
    """Every series a runtime (or one model of a router) tells, with ``labels`` added."""
    if snap.info:
        info = {**dict(snap.info), **labels}
        fs.gauge("runtime_info", "Runtime flavour, model and build (from /props, cached).", 1.0, info)
    if snap.slots is not None:
        for state in ("idle", "prefill", "decode"):
            fs.gauge("runtime_slots", "Slots by state at scrape time (from /slots).",
                     float(getattr(snap.slots, state)), {"state": state, **labels})
    if snap.slots_configured is not None:
        fs.gauge("runtime_slots_configured", "Configured parallel slots (/slots, else /props).",
                 float(snap.slots_configured), labels)
    if snap.requests_processing is not None:
        fs.gauge("runtime_requests_processing", "Requests holding a slot (runtime's own gauge).",
                 snap.requests_processing, labels)
    if snap.queue_depth is not None:
        fs.gauge("runtime_queue_depth", "Requests waiting for a slot (llama.cpp: deferred).",
                 snap.queue_depth, labels)
    ratio = snap.occupancy_ratio
    if ratio is not None:
        fs.gauge("runtime_batch_occupancy_ratio",
                 "Busy slots / total slots at scrape time (busy from /slots, else requests_processing).",
                 ratio, labels)
    for attr, name, doc in _COUNTERS:
        value = getattr(snap, attr)
        if value is not None:
            fs.counter(name, doc, value, labels)
    if snap.decode_steps_total is not None and snap.busy_slot_decodes_total is not None:
        step = occupancy.step(key, snap.decode_steps_total, snap.busy_slot_decodes_total, snap.slots_configured)
        fs.counter("runtime_busy_slot_decodes",
                   "Sum over decode steps of the busy slots in the batch (llama.cpp: n_busy_slots_per_decode "
                   "x n_decode_total); rate() / rate(runtime_decode_steps_total) = mean batch size.",
                   step.busy_published, labels)
        if step.interval_ratio is not None:
            fs.gauge("runtime_decode_occupancy_ratio",
                     "Mean busy slots / slots per decode step, since this exporter's previous scrape.",
                     step.interval_ratio, labels)
    slot_kv = snap.slot_kv or ()
    kv = kv_usage(slot_kv, resolve_layout(kv_setting, argv, environ=environ, props=snap.props, slots=slot_kv))
    if kv is not None:
        if kv.ratio is not None:
            fs.gauge("runtime_kv_cache_usage_ratio",
                     "Tokens held by processing slots / KV capacity (from /slots; like vLLM kv_cache_usage_perc: "
                     "idle slots' prompt cache counts as free).", kv.ratio, labels)
        for state, tokens in (("active", kv.active_tokens), ("idle", kv.idle_tokens)):
            fs.gauge("runtime_kv_cache_tokens",
                     "KV tokens held by processing slots (active) and by idle slots (reusable prompt cache).",
                     float(tokens), {"state": state, **labels})
        fs.gauge("runtime_kv_cache_capacity_tokens",
                 "KV capacity in tokens: sum of slots' n_ctx (split) or the largest (unified); kv_layout says "
                 "which, unknown when nothing the runtime tells decides it (then the largest: the least it can be).",
                 float(kv.capacity_tokens), {"kv_layout": kv.layout, **labels})


def _router_series(
    fs: FamilySet, snap: RuntimeSnapshot, budget_s: float, process_argv: Sequence[str] | None,
    kv_setting: str, occupancy: OccupancyBook, environ: Mapping[str, str] | None,
) -> None:
    node = {s.name: s for s in snap.sources}
    models = node.get("models")
    fs.gauge("runtime_models_up", "1 when the router's /v1/models answered (the model list is known).",
             float(bool(models and models.up)))
    _sources(fs, node, ROUTER_SOURCES, {}, budget_s)
    for view in snap.models:
        labels = {"model": view.name}
        fs.gauge("runtime_model_loaded", "1 when the router reports the model loaded (0: unloaded, loading, "
                 "unknown); never runtime_up 0.", float(view.loaded), labels)
        for status in dict.fromkeys((*MODEL_STATUSES, view.status)):
            fs.gauge("runtime_model_status", "1 for the model's current status in the router's /v1/models.",
                     float(status == view.status), {**labels, "status": status})
        if view.snapshot is None:
            continue
        sources = {s.name: s for s in view.snapshot.sources}
        _sources(fs, sources, _PER_MODEL, labels, budget_s)
        _model_series(fs, view.snapshot, labels, view.name, view.args or process_argv, kv_setting, occupancy,
                      environ)


def runtime_series(
    snap: RuntimeSnapshot, budget_s: float, process_argv: Sequence[str] | None, kv_setting: str,
    occupancy: OccupancyBook, environ: Mapping[str, str] | None = None,
) -> list[Metric]:
    """The families of one scrape. ``process_argv`` and ``environ``: the runtime's command line and its
    ``LLAMA_ARG_*`` environment when its process is known (None: not read)."""
    fs = FamilySet()
    fs.gauge("runtime_up", "1 when the runtime /health answers 200.", float(snap.up))
    if snap.router:
        _router_series(fs, snap, budget_s, process_argv, kv_setting, occupancy, environ)
        return fs.families()
    _sources(fs, {s.name: s for s in snap.sources}, RUNTIME_SOURCES, {}, budget_s)
    _model_series(fs, snap, {}, None, process_argv, kv_setting, occupancy, environ)
    return fs.families()
