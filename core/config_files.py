"""Config files: TOML read at the boundary, dotted overrides, URL checks and one error format.

Every component's config (the load generator's, the session's, the recommender's policy) is a pydantic
model validated once at its entry point. What they share lives here, so that a bad file, a bad override
and a bad field read the same wherever they are refused:

- ``read_toml_config(path, what, error)``: the file's table, or ``error`` naming the file and the cause;
- ``apply_overrides(data, {"ladder.concurrency": [1, 2]})``: dotted paths set on a copy, before validation;
- ``merge_tables(base, top)``: nested tables merged key by key (a file's section over built-in defaults);
- ``format_validation_error(exc, what)``: one line per bad field, named by its dotted path;
- ``load_toml_model(model, path, overrides, what=, error=, prepare=)``: all of the above in order, the one
  loader of every config (``prepare`` reshapes the file's table before the overrides);
- ``HttpUrl``: a string field that must be an ``http(s)`` URL with a host and no query, kept without
  its trailing slash (``check_http_url`` is the check itself).
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ValidationError

__all__ = [
    "HttpUrl",
    "apply_overrides",
    "check_http_url",
    "format_validation_error",
    "load_toml_model",
    "merge_tables",
    "read_toml_config",
]


def check_http_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"must be an http(s) URL with a host, got {value!r}")
    try:
        _ = parts.port
    except ValueError as exc:
        raise ValueError(f"bad port in {value!r}") from exc
    if parts.query or parts.fragment:
        raise ValueError("must not carry a query or fragment")
    return value.rstrip("/")


HttpUrl = Annotated[str, AfterValidator(check_http_url)]


def apply_overrides(data: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Returns a copy of ``data`` with each dotted-path override set (``"ladder.concurrency": [1, 2]``)."""
    out: dict[str, Any] = _deep_copy(data)
    for path, value in overrides.items():
        keys = path.split(".")
        node = out
        for key in keys[:-1]:
            child = node.get(key)
            if not isinstance(child, dict):
                child = {}
                node[key] = child
            node = child
        node[keys[-1]] = value
    return out


def _deep_copy(data: dict[str, Any]) -> dict[str, Any]:
    return {k: _deep_copy(v) if isinstance(v, dict) else v for k, v in data.items()}


def merge_tables(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """``top`` over ``base``: nested tables merge key by key, any other value of ``top`` replaces."""
    out = dict(base)
    for key, value in top.items():
        both = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = merge_tables(out[key], value) if both else value
    return out


def format_validation_error(exc: ValidationError, what: str) -> str:
    """One line per bad field, named by its dotted path: ``invalid <what> config:\\n  ladder.concurrency: ...``."""
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(config)"
        lines.append(f"  {loc}: {err['msg']}")
    return f"invalid {what} config:\n" + "\n".join(lines)


def read_toml_config(path: Path, what: str, error: type[ValueError]) -> dict[str, Any]:
    """The TOML table of a config file; ``error`` names the file and the cause when it cannot be read."""
    try:
        with Path(path).open("rb") as fh:
            return tomllib.load(fh)
    except OSError as exc:
        raise error(f"cannot read {what} config {path}: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{what} config {path} is not valid TOML: {exc}") from exc


M = TypeVar("M", bound=BaseModel)


def load_toml_model(model: type[M], path: Path | None, overrides: dict[str, Any] | None, *, what: str,
                    error: type[ValueError],
                    prepare: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> M:
    """Reads TOML (or nothing), reshapes it, applies dotted overrides, validates; ``error`` on any refusal."""
    data = read_toml_config(path, what, error) if path is not None else {}
    if prepare is not None:
        data = prepare(data)
    data = apply_overrides(data, overrides or {})
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise error(format_validation_error(exc, what)) from exc
