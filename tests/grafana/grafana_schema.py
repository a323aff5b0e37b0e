"""Validates dashboard JSON strictly against Grafana's own schema, as the grafana-foundation-sdk models it.

The SDK (PyPI ``grafana-foundation-sdk``, built for one Grafana version: the dev extra pins the build for
the Grafana of docker-compose.yml) is generated from Grafana's CUE schemas: the dashboard kind, every core
panel plugin's ``panelcfg`` (options and ``fieldConfig.defaults.custom``) and the data sources' queries.
It ships no validator and no JSON Schema: ``Dashboard.from_json`` reads the keys it knows and silently drops
the others, and never checks a type. ``problems`` makes that load strict:

1. every object is decoded through its model (panels by type through the panel plugin's registered options
   and field-config models, targets through the data source's query model: a target that stays an
   ``UnknownDataquery`` is a problem), including the parts the SDK leaves as raw JSON where the schema
   names a type (``links``, ``transformations``);
2. every decoded value is checked against the model's type annotation: str, int, float, bool, lists,
   maps, unions, literals and enums (a value outside an enum is a problem), recursively;
3. every key of the input must come back from ``to_json`` with the same value: a key the schema does not
   define (misspelt, or from another Grafana version) or a value the model would change is a problem;
4. every field the schema declares without a default-to-absent (non-optional) must be present in the input;
5. a field-config override is checked as the field config it overrides (``unit`` as
   ``fieldConfig.defaults.unit``, ``custom.X`` through the panel type's ``custom`` model).

Not covered: free-form values the schema types as ``any`` (transformation options, a variable query's
object body), the schema's value constraints beyond types (string patterns and lengths, numeric ranges,
``uid`` length), cross references (a ``$variable`` used but not defined, a datasource uid that exists, a
``refId`` an override matches), panel plugins outside Grafana core (none are used), and the export envelope
``__inputs``/``__requires``, which is no part of the dashboard schema (Grafana's import reads it; checked by
``envelope_problems``). The Prometheus annotation query's own fields (``step``, ``titleFormat``,
``textFormat``, ``useValueForTime``) are not in the schema's ``AnnotationQuery`` either; they are allowed
by name (``ANNOTATION_PROMETHEUS_KEYS``), since the Prometheus data source reads them from there.
"""

from __future__ import annotations

import enum
import json
import re
import types
import typing
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from grafana_foundation_sdk.cog import runtime as cogruntime
from grafana_foundation_sdk.cog import variants as cogvariants
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.cog.plugins import register_default_plugins
from grafana_foundation_sdk.models import dashboard as sdk_dashboard

ANNOTATION_PROMETHEUS_KEYS = frozenset({"step", "titleFormat", "textFormat", "useValueForTime", "tagKeys"})
ENVELOPE_KEYS = frozenset({"__inputs", "__requires"})
_SDK_MODELS = "grafana_foundation_sdk.models"


def _is_model(cls: Any) -> bool:
    return isinstance(cls, type) and cls.__module__.startswith(_SDK_MODELS) and hasattr(cls, "from_json")


def _optional(hint: Any) -> bool:
    return typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in typing.get_args(hint)


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _required_keys(cls: type) -> set[str]:
    """The JSON keys ``cls.to_json`` always writes once every optional attribute is None: the fields the
    schema requires."""
    obj = cls()
    for name, hint in _hints(cls).items():
        if _optional(hint):
            setattr(obj, name, None)
    return set(obj.to_json())


def _model_classes() -> list[type]:
    import importlib
    import pkgutil

    import grafana_foundation_sdk.models as models

    out = []
    for info in pkgutil.iter_modules(models.__path__):
        module = importlib.import_module(f"{_SDK_MODELS}.{info.name}")
        out += [c for c in vars(module).values() if _is_model(c) and c.__module__ == module.__name__
                and "from_json" in vars(c)]
    return out


@contextmanager
def _recording_decodes() -> Iterator[list[tuple[type, Any]]]:
    """Every ``(model class, input object)`` the SDK decodes while inside: each class's ``from_json`` is
    wrapped, and the plugins are registered again inside so their hooks call the wrapped ones."""
    seen: list[tuple[type, Any]] = []
    originals = {cls: vars(cls)["from_json"] for cls in _model_classes()}

    def wrap(func: Any) -> Any:
        def from_json(cls: type, data: Any) -> Any:
            seen.append((cls, data))
            return func(cls, data)

        return classmethod(from_json)

    try:
        for cls, method in originals.items():
            setattr(cls, "from_json", wrap(method.__func__))  # noqa: B010 (a class's method, for a while)
        register_default_plugins()
        yield seen
    finally:
        for cls, method in originals.items():
            setattr(cls, "from_json", method)  # noqa: B010
        register_default_plugins()


