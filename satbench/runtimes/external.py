"""External lanes: a runtime that is already running somewhere; the session only checks that it answers.

``check_external`` asks ``GET /health`` once (llama-server answers 200 when its model is loaded) and reads
``GET /props`` for the manifest; it raises ``StartError`` with a one-line reason when the runtime does not
answer, so a session refuses to walk a ladder against nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from satbench.session.processes import StartError

__all__ = ["ExternalRuntime", "check_external"]


@dataclass(frozen=True, slots=True)
class ExternalRuntime:
    """An external lane's runtime; satisfies ``satbench.runtimes.RunningRuntime`` (no process of ours)."""

    url: str
    pid: int | None = None
    command: tuple[str, ...] = ()
    props: Mapping[str, Any] = field(default_factory=dict)

    def evidence(self) -> dict[str, Any]:
        return {"runtime": "external", "url": self.url}


def check_external(lane: str, url: str, *, timeout_s: float = 5.0) -> ExternalRuntime:
    """The runtime at ``url`` if its ``/health`` answers 200; ``StartError`` naming the lane otherwise."""
    url = url.rstrip("/")
    try:
        resp = httpx.get(f"{url}/health", timeout=timeout_s)
    except httpx.HTTPError as exc:
        raise StartError(f"lane {lane}: runtime at {url} is not answering ({type(exc).__name__})") from exc
    if resp.status_code != 200:
        raise StartError(f"lane {lane}: runtime at {url}/health answered HTTP {resp.status_code}")
    return ExternalRuntime(url=url)
