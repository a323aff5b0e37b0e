"""The fingerprint of what an answer was measured on, and how to tell that the node has changed since.

A recommended concurrency is a property of one runtime build serving one model with one set of capacity
settings on one machine, under one workload and one policy. When any of those changes (a restart with
``-np 2`` instead of 4, another quantisation, a new build, a smaller GPU), the number may no longer hold,
and nothing in the number itself says so. So each answer carries the fingerprint of what it was measured
on, the exporter publishes the live one (``runtime_fingerprint_info`` and ``GET /fingerprint``), and the
recommender compares the two (:func:`compare`): a difference makes the answer ``stale`` with a reason that
names what changed (:func:`describe_changes`).

Shape (docs/DESIGN.md, the fleet contract)::

    {"digest": "sha256:<hex>",                     # over runtime, model, settings, hardware
     "runtime":  {"build"},                        # /props build_info
     "model":    {"path", "files": [{"name", "size", "sha256"}] | None},
     "settings": {"slots", "ctx_per_slot", "batch", "ubatch", "flash_attn", "cache_type_k", "cache_type_v",
                  "n_gpu_layers"},
     "hardware": {"gpu", "gpu_count", "gpu_memory_bytes", "driver", "cpu"},
     "workload": {"digest", "values"}, "policy": {"digest", "values"},    # added by the analysis
     "unknown":  {"settings.flash_attn": "why it is null", ...}}

Sources, as llama-server tells them: ``/props`` gives ``build_info``, ``model_path``, ``total_slots`` and
``default_generation_settings.n_ctx``, which is the context of one slot (recorded: ``-c 16384 -np 4``
shows 4096, ``-np 8`` shows 2048; with a unified KV cache every slot shows the whole cache). Everything
else that sets capacity (batch and micro-batch, flash attention, KV cache types, GPU layers) is only on
the runtime's command line, which the exporter can read when the runtime runs on its host
(``core.llama_argv``: ``settings_from_argv``, one table of flags, ``ARGV_FLAGS``). Where ``/props`` and the command
line disagree, ``/props`` wins for what it reports: it is what the server did, after ``--fit`` and the
model's own limits. A value nobody can tell is ``None``, never a guess (a flag left out means "the
build's default", and defaults move between builds), and ``unknown[field]`` says why.

Model files are named, sized and hashed (``core.model_files``: ``model_file_facts``, llama.cpp's split
naming ``-00001-of-00003.gguf`` included). Hashing a multi-GB file takes seconds, so it is cached by (path, size,
mtime) and, in the exporter, done on a background thread (:class:`ModelHasher`): until it is done the
sha256 is ``None`` with reason ``hashing``. This module does no I/O; it re-exports those two modules' names
so that one import serves a reader of the fingerprint.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from core.llama_argv import (
    ARGV_FLAGS,
    FLASH_ATTN_VALUES,
    SETTINGS_FIELDS,
    is_llama_server_argv,
    settings_from_argv,
    to_int,
)
from core.model_files import ModelHasher, model_file_facts, split_paths

__all__ = [
    "ARGV_FLAGS",
    "HARDWARE_FIELDS",
    "INFO_LABELS",
    "SETTINGS_FIELDS",
    "ModelHasher",
    "canonical_json",
    "compare",
    "cpu_facts",
    "describe_changes",
    "digest",
    "from_info_labels",
    "gpu_facts",
    "info_labels",
    "is_llama_server_argv",
    "model_file_facts",
    "node_fingerprint",
    "policy_part",
    "settings_from_argv",
    "split_paths",
    "workload_part",
]

HARDWARE_FIELDS = ("gpu", "gpu_count", "gpu_memory_bytes", "driver", "cpu")
INFO_LABELS = ("build", "model", "model_size", "model_sha256", *SETTINGS_FIELDS, *HARDWARE_FIELDS, "digest")
_DIGESTED = ("runtime", "model", "settings", "hardware")

_INT_SETTINGS = {"slots", "ctx_per_slot", "batch", "ubatch"}
_INT_HARDWARE = {"gpu_count", "gpu_memory_bytes"}


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


def _props_settings(props: Mapping[str, Any]) -> dict[str, Any]:
    dgs = props.get("default_generation_settings")
    n_ctx = dgs.get("n_ctx") if isinstance(dgs, Mapping) else None
    return {"slots": _positive_int(props.get("total_slots")), "ctx_per_slot": _positive_int(n_ctx)}


_PROPS_NAMES = {"slots": "total_slots", "ctx_per_slot": "default_generation_settings.n_ctx"}


def node_fingerprint(
    *,
    props: Mapping[str, Any] | None,
    argv: Sequence[str] | None,
    hardware: Mapping[str, Any] | None,
    model_files: Sequence[Mapping[str, Any]] | None,
    reasons: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The fingerprint of one runtime (one model of a router): runtime, model, settings, hardware, unknown,
    digest.

    ``props``: the runtime's ``/props`` (None: not read). ``argv``: its command line (None: not readable;
    another program's argv is ignored). ``hardware``: :data:`HARDWARE_FIELDS` (None values unknown).
    ``model_files``: :func:`model_file_facts` (None: not read). ``reasons`` says why a source is missing:
    ``props``, ``argv``, ``model.files``, ``hardware`` or ``hardware.<field>``; they become the
    ``unknown`` reasons of what that source would have told.
    """
    why_given = dict(reasons or {})
    unknown: dict[str, str] = {}
    props_gap = (f"no /props ({why_given['props']})" if "props" in why_given else "no /props") if props is None \
        else None

    def from_props(what: str) -> str:
        return f"the runtime does not report it: {props_gap or f'/props has no {what}'}"

    build = props.get("build_info") if props is not None else None
    build = build if isinstance(build, str) and build else None
    if build is None:
        unknown["runtime.build"] = from_props("build_info")
    path = props.get("model_path") if props is not None else None
    path = path if isinstance(path, str) and path and path != "none" else None
    if path is None:
        unknown["model.path"] = from_props("model_path")

    files: list[dict[str, Any]] | None = None
    if model_files is not None:
        files = []
        for i, f in enumerate(model_files):
            sha = f.get("sha256")
            files.append({"name": str(f["name"]), "size": int(f["size"]), "sha256": sha if sha else None})
            if not sha:
                unknown[f"model.files[{i}].sha256"] = str(f.get("unknown") or "not hashed")
    else:
        unknown["model.files"] = why_given.get("model.files", "the model files were not read")

    settings: dict[str, Any] = dict.fromkeys(SETTINGS_FIELDS)
    told = _props_settings(props) if props is not None else {}
    argv_values: dict[str, Any] = {}
    argv_why: dict[str, str] = {}
    if argv is not None and is_llama_server_argv(argv):
        argv_values, argv_why = settings_from_argv(argv)
        argv_gap = None
    elif argv is not None:
        program = argv[0].rsplit("/", 1)[-1] if argv else "?"
        argv_gap = f"the process serving the runtime is not llama-server ({program})"
    else:
        argv_gap = f"the exporter cannot read the runtime's command line ({why_given.get('argv', 'not given')})"
    for field in SETTINGS_FIELDS:
        value = told.get(field)
        if value is None:
            value = argv_values.get(field)
        settings[field] = value
        if value is None:
            what = _PROPS_NAMES.get(field, field)
            gap = argv_gap or argv_why.get(field, "not on the command line")
            unknown[f"settings.{field}"] = f"{from_props(what)}, and {gap}"

    hw: dict[str, Any] = dict.fromkeys(HARDWARE_FIELDS)
    for field in HARDWARE_FIELDS:
        value = hardware.get(field) if hardware is not None else None
        hw[field] = value
        if value is None:
            unknown[f"hardware.{field}"] = why_given.get(
                f"hardware.{field}", why_given.get("hardware", "the exporter read no hardware facts"))

    fp: dict[str, Any] = {
        "runtime": {"build": build},
        "model": {"path": path, "files": files},
        "settings": settings,
        "hardware": hw,
        "unknown": unknown,
    }
    return {"digest": digest(fp), **fp}


