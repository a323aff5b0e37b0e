"""Loopback ports: a free TCP port to bind a child server to.

The port is found by binding port 0 and closing the socket, so another process could take it before the
child binds it; on a test or benchmark host that race is rare, and every caller waits for the child's
readiness (and fails with the child's log) rather than assuming it bound.
"""

from __future__ import annotations

import socket

__all__ = ["free_port"]


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` now (IPv6 when ``host`` contains a colon)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
