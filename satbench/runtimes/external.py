"""External lanes: a runtime that is already running somewhere; the session only checks that it answers.

``check_external`` asks ``GET /health`` once (llama-server answers 200 when its model is loaded) and reads
``GET /props`` for the manifest; it raises ``StartError`` with a one-line reason when the runtime does not
answer, so a session refuses to walk a ladder against nothing.

The session's exporter for an external lane runs on the benchmarking host. Unless the runtime listens on
this host's loopback, that host's GPUs and processes are not the node's: the exporter is then started
without GPU readings (``--gpu none``) and no process to measure, and the lane's evidence says so
(``node_visible: false`` with the reason), so no figure of this host is shown as the node's. Running
``satbench exporter`` on the node itself gives them (docs/real-nodes.md).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

from satbench.runtimes.processes import StartError

__all__ = ["NOT_VISIBLE", "ExternalRuntime", "check_external", "is_this_host"]

NOT_VISIBLE = ("the runtime runs on another host: its GPU and process memory cannot be read from the "
               "benchmarking host, and the manifest's hardware describes the benchmarking host, not the node; "
               "run `satbench exporter` on the node for them (docs/real-nodes.md)")


def is_this_host(url: str) -> bool:
    """Whether ``url`` names this host's loopback (``localhost``, 127.0.0.0/8, ``::1``)."""
    host = (urlsplit(url).hostname or "").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, slots=True)
class ExternalRuntime:
    """An external lane's runtime; satisfies ``satbench.runtimes.RunningRuntime`` (no process of ours)."""

    url: str
    pid: int | None = None
    command: tuple[str, ...] = ()
    props: Mapping[str, Any] = field(default_factory=dict)

    @property
    def node_visible(self) -> bool:
        """Whether the node's GPU and processes are this host's (the runtime listens on loopback)."""
        return is_this_host(self.url)

    def evidence(self) -> dict[str, Any]:
        out: dict[str, Any] = {"runtime": "external", "url": self.url, "node_visible": self.node_visible}
        if not self.node_visible:
            out["node_reason"] = NOT_VISIBLE
        return out


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
