"""The parallel run's units (tests/conftest.py) name what exists, so a renamed file is not silently run whole
or handed out last."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import LIVE_FILES, PER_TEST_FILES, SHARED_GROUP, SHARED_SESSION_FILES, UNIT_SECONDS, scope

ROOT = Path(__file__).resolve().parents[1]


def test_every_listed_file_exists() -> None:
    missing = sorted(f for f in SHARED_SESSION_FILES | PER_TEST_FILES | LIVE_FILES if not (ROOT / f).is_file())
    assert not missing, f"listed in tests/conftest.py but not found: {missing}"


def test_the_recorded_units_are_files_of_the_suite_with_positive_seconds() -> None:
    recorded = json.loads(UNIT_SECONDS.read_text())
    assert recorded and all(isinstance(s, (int, float)) and s > 0 for s in recorded.values())
    stale = sorted(u for u in recorded if u != SHARED_GROUP and not (ROOT / u.split("::", 1)[0]).is_file())
    assert not stale, f"{UNIT_SECONDS.name} names files that are gone (run make test-durations): {stale}"


def test_a_unit_is_a_file_a_test_of_a_split_file_or_the_shared_group() -> None:
    split = sorted(PER_TEST_FILES)[0]
    assert scope(f"{split}::test_x[1]") == f"{split}::test_x[1]"
    assert scope("tests/test_layout.py::test_x") == "tests/test_layout.py"
    assert scope(f"{sorted(SHARED_SESSION_FILES)[0]}::test_x") == SHARED_GROUP
