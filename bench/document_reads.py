"""How often code outside the document's model reads the recommendations document by string key (issue 30).

The document has one shape, ``answer.models.RecommendationsDocument``: a consumer validates it once at
its edge (a file read, an HTTP body) and reads attributes after. This script counts what is left of the other
way: a subscript with a string literal (``lane["status"]``) or a ``.get("status")`` whose key is a field name
of the document's models (every model reachable from ``RecommendationsDocument``, the steps' figures
included), in every non-test module that handles the document or a part of it (one that names
``recommendations``, the document's models, ``answers(``, ``recommended_concurrency`` or ``max_rate_rps``).
``satbench/answer/models.py`` itself is not counted, nor ``core/figures.py``, whose ``StepFigures.from_dict`` is
the step's own edge (it validates a step from any JSON that carries one), nor the document's edge
(``EDGES``): ``answer.document.read_document`` and ``as_v2``, which read the ``schema`` a JSON body
says to take a v1 document in v2 before the one validation.

The count is an upper bound: a key the document shares with another shape (``manifest["lanes"]``,
``tune.json``'s ``"status"``) is counted too where it sits in such a module; ``--list`` prints every read so
a reader can judge them. Reads of shapes that are surely not the document are left out, each by a rule that
names the shape (``NOT_THE_DOCUMENT``), never a whole file:

- a receiver named ``scope``: an ASGI request scope (``scope["method"]``, ``scope["path"]``; the
  recommender's ``CachedDocumentASGI``), the HTTP request, not the answer;
- a receiver that is an attribute ``labels``: a Prometheus sample's label set (``sample.labels.get("lane")``,
  ``recommender.validity.live_by_key``), the series' labels, not an answer's fields;
- a receiver that is a call of ``objectives()``: the dashboards' objective lines by objective name
  (``satbench.dashboards.shapes.objectives``: ``objectives().get("jain")``), the policy's limits;
- reads inside ``satbench/report/data.py`` ``parse_steps_document``: ``steps.json``, the load generator's
  steps file (a list of steps, ``{"steps": [...]}`` or ``{"lanes": {lane: [...]}}``), whose steps it hands to
  ``StepFigures.from_dict``, the step's edge.

    .venv/bin/python bench/document_reads.py [--list] [--root TREE]

``--root`` counts another checkout of the tree (``git archive <commit> | tar -x -C TREE``), e.g. the count
before a change; the field names are always today's models'.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import sys
import typing
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pydantic import BaseModel  # noqa: E402

from satbench.answer.models import RecommendationsDocument  # noqa: E402

FOLDERS = ("satbench", "bench")
EXCLUDED = {"satbench/answer/models.py", "satbench/core/figures.py", "bench/document_reads.py"}
MARKERS = ("recommendations", "RecommendationsDocument", "LaneModel", "answers(", "recommended_concurrency",
           "max_rate_rps")


def _types_in(annotation: object) -> list[type]:
    out: list[type] = []
    args = typing.get_args(annotation)
    if isinstance(annotation, type):
        out.append(annotation)
    for arg in args:
        out.extend(_types_in(arg))
    return out


def document_keys() -> set[str]:
    """Every field name (and alias) of the models reachable from ``RecommendationsDocument``."""
    keys: set[str] = set()
    seen: set[type] = set()
    todo: list[type] = [RecommendationsDocument]
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        fields = getattr(cls, "__pydantic_fields__", None)
        if fields is None and dataclasses.is_dataclass(cls):
            fields = {f.name: None for f in dataclasses.fields(cls)}
            hints = typing.get_type_hints(cls)
        elif fields is not None:
            hints = {name: info.annotation for name, info in fields.items()}
        else:
            continue
        for name, info in fields.items():
            keys.add(name)
            alias = getattr(info, "alias", None)
            if alias:
                keys.add(alias)
            for t in _types_in(hints.get(name)):
                if (isinstance(t, type) and issubclass(t, BaseModel)) or dataclasses.is_dataclass(t):
                    todo.append(t)
    return keys


# (file, function) -> the shape read there, which is not the document, or the edge that validates it
NOT_THE_DOCUMENT_IN = {
    ("satbench/report/data.py", "parse_steps_document"): "steps.json, the load generator's steps file",
}
EDGES = {
    ("satbench/answer/document.py", "read_document"): "the one validation of a document's JSON",
    ("satbench/answer/document.py", "as_v2"): "a v1 document's JSON said in v2, before that validation",
}
# receivers whose reads are of another shape: a name, an attribute, or the function a call is of
NOT_THE_DOCUMENT = {
    "scope": "an ASGI request scope",
    ".labels": "a Prometheus sample's label set",
    "objectives()": "the dashboards' objective lines by name",
}


def _receiver(node: ast.expr) -> str | None:
    """The receiver's spelling in ``NOT_THE_DOCUMENT``'s terms: ``name``, ``.attr`` or ``function()``."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f".{node.attr}"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return f"{node.func.id}()"
    return None


def reads(source: str, keys: set[str], rel: str = "") -> list[tuple[int, str]]:
    """``(line, key)`` of every string-key read of a document key in ``source`` (the module at ``rel``), less
    the reads of the shapes ``NOT_THE_DOCUMENT`` and ``NOT_THE_DOCUMENT_IN`` name and of the ``EDGES``."""
    tree = ast.parse(source)
    skipped: set[int] = set()
    for func in ast.walk(tree):
        if isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef) and (
                (rel, func.name) in NOT_THE_DOCUMENT_IN or (rel, func.name) in EDGES):
            skipped.update(id(inner) for inner in ast.walk(func))
    found = []
    for node in ast.walk(tree):
        key = None
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            if isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
                key, receiver = node.slice.value, node.value
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            key, receiver = node.args[0].value, node.func.value
        if key is None or key not in keys or id(node) in skipped or _receiver(receiver) in NOT_THE_DOCUMENT:
            continue
        found.append((getattr(node, "lineno", 0), key))
    return sorted(found)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="print every read, file:line key")
    parser.add_argument("--root", type=Path, default=ROOT, help="the tree to count (default: this one)")
    args = parser.parse_args(argv)
    keys = document_keys()
    per_file: Counter[str] = Counter()
    for folder in FOLDERS:
        for path in sorted((args.root / folder).rglob("*.py")):
            rel = path.relative_to(args.root).as_posix()
            text = path.read_text()
            if rel in EXCLUDED or not any(m in text for m in MARKERS):
                continue
            found = reads(text, keys, rel)
            if found:
                per_file[rel] = len(found)
            if args.list:
                for line, key in found:
                    print(f"{rel}:{line} {key}")
    for rel, n in per_file.most_common():
        print(f"{n:5d} {rel}")
    print(f"{sum(per_file.values())} string-key reads of document fields in {len(per_file)} files "
          f"({len(keys)} field names)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
