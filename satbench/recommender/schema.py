"""The committed JSON Schema of the recommendations document, generated from the pydantic models.

``python -m satbench.recommender.schema`` rewrites ``recommender/schema/recommendations.v2.json``
(``recommendations.v1.json`` beside it is v1's, frozen: the schema of the v1 view);
``python -m satbench.recommender.schema --check`` exits 1 when the committed file differs from what the models
generate (the drift test runs the same comparison). Output is sorted, indented JSON so diffs read well.

The sample document DESIGN.md points to (``docs/recommendations-sample.json``, a file of its own so that the
design reads as prose) is a real one: ``design_sample(doc)`` trims a real run's document to one lane and its
answer's rung (numbers rounded to four significant digits, the checkout's path written ``<repo>``),
``python -m satbench.recommender.schema --design-sample RUN_DIR`` writes it, and the session test checks that the
committed sample validates against the schema and has the keys of the session's real document
(``key_shape``), so the sample cannot fall behind the output.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from satbench.answer.document import read_document
from satbench.answer.models import RecommendationsDocument

__all__ = [
    "SAMPLE_PATH",
    "SCHEMA_PATH",
    "design_sample",
    "generate_schema",
    "key_shape",
    "main",
    "read_design_sample",
    "render_schema",
    "write_design_sample",
]

SCHEMA_PATH = Path(__file__).parent / "schema" / "recommendations.v2.json"
SAMPLE_PATH = Path(__file__).resolve().parents[2] / "docs" / "recommendations-sample.json"


# where the run's runtime looked for files: this checkout, possibly through a process's root (/proc/PID/root)
_HERE = re.compile(r"(/proc/\d+/root)?" + re.escape(str(Path(__file__).resolve().parents[2])))


def _rounded(value: Any) -> Any:
    """Numbers to four significant digits, and this machine's paths as ``<repo>``."""
    if isinstance(value, float):
        return float(f"{value:.4g}")
    if isinstance(value, str):
        return _HERE.sub("<repo>", value)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def design_sample(doc: Mapping[str, Any] | RecommendationsDocument) -> dict[str, Any]:
    """A real document trimmed for DESIGN.md: the first lane with an answer, only its recommended rung, and
    only its node in the node index. Cut on the model (``read_document``) and dumped as it was said
    (``exclude_unset``): for a document the builder wrote, that is its own JSON, key for key."""
    document = read_document(doc)
    lanes = document.lanes
    name = next((n for n, lane in lanes.items() if lane.recommended_concurrency is not None), next(iter(lanes), None))
    if name is not None:
        lane = lanes[name]
        at = [s for s in lane.steps if s.concurrency == lane.recommended_concurrency]
        update: dict[str, Any] = {"lanes": {name: lane.model_copy(update={"steps": at[:1] or lane.steps[:1]})}}
        if "nodes" in document.model_fields_set:
            index = document.nodes.get(lane.node)
            update["nodes"] = {} if index is None else {lane.node: index.model_copy(update={"lanes": [name]})}
        document = document.model_copy(update=update)
    return dict(_rounded(document.model_dump(mode="json", by_alias=True, exclude_unset=True)))


def key_shape(value: Any) -> Any:
    """The keys of a document, nested (lists by their first item; ``None`` where a value is no container)."""
    if isinstance(value, dict):
        return {k: key_shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [key_shape(value[0])] if value and isinstance(value[0], dict | list) else []
    return None


def read_design_sample(path: Path = SAMPLE_PATH) -> dict[str, Any]:
    return dict(json.loads(path.read_text(encoding="utf-8")))


def write_design_sample(doc: Mapping[str, Any], path: Path = SAMPLE_PATH) -> None:
    path.write_text(json.dumps(design_sample(doc), indent=2) + "\n", encoding="utf-8")


def generate_schema() -> dict[str, Any]:
    schema = RecommendationsDocument.model_json_schema(by_alias=True, mode="serialization")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://satbench.invalid/schema/recommendations.v2.json"
    return schema


def render_schema() -> str:
    return json.dumps(generate_schema(), indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="fail when the committed schema is out of date")
    parser.add_argument("--design-sample", type=Path, metavar="RUN_DIR",
                        help="write the sample document (docs/recommendations-sample.json) from this run's "
                             "recommendations.json")
    args = parser.parse_args(argv)
    if args.design_sample is not None:
        write_design_sample(json.loads((args.design_sample / "recommendations.json").read_text(encoding="utf-8")))
        return 0
    text = render_schema()
    if args.check:
        current = SCHEMA_PATH.read_text(encoding="utf-8") if SCHEMA_PATH.exists() else ""
        if current != text:
            print(f"{SCHEMA_PATH.name} is out of date: run python -m satbench.recommender.schema", file=sys.stderr)
            return 1
        return 0
    SCHEMA_PATH.parent.mkdir(parents=True, exist_ok=True)
    SCHEMA_PATH.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
