"""The house limit on a function's length, stated for the functions that grew past it before (issue 40).

A reader holds one function in view at a time: past about 60 lines (its ``def`` to its last line, docstring
included) it stops being one concept. These functions were the longest of the tree and were split by concept
into named helpers; the test reads each one's length from the source (``ast``), so it cannot grow back
without this list saying so. The checker itself is tested on a planted function on either side of the limit.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 60
SPLIT = {  # function: its module, from the repository's root
    "compute_step_figures": "satbench/core/step_figures.py",
    "analyze_lane": "satbench/answer/analysis.py",
    "_walk": "satbench/answer/analysis.py",  # analyze_lane's walk, where its length was
    "node_fingerprint": "satbench/core/fingerprint.py",
    "create_app": "satbench/recommender/app.py",
}


def function_lengths(source: str) -> dict[str, int]:
    """Lines from ``def`` to the last line of each module-level function (the longest of a name's)."""
    lengths: dict[str, int] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno is not None:
            lengths[node.name] = max(lengths.get(node.name, 0), node.end_lineno - node.lineno + 1)
    return lengths


@pytest.mark.parametrize("name", sorted(SPLIT))
def test_split_function_stays_under_the_limit(name: str) -> None:
    lengths = function_lengths((ROOT / SPLIT[name]).read_text(encoding="utf-8"))
    assert name in lengths, f"{name} is no longer a module-level function of {SPLIT[name]}"
    assert lengths[name] <= LIMIT, f"{name} ({SPLIT[name]}) is {lengths[name]} lines, over the limit of {LIMIT}"


@pytest.mark.parametrize(("body_lines", "over"), [(LIMIT - 2, False), (LIMIT - 1, False), (LIMIT, True)])
def test_checker_counts_def_to_last_line(body_lines: int, over: bool) -> None:
    planted = "def planted():\n    '''Why.'''\n" + "    x = 1\n" * (body_lines - 1)
    length = function_lengths(planted)["planted"]
    assert length == body_lines + 1
    assert (length > LIMIT) is over
