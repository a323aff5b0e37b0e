"""Reading llama-server request bodies: prompts, chat messages, and the checks that answer 400.

Pure functions; each raises ``RequestError`` with the message llama-server gives where it was recorded
(``tests/fixtures/llamacpp/dropin/``). What is checked:

- ``prompt``: a string, a list of token ids, a list mixing ids and strings (one prompt), an object
  ``{"prompt_string": ...}`` (``multimodal_data`` is refused: the simulator has no media projector), or a
  list of those (one task per prompt, as llama-server's ``tokenize_input_prompts``);
- chat ``messages``: a non-empty array of objects with a string ``role``, a ``content`` that is a string, an
  array of parts or (for an assistant) null, and not two assistant messages at the end;
  ``add_generation_prompt`` and ``continue_final_message`` not both true;
- ``response_format`` (``text``, ``json_object``, ``json_schema``) and ``json_schema``: a schema must be an
  object whose ``type`` values are JSON Schema types;
- ``grammar``: GBNF that parses (rules, literals, character classes, groups, repetitions) and whose every
  referenced rule is defined, with a ``root``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from satbench.simulator.tokens import BOS_ID, render_chat, tokenize

__all__ = [
    "RequestError",
    "chat_prompt_text",
    "check_grammar",
    "check_messages",
    "check_response_format",
    "prompt_ids",
    "split_prompts",
]

JSON_TYPES = ("string", "number", "integer", "boolean", "object", "array", "null")


class RequestError(ValueError):
    """A request llama-server refuses with 400 ``invalid_request_error``."""


# -- prompts ------------------------------------------------------------------------------------------------


def _is_ids(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(t, int) and not isinstance(t, bool)
                                                           for t in value)


def _is_mixed(value: Any) -> bool:
    if not isinstance(value, list):
        return False
    has_str = any(isinstance(t, str) for t in value)
    has_int = any(isinstance(t, int) and not isinstance(t, bool) for t in value)
    return has_str and has_int and all(isinstance(t, str | int) for t in value)


def split_prompts(prompt: Any) -> list[Any]:
    """The prompts of one request: one, or one per element of a list of prompts."""
    if isinstance(prompt, str | dict) or _is_ids(prompt) or _is_mixed(prompt):
        return [prompt]
    if isinstance(prompt, list) and prompt:
        return list(prompt)
    raise RequestError("\"prompt\" must be a string, a list of tokens, or a list of prompts")


def prompt_ids(prompt: Any) -> tuple[int, ...]:
    """Token ids of one prompt, BOS first when it starts with text (as llama-server adds special tokens)."""
    if isinstance(prompt, str):
        return (BOS_ID, *tokenize(prompt))
    if isinstance(prompt, dict):
        if prompt.get("multimodal_data"):
            raise RequestError("multimodal data given, but this model has no multimodal support")
        text = prompt.get("prompt_string")
        if not isinstance(text, str):
            raise RequestError("\"prompt_string\" must be a string")
        return (BOS_ID, *tokenize(text))
    if _is_ids(prompt):
        return tuple(int(t) for t in prompt)
    if _is_mixed(prompt):
        out: list[int] = []
        for i, part in enumerate(prompt):
            if isinstance(part, str):
                out += ([BOS_ID] if i == 0 else []) + tokenize(part)
            else:
                out.append(int(part))
        return tuple(out)
    raise RequestError("each prompt must be a string, a list of tokens, or {\"prompt_string\": ...}")


# -- chat ---------------------------------------------------------------------------------------------------


def check_messages(messages: Any) -> None:
    if not isinstance(messages, list) or not messages:
        raise RequestError("'messages' is required and must be a non-empty array")
    for m in messages:
        if not isinstance(m, dict):
            raise RequestError("each message must be an object")
        role = m.get("role")
        if not isinstance(role, str):
            raise RequestError("each message must have a string 'role'")
        content = m.get("content")
        if content is None:
            if role != "assistant":
                raise RequestError("All non-assistant messages must contain 'content'")
        elif not isinstance(content, str | list):
            raise RequestError("Expected 'content' to be a string or an array")
        elif isinstance(content, list):
            for part in content:
                if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                    raise RequestError("each content part must be an object with a string 'type'")
    if len(messages) >= 2 and all(m.get("role") == "assistant" for m in messages[-2:]):
        raise RequestError("Cannot have 2 or more assistant messages at the end of the list.")


def check_media(messages: list[dict[str, Any]], media_path: str | None) -> None:
    """``file://`` image and audio URLs must name a file inside ``--media-path`` (no traversal)."""
    for m in messages:
        content = m.get("content")
        if not isinstance(content, list):
            continue
        for part in content:
            ref = part.get("image_url") or part.get("input_audio") or {}
            url = ref.get("url") if isinstance(ref, dict) else ref
            if not isinstance(url, str) or not url.startswith("file://"):
                continue
            if media_path is None:
                raise RequestError("local media files are disabled; start the server with --media-path")
            rel = url[len("file://"):].lstrip("/")
            base = Path(media_path).resolve()
            target = (base / rel).resolve()
            if base not in target.parents or not target.is_file():
                raise RequestError(f"media file not found or not allowed: {url}")


