"""The committed dashboards against Grafana's own schema, as grafana-foundation-sdk models it.

What the validation covers and what it does not is in ``tests/grafana/grafana_schema.py``'s docstring (and
grafana/README.md): the SDK has no validator, so the JSON is loaded strictly through its models (unknown
keys, wrong types, enum values, missing required fields, targets no data source model decodes, overrides as
the field config they override); free-form ``any`` values, value constraints, cross references and the
import envelope's meaning are outside it. The negative cases below show each check firing.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("grafana_foundation_sdk", reason="the dev extra's grafana-foundation-sdk is not installed")

from satbench.dashboards.overview import DASHBOARDS, GRAFANA_VERSION
from tests.grafana.grafana_schema import envelope_problems, problems

ROOT = Path(__file__).resolve().parents[2]


def _committed(name: str) -> dict[str, Any]:
    return json.loads((ROOT / "grafana" / "dashboards" / name).read_text())


def test_the_sdk_is_the_build_for_our_grafana() -> None:
    from importlib.metadata import version

    assert version("grafana-foundation-sdk").endswith("!" + GRAFANA_VERSION)


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_committed_dashboard_matches_grafanas_schema(name: str) -> None:
    assert problems(_committed(name)) == []


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_import_envelope(name: str) -> None:
    data = _committed(name)
    assert envelope_problems(data) == []
    assert {"type": "grafana", "id": "grafana", "name": "Grafana", "version": GRAFANA_VERSION} in data["__requires"]


def _stat(d: dict[str, Any]) -> dict[str, Any]:
    return next(p for p in d["panels"] if p["type"] == "stat")


def _chart(d: dict[str, Any]) -> dict[str, Any]:
    return next(p for p in d["panels"] if p["type"] == "barchart")


BROKEN: dict[str, tuple[Callable[[dict[str, Any]], object], str]] = {
    "unknown panel key": (lambda d: _stat(d).__setitem__("colour", "red"), ".colour: not a field of the schema"),
    "unknown option": (lambda d: _stat(d)["options"].__setitem__("colourMode", "value"), "not a field"),
    "enum value": (lambda d: _stat(d)["options"].__setitem__("colorMode", "rainbow"), "is not one of"),
    "option type": (lambda d: _chart(d)["options"].__setitem__("barWidth", "wide"), "expected a number"),
    "custom field config": (lambda d: _chart(d)["fieldConfig"]["defaults"]["custom"].__setitem__("lineWidht", 1),
                            "not a field"),
    "missing required": (lambda d: _stat(d)["gridPos"].pop("h"), "missing required ['h']"),
    "unknown query key": (lambda d: _stat(d)["targets"][0].__setitem__("exp", "up"), "not a field"),
    "undecodable query": (lambda d: [_stat(d).pop("datasource"), _stat(d)["targets"][0].pop("datasource")],
                          "no data source model decodes"),
    "override property": (
        lambda d: next(p for p in d["panels"] if p["title"] == "Requests/s by outcome")["fieldConfig"]["overrides"][0][
            "properties"].append({"id": "custom.axisPlacement", "value": "middle"}), "is not one of"),
    "variable key": (lambda d: d["templating"]["list"][1].__setitem__("definition", "x"), "not a field"),
    "transformation key": (lambda d: _chart(d)["transformations"][0].__setitem__("option", {}), "not a field"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_the_validation_catches(case: str) -> None:
    data = copy.deepcopy(_committed("satbench-overview.json"))
    mutate, expected = BROKEN[case]
    mutate(data)
    found = problems(data)
    assert any(expected in p for p in found), found


def test_envelope_catches_an_undeclared_input() -> None:
    data = copy.deepcopy(_committed("satbench-overview.json"))
    data["panels"][1]["datasource"] = {"type": "prometheus", "uid": "${DS_OTHER}"}
    assert "${DS_OTHER}: neither an input nor a variable" in envelope_problems(data)
