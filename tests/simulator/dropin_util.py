"""Start the simulator from a llama-server command line, in a thread, for the drop-in wire tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from testkit.sim import InProcessSimulator

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "llamacpp"


def recorded(name: str) -> dict[str, Any]:
    """A drop-in fixture recorded from the real llama-server (see tests/fixtures/llamacpp/README.md)."""
    doc: dict[str, Any] = json.loads((FIXTURES / "dropin" / f"{name}.json").read_text(encoding="utf-8"))
    return doc


def sse_payloads(text: str) -> list[Any]:
    out = []
    for block in text.split("\n\n"):
        if block.startswith("data: ") and block != "data: [DONE]":
            out.append(json.loads(block[len("data: "):]))
    return out


class DropIn(InProcessSimulator):
    """``satbench sim`` parsed from ``argv`` (llama-server flags welcome) and served on a free port."""

    def __init__(self, *argv: str) -> None:
        from satbench.cli import build_parser
        from satbench.simulator.cli import prepare

        super().__init__()
        args = build_parser(only="sim").parse_args(["sim", "--port", str(self.port), *argv])
        self.profile, self.options = prepare(args)
