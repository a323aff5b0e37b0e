"""The fingerprint as the labels of ``runtime_fingerprint_info`` and back (``core.fingerprint``).

Every scrape the exporter publishes the live fingerprint as one info series (``1``) whose labels are its
fields (:data:`INFO_LABELS`; ``""`` is unknown), and the recommender reads the fleet's fingerprints back in
one instant query. A model of several splits lists each split's size and hashes comma-separated, in split
order (one not hashed yet empty). ``runtime_state`` is ``""`` while the runtime answers and ``down`` or
``loading`` when it does not, so an answer checked against a silent runtime reads ``unknown`` with that
reason, never ``valid``. The reasons of the other unknowns stay with ``GET /fingerprint``: a label per
reason would make a series per wording.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from satbench.core.fingerprint import HARDWARE_FIELDS, RUNTIME_FIELDS, digest
from satbench.core.fingerprint_compare import parse_field
from satbench.core.llama_argv import SETTINGS_FIELDS, to_int
from satbench.core.model_files import split_paths

__all__ = ["INFO_LABELS", "from_info_labels", "info_labels"]

_META_LABELS = {"ftype": "model_ftype", "n_params": "model_n_params", "size": "model_tensor_bytes"}
INFO_LABELS = (*RUNTIME_FIELDS, "model", "model_size", "model_sample_sha256", "model_sha256",
               *_META_LABELS.values(), *SETTINGS_FIELDS, *HARDWARE_FIELDS, "runtime_state", "digest")


def _label(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def info_labels(fp: Mapping[str, Any]) -> dict[str, str]:
    """The labels of ``runtime_fingerprint_info`` (:data:`INFO_LABELS`; "" = unknown)."""
    model = fp.get("model") or {}
    files = model.get("files")
    meta = model.get("meta") or {}
    runtime = fp.get("runtime") or {}
    settings = fp.get("settings") or {}
    hardware = fp.get("hardware") or {}

    def hashes(kind: str) -> str:
        shas = [f.get(kind) or "" for f in files] if files else []
        return ",".join(shas) if any(shas) else ""

    down = (fp.get("unknown") or {}).get("runtime")
    state = ""
    if isinstance(down, str):
        state = "loading" if down.startswith("the runtime is loading") else "down" if down.startswith(
            "the runtime is down") else ""
    return {
        **{field: _label(runtime.get(field)) for field in RUNTIME_FIELDS},
        "model": _label(model.get("path")),
        "model_size": ",".join(str(f["size"]) for f in files) if files else "",
        "model_sample_sha256": hashes("sample_sha256"),
        "model_sha256": hashes("sha256"),
        **{label: _label(meta.get(field)) for field, label in _META_LABELS.items()},
        **{field: _label(settings.get(field)) for field in SETTINGS_FIELDS},
        **{field: _label(hardware.get(field)) for field in HARDWARE_FIELDS},
        "runtime_state": state,
        "digest": _label(fp.get("digest")),
    }


def _file_names(path: str | None, count: int) -> list[str]:
    if path is None:
        return [""] * count
    try:
        files = split_paths(path)
    except ValueError:
        files = []
    if len(files) == count:
        return [f.name for f in files]
    name = Path(path).name
    return [name] if count == 1 else [f"{name}#{i + 1}" for i in range(count)]


def from_info_labels(labels: Mapping[str, str]) -> dict[str, Any]:
    """The fingerprint an info series' labels carry (other labels, lane, node, job, are ignored). On a
    router node the series' ``model`` label is the model id and ``model_path`` carries the path."""
    gone = "the exporter's info series leaves it empty (unknown to the exporter)"
    unknown: dict[str, str] = {}
    state = labels.get("runtime_state", "")
    if state:
        unknown["runtime"] = f"the runtime is {state} (its exporter says so)"
    path = labels.get("model_path", labels.get("model", "")) or None
    sizes = labels["model_size"].split(",") if labels.get("model_size") else []
    files: list[dict[str, Any]] | None = None
    if sizes:
        names = _file_names(path, len(sizes))
        files = []
        kinds = {kind: (labels.get(f"model_{kind}") or "").split(",") for kind in ("sample_sha256", "sha256")}
        for i, size in enumerate(sizes):
            entry: dict[str, Any] = {"name": names[i], "size": to_int(size) or 0}
            for kind, shas in kinds.items():
                entry[kind] = shas[i] if i < len(shas) and shas[i] else None
                if entry[kind] is None:
                    unknown[f"model.files[{i}].{kind}"] = gone
            files.append(entry)
    else:
        unknown["model.files"] = gone
    meta = {field: parse_field(field, labels.get(label, "")) for field, label in _META_LABELS.items()}
    if all(v is None for v in meta.values()):
        unknown["model.meta"] = gone
    runtime = {field: labels.get(field) or None for field in RUNTIME_FIELDS}
    unknown.update({f"runtime.{k}": gone for k, v in runtime.items() if v is None})
    if path is None:
        unknown["model.path"] = gone
    settings = {field: parse_field(field, labels.get(field, "")) for field in SETTINGS_FIELDS}
    hardware = {field: parse_field(field, labels.get(field, "")) for field in HARDWARE_FIELDS}
    for part, values in (("settings", settings), ("hardware", hardware)):
        unknown.update({f"{part}.{k}": gone for k, v in values.items() if v is None})
    fp: dict[str, Any] = {
        "runtime": runtime,
        "model": {"path": path, "files": files,
                  "meta": meta if any(v is not None for v in meta.values()) else None},
        "settings": settings,
        "hardware": hardware,
        "unknown": unknown,
    }
    return {"digest": labels.get("digest") or digest(fp), **fp}
