"""Config files: TOML read at the boundary, dotted overrides, URL checks and one error format.

Every component's config (the load generator's, the session's, the recommender's policy) is a pydantic
model validated once at its entry point. What they share lives here, so that a bad file, a bad override
and a bad field read the same wherever they are refused:

- ``read_toml_config(path, what, error)``: the file's table, or ``error`` naming the file and the cause;
- ``apply_overrides(data, {"ladder.concurrency": [1, 2]})``: dotted paths set on a copy, before validation;
- ``merge_tables(base, top)``: nested tables merged key by key (a file's section over built-in defaults);
- ``format_validation_error(exc, what, data, model)``: one line naming every bad field by its path (a lane by
  its name: ``lanes[dense].url``), an unknown key with the valid ones; ``FieldError`` lets a model-level check
  name the fields it concerns;
- ``load_toml_model(model, path, overrides, what=, error=, prepare=)``: all of the above in order, the one
  loader of every config (``prepare`` reshapes the file's table before the overrides);
- ``HttpUrl``: a string field that must be an ``http(s)`` URL with a host and no query, kept without
  its trailing slash (``check_http_url`` is the check itself);
- the declared limits every config and input file is held to (``MAX_TOKENS``, ``MAX_SECONDS``,
  ``MAX_CONCURRENCY``, ``MAX_TRACE_SPAN_S``), so that a value no session could mean (a prompt of 10^12 tokens,
  a window of 1e300 s, a timeout of ``inf``) is refused in one line naming the setting when the config is read,
  before any runtime starts, rather than found later as a ``MemoryError`` or a session that never ends. Every
  float of a config is finite too (its models set ``allow_inf_nan=False``).

The limits and why each is where it is:

- ``MAX_TOKENS`` = 2^24 (16,777,216) tokens, for any length (a prompt, an answer, a context, a batch): 16 times
  the longest context a GGUF model serves today (1M tokens), so no real request is refused, while a prompt of
  that many words still fits in memory (about 75 MB of text);
- ``MAX_SECONDS`` = one week, for any duration (a window, a warm-up, a timeout): a rung is measured in seconds
  to minutes and a session in hours, so a longer value is a typo (or ``inf``) that would hang a session
  rather than measure anything;
- ``MAX_CONCURRENCY`` = 65,536 users or requests in flight: each is a connection from one client address, and
  one address has at most that many ports;
- ``MAX_TRACE_SPAN_S`` = 366 days, for a recorded trace's timestamps (from its first request) and the window
  replayed: the longest published trace (BurstGPT) spans 121 days;
- ``MAX_CONFIG_BYTES`` = 16 MiB for a config file, read no further: a fleet of 10,000 nodes is about 2 MB.
"""

from __future__ import annotations

import difflib
import re
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any, TypeVar, get_args
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ValidationError

__all__ = [
    "MAX_CONCURRENCY",
    "MAX_CONFIG_BYTES",
    "MAX_SECONDS",
    "MAX_TOKENS",
    "MAX_TRACE_SPAN_S",
    "FieldError",
    "HttpUrl",
    "apply_overrides",
    "check_http_url",
    "first_problem",
    "format_validation_error",
    "load_toml_model",
    "merge_tables",
    "read_secret_file",
    "read_toml_config",
    "validation_problems",
]


MAX_TOKENS = 1 << 24
MAX_SECONDS = 7 * 24 * 3600.0
MAX_CONCURRENCY = 1 << 16
MAX_TRACE_SPAN_S = 366 * 86400.0
MAX_CONFIG_BYTES = 16 << 20


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


class FieldError(ValueError):
    """A refusal by a model-level check that concerns named fields of that model: ``problems`` pairs each
    field (relative to the model) with what is wrong, so the error names ``loadgen.max_window_s``, not just
    ``loadgen``. Raise it from a ``model_validator``; ``format_validation_error`` expands it."""

    def __init__(self, problems: Sequence[tuple[str, str]]) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(f"{f}: {m}" for f, m in self.problems))


_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def _item_name(data: Any, loc: Sequence[Any]) -> Any:
    node = data
    for part in loc:
        if isinstance(node, dict):
            node = node.get(part)
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        else:
            return None
    name = node.get("name") if isinstance(node, dict) else None
    return name if isinstance(name, str) and _NAME.fullmatch(name) else None  # a bad name is no name


