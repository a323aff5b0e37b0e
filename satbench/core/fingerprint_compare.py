"""Is an answer about what the node runs now? Two fingerprints (``core.fingerprint``) compared field by field,
and weighed: ``valid`` only where what decides capacity was compared.

:func:`compare` lists ``{field, measured, live}`` for every field known on both sides that differs;
:func:`describe_changes` says them on one line (``settings.slots 4 -> 2; runtime.build b1 -> b2``).

:func:`assess` turns that into a state, because "nothing differs" is not "the same": a runtime that is down
publishes no runtime-side field, a remote exporter sees no command line, a pip-built llama-server says
``b0-unknown`` for every version, and a comparison of the fields both sides happen to know would call all
of those "valid". The state is:

- ``changed`` when a field known on both sides differs (``changes`` says which);
- ``valid`` only when nothing differs and every group that decides capacity was compared: the build
  identity (the sha256 of the runtime's executable and libraries, or a build string that names a build, or
  its package version and backend together), the model identity (each file's ``sample_sha256`` or
  ``sha256``, or what the runtime says of the model: ``ftype`` and ``n_params``), and the settings
  ``core.llama_argv.DECIDING_SETTINGS`` (slots, context per slot and KV layout: the KV capacity; batch and
  micro-batch: the prefill a step takes);
- ``unknown`` otherwise, with the reason naming what could not be compared and why (the runtime is down or
  loading, the live exporter cannot read the command line, ...).

``compared`` says how much was: ``{"fields": n, "of": m, "not_compared": [...]}`` over
:data:`COMPARED_FIELDS`; 2 of 29 reads differently from 29 of 29. Model files are compared by name and
size, then by each hash both sides have; the model path only when either side has no files (a file moved
unchanged is the same model). ``workload.digest`` and ``policy.digest`` are compared when both sides have
them (a live fingerprint has neither). Compare fields, not digests: the digest also moves when a pending
hash completes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from satbench.core.fingerprint import HARDWARE_FIELDS, META_FIELDS, RUNTIME_FIELDS
from satbench.core.llama_argv import DECIDING_SETTINGS, FLASH_ATTN_VALUES, SETTINGS_FIELDS, to_int

__all__ = ["COMPARED_FIELDS", "DECIDING_GROUPS", "Assessment", "assess", "compare", "describe_changes",
           "parse_field", "unknown_build"]

COMPARED_FIELDS = (*(f"runtime.{f}" for f in RUNTIME_FIELDS), "model", *(f"settings.{f}" for f in SETTINGS_FIELDS),
                   *(f"hardware.{f}" for f in HARDWARE_FIELDS))
DECIDING_GROUPS = ("build", "model", *(f"settings.{f}" for f in DECIDING_SETTINGS))
_INTS = {"slots", "ctx_per_slot", "batch", "ubatch", "threads", "threads_batch", "cache_reuse", "main_gpu",
         "gpu_count", "gpu_memory_bytes", "n_params", "size"}
_SWITCHES = {"flash_attn", "kv_unified"}


def unknown_build(build: str) -> bool:
    """Whether a build string names no build: a pip-built llama-server says ``b0-unknown`` for every version."""
    return "unknown" in build.lower() or build in ("b0", "0")


def parse_field(field: str, value: Any) -> Any:
    """A field's value as a fingerprint holds it: an info label's text read back (``""`` is None)."""
    if not isinstance(value, str):
        return value
    if value == "":
        return None
    if field in _INTS:
        number = to_int(value)
        return number if number is not None else value
    if field in _SWITCHES:
        return FLASH_ATTN_VALUES.get(value.lower(), value)
    if field in ("n_gpu_layers", "n_cpu_moe"):
        number = to_int(value)
        return number if number is not None else value
    return value


def _files_shape(files: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [{"name": f.get("name"), "size": f.get("size")} for f in files]


class _Comparison:
    """One pass over two fingerprints: the changes, and which fields (and deciding groups) were compared."""

    def __init__(self, measured: Mapping[str, Any], live: Mapping[str, Any]) -> None:
        self.measured, self.live = measured, live
        self.changes: list[dict[str, Any]] = []
        self.compared: set[str] = set()
        self.groups: set[str] = set()

    def value(self, side: Mapping[str, Any], part: str, name: str) -> Any:
        return parse_field(name, (side.get(part) or {}).get(name))

    def field(self, part: str, name: str, counted: str | None = None) -> bool:
        a, b = self.value(self.measured, part, name), self.value(self.live, part, name)
        if a is None or b is None:
            return False
        self.compared.add(counted or f"{part}.{name}")
        if a != b:
            self.changes.append({"field": f"{part}.{name}", "measured": a, "live": b})
        return True

    def run(self) -> None:
        self._build()
        self._model()
        for name in SETTINGS_FIELDS:
            if self.field("settings", name) and name in DECIDING_SETTINGS:
                self.groups.add(f"settings.{name}")
        for name in HARDWARE_FIELDS:
            self.field("hardware", name)
        for part in ("workload", "policy"):
            a = (self.measured.get(part) or {}).get("digest")
            b = (self.live.get(part) or {}).get("digest")
            if a and b and a != b:
                self.changes.append({"field": f"{part}.digest", "measured": a, "live": b})

    def _build(self) -> None:
        if self.field("runtime", "binary_sha256"):
            self.groups.add("build")
        if self.field("runtime", "build") and not unknown_build(str(self.value(self.measured, "runtime", "build"))):
            self.groups.add("build")
        package = self.field("runtime", "package")
        if self.field("runtime", "backend") and package:
            self.groups.add("build")

    def _model(self) -> None:
        m_model, l_model = self.measured.get("model") or {}, self.live.get("model") or {}
        m_files, l_files = m_model.get("files"), l_model.get("files")
        if m_files is not None and l_files is not None:
            self.compared.add("model")
            if _files_shape(m_files) != _files_shape(l_files):
                self.changes.append({"field": "model.files", "measured": _files_shape(m_files),
                                     "live": _files_shape(l_files)})
                self.groups.add("model")
            else:
                hashed = bool(m_files)
                for i, (a, b) in enumerate(zip(m_files, l_files, strict=True)):
                    told = False
                    for kind in ("sample_sha256", "sha256"):
                        if a.get(kind) and b.get(kind):
                            told = True
                            if a[kind] != b[kind]:
                                self.changes.append({"field": f"model.files[{i}].{kind}", "measured": a[kind],
                                                     "live": b[kind]})
                    hashed = hashed and told
                if hashed:
                    self.groups.add("model")
        elif self.field("model", "path", counted="model"):
            pass
        m_meta, l_meta = m_model.get("meta") or {}, l_model.get("meta") or {}
        said = 0
        for name in META_FIELDS:
            a, b = parse_field(name, m_meta.get(name)), parse_field(name, l_meta.get(name))
            if a is None or b is None:
                continue
            said += name in ("ftype", "n_params")
            self.compared.add("model")
            if a != b:
                self.changes.append({"field": f"model.meta.{name}", "measured": a, "live": b})
        if said == 2:
            self.groups.add("model")


def compare(measured: Mapping[str, Any] | None, live: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """``[{"field", "measured", "live"}]``: what differs between the fingerprint an answer was measured on
    and the live one. A field ``None`` on either side is not compared (nobody can tell)."""
    if not measured or not live:
        return []
    one = _Comparison(measured, live)
    one.run()
    return one.changes


Assessment = dict[str, Any]

_GROUP_NAMES = {"build": "the build identity", "model": "the model identity"}
_GROUP_FIELDS = {"build": ("runtime.binary_sha256", "runtime.build", "runtime.package", "runtime.backend"),
                 "model": ("model.files", "model.meta", "model.path")}


def _why(side: Mapping[str, Any], field: str) -> str | None:
    unknown = side.get("unknown") or {}
    for key in _GROUP_FIELDS.get(field, (field,)):
        if key in unknown:
            return str(unknown[key])
        found = next((str(v) for k, v in unknown.items() if k.startswith(key + "[")), None)
        if found:
            return found
    return None


def _gap(field: str, measured: Mapping[str, Any], live: Mapping[str, Any]) -> str:
    """Why deciding group ``field`` was not compared: the side that lacks it (the live one first) and its
    own reason."""
    for label, side in (("the live fingerprint", live), ("the measured fingerprint", measured)):
        reason = _why(side, field)
        if reason is not None:
            return f"{label}: {reason[:240]}"
    if field == "build":
        build = (measured.get("runtime") or {}).get("build")
        return f"the build string {build} names no build, and nothing else identifies the binary on both sides"
    return "the model is known by its path only" if field == "model" else "unknown on one side"


def assess(measured: Mapping[str, Any], live: Mapping[str, Any]) -> Assessment:
    """``{"state", "changes", "compared", "reason"}`` of an answer measured on ``measured`` against ``live``
    (module docstring)."""
    one = _Comparison(measured, live)
    one.run()
    not_compared = [f for f in COMPARED_FIELDS if f not in one.compared]
    compared = {"fields": len(one.compared & set(COMPARED_FIELDS)), "of": len(COMPARED_FIELDS),
                "not_compared": not_compared}
    if one.changes:
        return {"state": "changed", "changes": one.changes, "compared": compared,
                "reason": describe_changes(one.changes)}
    missing = [g for g in DECIDING_GROUPS if g not in one.groups]
    if not missing:
        return {"state": "valid", "changes": [], "compared": compared, "reason": None}
    counted = f"{compared['fields']} of {compared['of']} fields compared"
    down = (live.get("unknown") or {}).get("runtime")
    if down:
        return {"state": "unknown", "changes": [], "compared": compared,
                "reason": f"{down}: nothing that decides capacity can be compared ({counted})"}
    by_reason: dict[str, list[str]] = {}
    for group in missing:
        by_reason.setdefault(_gap(group, measured, live), []).append(_GROUP_NAMES.get(group, group))
    gaps = "; ".join(f"{', '.join(names)} ({why})" for why, names in by_reason.items())
    return {"state": "unknown", "changes": [], "compared": compared,
            "reason": f"not all that decides capacity was compared ({counted}): {gaps}"}


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
