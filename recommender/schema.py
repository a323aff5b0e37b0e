"""The committed JSON Schema of the recommendations document, generated from the pydantic models.

``python -m recommender.schema`` rewrites ``recommender/schema/recommendations.v1.json``;
``python -m recommender.schema --check`` exits 1 when the committed file differs from what the models
generate (the drift test runs the same comparison). Output is sorted, indented JSON so diffs read well.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from recommender.models import RecommendationsDocument

__all__ = ["SCHEMA_PATH", "generate_schema", "main", "render_schema"]

SCHEMA_PATH = Path(__file__).parent / "schema" / "recommendations.v1.json"


def generate_schema() -> dict[str, Any]:
    schema = RecommendationsDocument.model_json_schema(by_alias=True, mode="serialization")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://satbench.invalid/schema/recommendations.v1.json"
    return schema


def render_schema() -> str:
    return json.dumps(generate_schema(), indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="fail when the committed schema is out of date")
    args = parser.parse_args(argv)
    text = render_schema()
    if args.check:
        current = SCHEMA_PATH.read_text(encoding="utf-8") if SCHEMA_PATH.exists() else ""
        if current != text:
            print(f"{SCHEMA_PATH.name} is out of date: run python -m recommender.schema", file=sys.stderr)
            return 1
        return 0
    SCHEMA_PATH.parent.mkdir(parents=True, exist_ok=True)
    SCHEMA_PATH.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