def _paths(data: Any, path: str, out: dict[int, str]) -> dict[int, str]:
    """id(object) -> JSON path of every object and list in ``data``."""
    out[id(data)] = path
    if isinstance(data, dict):
        for key, value in data.items():
            _paths(value, f"{path}.{key}", out)
    elif isinstance(data, list):
        for i, value in enumerate(data):
            _paths(value, f"{path}[{i}]", out)
    return out


def _encode(obj: Any) -> Any:
    return json.loads(json.dumps(obj, cls=JSONEncoder))


class _Checker:
    def __init__(self) -> None:
        self.problems: list[str] = []

    def fail(self, path: str, message: str) -> None:
        self.problems.append(f"{path}: {message}")

    # --- 3 and 4: keys and values survive the model --------------------------------------------------------

    def subset(self, given: Any, encoded: Any, path: str, allowed: frozenset[str] = frozenset()) -> None:
        if isinstance(given, dict):
            if not isinstance(encoded, dict):
                self.fail(path, f"an object where the schema has {type(encoded).__name__}")
                return
            for key, value in given.items():
                if key not in encoded:
                    if key not in allowed:
                        self.fail(f"{path}.{key}", "not a field of the schema")
                    continue
                self.subset(value, encoded[key], f"{path}.{key}")
        elif isinstance(given, list):
            if not isinstance(encoded, list) or len(encoded) != len(given):
                self.fail(path, "a list the schema does not keep")
                return
            for i, (a, b) in enumerate(zip(given, encoded, strict=True)):
                self.subset(a, b, f"{path}[{i}]")
        elif (type(given) is not type(encoded) and not (_number(given) and _number(encoded))) or given != encoded:
            self.fail(path, f"{given!r} comes back as {encoded!r}")

    def decode(self, cls: type, data: Any, path: str, allowed: frozenset[str] = frozenset()) -> Any:
        """``cls.from_json(data)``, checked: 1 to 4 for this object and everything under it."""
        if not isinstance(data, dict):
            self.fail(path, f"{cls.__name__} must be an object, got {type(data).__name__}")
            return None
        obj = getattr(cls, "from_json")(data)  # noqa: B009 (every SDK model has one)
        missing = _required_keys(cls) - set(data)
        if missing:
            self.fail(path, f"missing required {sorted(missing)} ({cls.__name__})")
        self.typed(obj, path)
        self.subset(data, _encode(obj), path, allowed)
        return obj

    # --- 1 and 2: every value has its annotated type ------------------------------------------------------

    def typed(self, obj: Any, path: str) -> None:
        if isinstance(obj, cogruntime.UnknownDataquery):
            self.fail(path, "a query no data source model decodes (datasource type missing or unknown)")
            return
        for name, hint in _hints(type(obj)).items():
            value = getattr(obj, name, None)
            if value is not None:
                self.value(value, hint, f"{path}.{name}")

    def value(self, value: Any, hint: Any, path: str) -> None:
        problems = self._value(value, hint, path)
        self.problems.extend(problems)

    def _value(self, value: Any, hint: Any, path: str) -> list[str]:
        """The problems of ``value`` as a ``hint`` (empty: it is one)."""
        origin, args = typing.get_origin(hint), typing.get_args(hint)
        if hint in (Any, object):
            if _is_model(type(value)):
                sub = _Checker()
                sub.typed(value, path)
                return sub.problems
            return []
        if origin in (typing.Union, types.UnionType):
            if value is None and type(None) in args:
                return []
            attempts = [self._value(value, arm, path) for arm in args if arm is not type(None)]
            return [] if any(not a for a in attempts) else min(attempts, key=len)
        if origin is typing.Literal:
            return [] if value in args else [f"{path}: {value!r} is not one of {list(args)}"]
        if origin is list:
            if not isinstance(value, list):
                return [f"{path}: expected a list, got {type(value).__name__}"]
            return [p for i, item in enumerate(value) for p in self._value(item, args[0], f"{path}[{i}]")]
        if origin is dict:
            if not isinstance(value, dict):
                return [f"{path}: expected an object, got {type(value).__name__}"]
            return [p for k, item in value.items() for p in self._value(item, args[1], f"{path}.{k}")]
        if isinstance(hint, type) and issubclass(hint, enum.Enum):
            try:
                hint(value)
            except ValueError:
                return [f"{path}: {value!r} is not one of {[m.value for m in hint]}"]
            return []
        if hint is bool:
            return [] if isinstance(value, bool) else [f"{path}: expected a boolean, got {value!r}"]
        if hint is int:
            ok = isinstance(value, int) and not isinstance(value, bool)
            return [] if ok else [f"{path}: expected an integer, got {value!r}"]
        if hint is float:
            return [] if _number(value) else [f"{path}: expected a number, got {value!r}"]
        if hint is str:
            return [] if isinstance(value, str) else [f"{path}: expected a string, got {value!r}"]
        if _is_model(hint):
            sub = _Checker()
            if isinstance(value, dict):  # the SDK left it raw (links, transformations): decode it here
                sub.decode(hint, value, path)
            elif isinstance(value, hint):
                sub.typed(value, path)
            else:
                sub.fail(path, f"expected {hint.__name__}, got {type(value).__name__}")
            return sub.problems
        if isinstance(hint, type) and issubclass(hint, cogvariants.Dataquery):
            sub = _Checker()
            sub.typed(value, path)
            return sub.problems
        if isinstance(hint, type):
            return [] if isinstance(value, hint) else [f"{path}: expected {hint.__name__}, got {value!r}"]
        return []

    # --- 5: overrides as the field config they override ----------------------------------------------------

    def overrides(self, panel: dict[str, Any], path: str) -> None:
        custom_hook = getattr(cogruntime.panelcfg_config(panel.get("type", "")), "field_config_from_json_hook", None)
        custom_cls = getattr(custom_hook, "__self__", None)
        for i, override in enumerate(panel.get("fieldConfig", {}).get("overrides", [])):
            for j, prop in enumerate(override.get("properties", [])):
                where = f"{path}.fieldConfig.overrides[{i}].properties[{j}]"
                pid, value = prop.get("id", ""), prop.get("value")
                if pid.startswith("custom."):
                    if custom_cls is None:
                        self.fail(where, f"{pid}: the panel type has no custom field config model")
                        continue
                    self.decode(custom_cls, {pid.removeprefix("custom."): value}, f"{where}({pid})")
                else:
                    self.decode(sdk_dashboard.FieldConfig, {pid: value}, f"{where}({pid})")


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def problems(data: dict[str, Any]) -> list[str]:
    """Every way ``data`` (a dashboard, export envelope allowed) departs from the SDK's dashboard schema."""
    check = _Checker()
    body = {k: v for k, v in data.items() if k not in ENVELOPE_KEYS}
    with _recording_decodes() as decoded:
        model = check.decode(sdk_dashboard.Dashboard, body, "dashboard")
    if model is None:
        return check.problems
    paths = _paths(body, "dashboard", {})
    for cls, obj in decoded:  # 4, for every object the SDK decoded on its own
        missing = _required_keys(cls) - set(obj) if isinstance(obj, dict) else set()
        if missing:
            check.fail(paths.get(id(obj), "dashboard(...)"), f"missing required {sorted(missing)} ({cls.__name__})")
    # annotations: the Prometheus query fields live on the annotation itself (see the module docstring)
    for i, annotation in enumerate(body.get("annotations", {}).get("list", [])):
        path = f"dashboard.annotations.list[{i}]"
        check.problems = [p for p in check.problems if not _allowed_annotation_key(p, path)]
        check.decode(sdk_dashboard.AnnotationQuery, annotation, path, ANNOTATION_PROMETHEUS_KEYS)
    panels = [*body.get("panels", [])]
    for i, panel in enumerate(panels):
        check.overrides(panel, f"dashboard.panels[{i}]")
        for j, inner in enumerate(panel.get("panels", []) if panel.get("type") == "row" else []):
            check.overrides(inner, f"dashboard.panels[{i}].panels[{j}]")
    return sorted(set(check.problems))


