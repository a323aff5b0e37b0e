"""The recommender answers only to the names it is configured under: a wrong ``Host`` gets 421.

DNS rebinding: a web page on a name the attacker controls (``evil.example``) has that name re-resolved to the
service's address (127.0.0.1, or a cluster address the browser can reach), and the browser, believing it talks
to ``evil.example``, reads every answer (``/runs/{id}`` gave the full manifest) and could post with a token it
found. The browser still sends ``Host: evil.example``, so the service refuses any ``Host`` that is not one of
its names (``RecommenderSettings.host_names``: the bind address, this host's name, ``localhost``, ``127.0.0.1``,
``::1``, and ``allowed_hosts``) with 421 Misdirected Request, before any route reads anything.

An IP literal is always let through: a rebinding needs a name to rebind, and Prometheus' pod discovery and a
kubelet's probes address the service by its IP. ``*.example.org`` in the list allows every name under
``example.org``; ``*`` alone allows every name (the check off). A request without ``Host`` (HTTP/1.0) is let
through: a browser always sends one.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterable

from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["HostCheckASGI", "host_of"]


def host_of(value: bytes) -> str:
    """The name in a ``Host`` header value: lower case, without its port or a trailing dot, an IPv6 literal
    without its brackets."""
    text = value.decode("latin-1").strip().lower()
    if text.startswith("["):
        return text[1:text.find("]")] if "]" in text else text
    name, _, _ = text.partition(":")
    return name.rstrip(".")


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class HostCheckASGI:
    """ASGI middleware: a request whose ``Host`` names none of ``allowed`` (module docstring) gets 421."""

    def __init__(self, app: ASGIApp, allowed: Iterable[str]) -> None:
        self.app = app
        names = {a.strip().lower().rstrip(".") for a in allowed if a.strip()}
        self.any = "*" in names
        self.exact = frozenset(n for n in names if not n.startswith("*."))
        self.suffixes = tuple(n[1:] for n in names if n.startswith("*."))  # ".example.org"
        self._said = ", ".join(sorted(names))

    def allows(self, name: str) -> bool:
        return (self.any or name in self.exact or _is_ip(name)
                or any(name.endswith(s) and len(name) > len(s) for s in self.suffixes))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and not self.any:
            host = next((v for k, v in scope.get("headers") or () if k == b"host"), None)
            if host is not None and not self.allows(host_of(host)):
                if scope["type"] == "websocket":
                    await send({"type": "websocket.close", "code": 1008})
                    return
                body = json.dumps({"detail": f"Host {host.decode('latin-1')!r} is not a name this service "
                                             f"answers to (allowed_hosts: {self._said})"}).encode()
                await send({"type": "http.response.start", "status": 421,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)