def _loc_text(loc: Sequence[Any], data: Any) -> str:
    """``lanes.0.url`` as ``lanes[dense].url`` (an item of a list named by its ``name`` where it has one)."""
    out = ""
    for i, part in enumerate(loc):
        if isinstance(part, int):
            name = _item_name(data, loc[: i + 1])
            out += f"[{name}]" if name else f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _model_at(model: type[BaseModel] | None, loc: Sequence[Any]) -> type[BaseModel] | None:
    """The pydantic model class that the (container) location ``loc`` holds, following fields and lists."""
    node: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        if not (isinstance(node, type) and issubclass(node, BaseModel)) or part not in node.model_fields:
            return None
        node = _model_in(node.model_fields[part].annotation)
    return node if isinstance(node, type) and issubclass(node, BaseModel) else None


def _model_in(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):  # list[Model], Model | None, dict[str, Model]
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _message(err: Any, model: type[BaseModel] | None) -> str:
    msg = str(err["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
    if err["type"] == "extra_forbidden":
        owner = _model_at(model, err["loc"][:-1])
        if owner is not None:
            names = sorted(owner.model_fields)
            close = difflib.get_close_matches(str(err["loc"][-1]), names, n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            return f"unknown setting ({hint}valid: {', '.join(names)})"
        return "unknown setting"
    if err["type"] == "missing":
        return "required, missing"
    return " ".join(msg.split())


def validation_problems(exc: ValidationError, data: Any = None,
                        model: type[BaseModel] | None = None) -> list[tuple[str, str]]:
    """Every refusal of ``exc`` as ``(location, message)``: a list item named by its ``name``
    (``lanes[dense]``), ``FieldError`` expanded to its fields, pydantic's "Value error," prefix and
    documentation links dropped, an unknown key answered with the valid ones (when ``model`` is given)."""
    out: list[tuple[str, str]] = []
    for err in exc.errors(include_url=False):
        loc = tuple(err["loc"])
        cause = (err.get("ctx") or {}).get("error")
        if isinstance(cause, FieldError):
            out += [(_loc_text((*loc, *field.split(".")), data), msg) for field, msg in cause.problems]
            continue
        out.append((_loc_text(loc, data) or "(config)", _message(err, model)))
    return out


def first_problem(exc: ValidationError) -> str:
    """A document's refusal in one line: its first bad field by path, pydantic's message, and how many more
    (``lanes.real.candidates.1.state: Input should be ... (and 2 more)``)."""
    errors = exc.errors(include_url=False)
    first = errors[0]
    where = ".".join(str(part) for part in first["loc"]) or "(the document)"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {first['msg']}{more}"


def format_validation_error(exc: ValidationError, what: str, data: Any = None,
                            model: type[BaseModel] | None = None) -> str:
    """One line naming every bad field by its path: ``invalid session config: lanes[dense].profile: ...; ...``."""
    return f"invalid {what} config: " + "; ".join(f"{loc}: {msg}" for loc, msg in validation_problems(exc, data, model))


def read_toml_config(path: Path, what: str, error: type[ValueError]) -> dict[str, Any]:
    """The TOML table of a config file; ``error`` names the file and the cause when it cannot be read."""
    try:
        with Path(path).open("rb") as fh:
            data = fh.read(MAX_CONFIG_BYTES + 1)
        if len(data) > MAX_CONFIG_BYTES:
            raise error(f"{what} config {path} is longer than {MAX_CONFIG_BYTES:,} bytes (the config file limit)")
        return tomllib.loads(data.decode("utf-8"))
    except OSError as exc:
        raise error(f"cannot read {what} config {path}: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise error(f"{what} config {path} is not UTF-8 text ({exc.reason})") from None
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{what} config {path} is not valid TOML: {exc}") from exc
    except RecursionError:
        raise error(f"{what} config {path} nests too deep (past the TOML parser's recursion bound)") from None


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
        raise error(format_validation_error(exc, what, data, model)) from None


def read_secret_file(flag: str, path: Path) -> str:
    """A secret's text from a file (surrounding whitespace stripped): what a key or password flag names, so the
    secret is in no command line. ``ValueError`` naming the flag for a file that cannot be read or is empty."""
    try:
        text = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{flag} {path}: {getattr(exc, 'strerror', None) or exc}") from exc
    if not text:
        raise ValueError(f"{flag} {path}: the file is empty")
    return text
