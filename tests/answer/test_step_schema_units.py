"""The document's JSON Schema states each step figure's unit and kind, read from its declaration on
``StepFigures`` (``core.figures.figure``), in the committed schema as in the one rendered now."""

from __future__ import annotations

import json
from typing import Any

from satbench.core.figures import FIGURES
from satbench.recommender.schema import SCHEMA_PATH, render_schema


def _step_properties(text: str) -> dict[str, Any]:
    properties: dict[str, Any] = json.loads(text)["$defs"]["StepModel"]["properties"]
    return properties


def test_each_step_figure_states_its_unit_and_kind_in_the_schema() -> None:
    for properties in (_step_properties(render_schema()), _step_properties(SCHEMA_PATH.read_text(encoding="utf-8"))):
        # truth: what these figures are, by their definitions
        assert properties["ttft_s"]["description"] == "unit: s (seconds); kind: quantile"
        assert properties["throughput_tok_s"]["description"] == "unit: tok/s (tokens per second); kind: rate"
        assert properties["jain"]["description"] == "unit: index (Jain's index); kind: value"
        assert properties["requests"]["description"] == "unit: count (a count); kind: count"
        assert properties["latency_tail"]["description"] == "unit: s (seconds); kind: tail"
        for name, fig in FIGURES.items():
            assert properties[name]["description"].startswith(f"unit: {fig.unit} (")
            assert properties[name]["description"].endswith(f"; kind: {fig.kind}")
        assert "description" not in properties["concurrency"] and "description" not in properties["valid"]