def _allowed_annotation_key(problem: str, path: str) -> bool:
    return any(problem == f"{path}.{key}: not a field of the schema" for key in ANNOTATION_PROMETHEUS_KEYS)


def envelope_problems(data: dict[str, Any]) -> list[str]:
    """The import envelope: every ``${NAME}`` the JSON uses that is not a dashboard variable is an input
    declared in ``__inputs`` (and every input is used), and ``__requires`` names each panel type used."""
    out: list[str] = []
    inputs = {i["name"]: i for i in data.get("__inputs", [])}
    for name, spec in inputs.items():
        if spec.get("type") != "datasource" or not spec.get("pluginId"):
            out.append(f"__inputs.{name}: a datasource input needs type datasource and its pluginId")
    variables = {v["name"] for v in data.get("templating", {}).get("list", [])}
    text = json.dumps({k: v for k, v in data.items() if k not in ENVELOPE_KEYS})
    used = set(_placeholders(text))
    out += [f"${{{n}}}: neither an input nor a variable" for n in sorted(used - variables - set(inputs))]
    out += [f"__inputs.{n}: never used" for n in sorted(set(inputs) - used)]
    kinds = {p["type"] for p in _panels(data.get("panels", [])) if p["type"] != "row"}
    required = {r["id"] for r in data.get("__requires", []) if r.get("type") == "panel"}
    out += [f"__requires: panel {k} not listed" for k in sorted(kinds - required)]
    return out


def _placeholders(text: str) -> list[str]:
    return re.findall(r"\$\{([A-Za-z0-9_]+)(?::[a-z]+)?\}", text)


def _panels(panels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [q for p in panels for q in (p, *(p.get("panels", []) if p.get("type") == "row" else []))]