def chat_prompt_text(body: Mapping[str, Any]) -> str:
    """The rendered chat prompt of a validated body (honouring ``continue_final_message``)."""
    messages = body["messages"]
    cont = bool(body.get("continue_final_message", False))
    if cont and body.get("add_generation_prompt", False) is True and "add_generation_prompt" in body:
        raise RequestError("Cannot set both add_generation_prompt and continue_final_message to true.")
    text = render_chat(messages)
    if cont and messages and messages[-1].get("role") == "assistant":
        text = text[: -len("<|im_end|>\n<|im_start|>assistant\n")]
    elif body.get("add_generation_prompt", True) is False:
        text = text[: -len("<|im_start|>assistant\n")]
    return text


# -- structured output --------------------------------------------------------------------------------------


def _check_schema(schema: Any, where: str = "#") -> None:
    if isinstance(schema, bool):
        return
    if not isinstance(schema, dict):
        raise RequestError(f"JSON schema error at {where}: a schema must be an object")
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind] if kind is not None else []
    for k in kinds:
        if not isinstance(k, str):
            raise RequestError(f"JSON schema error at {where}: 'type' must be a string")
        if k not in JSON_TYPES:
            raise RequestError(f"JSON schema error at {where}: unrecognized type {k}")
    for key in ("items", "additionalProperties", "not", "contains"):
        sub = schema.get(key)
        if isinstance(sub, dict):
            _check_schema(sub, f"{where}/{key}")
        elif isinstance(sub, list) and key == "items":
            for i, s in enumerate(sub):
                _check_schema(s, f"{where}/items/{i}")
    for key in ("properties", "$defs", "definitions", "patternProperties"):
        subs = schema.get(key)
        if isinstance(subs, dict):
            for name, s in subs.items():
                _check_schema(s, f"{where}/{key}/{name}")
    for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
        subs = schema.get(key)
        if isinstance(subs, list):
            for i, s in enumerate(subs):
                _check_schema(s, f"{where}/{key}/{i}")


def check_response_format(body: Mapping[str, Any]) -> None:
    fmt = body.get("response_format")
    if fmt is not None:
        if not isinstance(fmt, dict):
            raise RequestError("response_format must be an object")
        kind = fmt.get("type")
        if kind == "json_object":
            if "schema" in fmt:
                _check_schema(fmt["schema"])
        elif kind == "json_schema":
            spec = fmt.get("json_schema")
            schema = spec.get("schema") if isinstance(spec, dict) else None
            _check_schema(schema if schema is not None else {})
        elif kind != "text":
            raise RequestError(
                f'response_format type must be one of "text" or "json_object", but got: {kind}')
    if "json_schema" in body and body["json_schema"] is not None:
        _check_schema(body["json_schema"])
    grammar = body.get("grammar")
    if grammar is not None:
        if not isinstance(grammar, str):
            raise RequestError("\"grammar\" must be a string")
        check_grammar(grammar)


# -- GBNF ---------------------------------------------------------------------------------------------------

_GBNF_TOKEN = re.compile(
    r"""\s+|\#[^\n]*|(?P<def>::=)|(?P<name>[A-Za-z0-9_-]+)|(?P<lit>"(?:\\.|[^"\\])*")|"""
    r"""(?P<cls>\[(?:\\.|[^\]\\])*\])|(?P<op>[()|*+?.])|(?P<rep>\{\s*\d+\s*(?:,\s*\d*\s*)?\})"""
)


def check_grammar(text: str) -> None:
    """Raises ``RequestError`` unless ``text`` is GBNF that llama.cpp's grammar parser would accept."""
    fail = RequestError("Failed to initialize samplers: failed to parse grammar")
    tokens: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        m = _GBNF_TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise fail
        pos = m.end()
        kind = m.lastgroup
        if kind is not None:
            tokens.append((kind, m.group(kind)))
    defined: set[str] = set()
    used: set[str] = set()
    i, depth = 0, 0
    if not tokens:
        raise fail
    while i < len(tokens):
        if tokens[i][0] == "name" and i + 1 < len(tokens) and tokens[i + 1][0] == "def":
            if depth:
                raise fail
            defined.add(tokens[i][1])
            i += 2
            if i >= len(tokens) or tokens[i][0] == "def":
                raise fail
            continue
        kind, value = tokens[i]
        if kind == "def" or not defined:
            raise fail
        if kind == "name":
            used.add(value)
        elif value == "(":
            depth += 1
        elif value == ")":
            depth -= 1
            if depth < 0:
                raise fail
        i += 1
    if depth or "root" not in defined or not used <= defined:
        raise fail