# -- the info series --------------------------------------------------------------------------------------


def _label(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def info_labels(fp: Mapping[str, Any]) -> dict[str, str]:
    """The labels of ``runtime_fingerprint_info`` (:data:`INFO_LABELS`; "" = unknown). A model of several
    splits lists each split's size and sha256 comma-separated, in split order (an unhashed one empty)."""
    model = fp.get("model") or {}
    files = model.get("files")
    settings = fp.get("settings") or {}
    hardware = fp.get("hardware") or {}
    shas = [f.get("sha256") or "" for f in files] if files else []
    labels = {
        "build": _label((fp.get("runtime") or {}).get("build")),
        "model": _label(model.get("path")),
        "model_size": ",".join(str(f["size"]) for f in files) if files else "",
        "model_sha256": ",".join(shas) if any(shas) else "",
        **{field: _label(settings.get(field)) for field in SETTINGS_FIELDS},
        **{field: _label(hardware.get(field)) for field in HARDWARE_FIELDS},
        "digest": _label(fp.get("digest")),
    }
    return labels


def _parse_label(field: str, text: str) -> Any:
    if text == "":
        return None
    if field in _INT_SETTINGS or field in _INT_HARDWARE:
        return to_int(text)
    if field == "flash_attn":
        return FLASH_ATTN_VALUES.get(text.lower(), text)
    if field == "n_gpu_layers":
        number = to_int(text)
        return number if number is not None else text
    return text


def _file_names(path: str | None, count: int) -> list[str]:
    if path is None:
        return [""] * count
    files = split_paths(path)
    if len(files) == count:
        return [f.name for f in files]
    name = Path(path).name
    return [name] if count == 1 else [f"{name}#{i + 1}" for i in range(count)]


def from_info_labels(labels: Mapping[str, str]) -> dict[str, Any]:
    """The fingerprint an info series' labels carry (other labels, lane, node, job, are ignored). On a
    router node the series' ``model`` label is the model id and ``model_path`` carries the path."""
    gone = "the exporter's info series leaves it empty (unknown to the exporter)"
    unknown: dict[str, str] = {}
    path = labels.get("model_path", labels.get("model", "")) or None
    sizes = [s for s in labels.get("model_size", "").split(",")] if labels.get("model_size") else []
    shas = labels.get("model_sha256", "").split(",") if labels.get("model_sha256") else []
    files: list[dict[str, Any]] | None = None
    if sizes:
        names = _file_names(path, len(sizes))
        files = []
        for i, size in enumerate(sizes):
            sha = shas[i] if i < len(shas) and shas[i] else None
            files.append({"name": names[i], "size": to_int(size) or 0, "sha256": sha})
            if sha is None:
                unknown[f"model.files[{i}].sha256"] = gone
    else:
        unknown["model.files"] = gone
    build = labels.get("build") or None
    if build is None:
        unknown["runtime.build"] = gone
    if path is None:
        unknown["model.path"] = gone
    settings = {field: _parse_label(field, labels.get(field, "")) for field in SETTINGS_FIELDS}
    hardware = {field: _parse_label(field, labels.get(field, "")) for field in HARDWARE_FIELDS}
    for part, values in (("settings", settings), ("hardware", hardware)):
        unknown.update({f"{part}.{k}": gone for k, v in values.items() if v is None})
    fp: dict[str, Any] = {
        "runtime": {"build": build},
        "model": {"path": path, "files": files},
        "settings": settings,
        "hardware": hardware,
        "unknown": unknown,
    }
    return {"digest": labels.get("digest") or digest(fp), **fp}


# -- comparing --------------------------------------------------------------------------------------------


def _normal(field: str, value: Any) -> Any:
    if isinstance(value, str):
        return _parse_label(field, value)
    return value


def _files_shape(files: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [{"name": f.get("name"), "size": f.get("size")} for f in files]


def compare(measured: Mapping[str, Any] | None, live: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """``[{"field", "measured", "live"}]``: what differs between the fingerprint an answer was measured on
    and the live one. A field ``None`` on either side is not compared (nobody can tell). Model files are
    compared by name and size, and by sha256 only where both sides hashed that file; the model path only
    when either side has no files (a file moved but unchanged is the same model)."""
    if not measured or not live:
        return []
    changes: list[dict[str, Any]] = []

    def field(part: str, name: str) -> None:
        a = _normal(name, (measured.get(part) or {}).get(name))
        b = _normal(name, (live.get(part) or {}).get(name))
        if a is not None and b is not None and a != b:
            changes.append({"field": f"{part}.{name}", "measured": a, "live": b})

    field("runtime", "build")
    m_files = (measured.get("model") or {}).get("files")
    l_files = (live.get("model") or {}).get("files")
    if m_files is not None and l_files is not None:
        if _files_shape(m_files) != _files_shape(l_files):
            changes.append({"field": "model.files", "measured": _files_shape(m_files),
                            "live": _files_shape(l_files)})
        else:
            for i, (a, b) in enumerate(zip(m_files, l_files, strict=True)):
                if a.get("sha256") and b.get("sha256") and a["sha256"] != b["sha256"]:
                    changes.append({"field": f"model.files[{i}].sha256", "measured": a["sha256"],
                                    "live": b["sha256"]})
    else:
        field("model", "path")
    for name in SETTINGS_FIELDS:
        field("settings", name)
    for name in HARDWARE_FIELDS:
        field("hardware", name)
    for part in ("workload", "policy"):
        field(part, "digest")
    return changes


def _show(value: Any) -> str:
    if value is None:
        return "unknown"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, list):
        return "+".join(f"{f.get('name')} ({f.get('size')} B)" for f in value) or "no files"
    text = str(value)
    if re.fullmatch(r"(sha256:)?[0-9a-f]{64}", text):
        return text.removeprefix("sha256:")[:12]
    return text


def describe_changes(changes: Sequence[Mapping[str, Any]]) -> str:
    """One line naming what changed: ``settings.slots 4 -> 2; runtime.build b1 -> b2`` ("" for none)."""
    return "; ".join(f"{c['field']} {_show(c.get('measured'))} -> {_show(c.get('live'))}" for c in changes)
