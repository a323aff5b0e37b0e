from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="session")
def llamacpp_fixtures() -> Path:
    """Recorded payloads of a real llama-server (see tests/fixtures/llamacpp/README.md)."""
    return FIXTURES / "llamacpp"
