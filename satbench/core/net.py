"""Loopback ports: a free TCP port to bind a child server to.

The port is chosen, bound once to prove it free, and closed, so another process could take it before the
child binds it. The likeliest taker is the kernel itself: every outgoing connection gets a source port from
the ephemeral range (``/proc/sys/net/ipv4/ip_local_port_range``, 32768-60999 on Linux), which is where
binding port 0 picks too; a suite running many servers and clients at once lost a session's pre-chosen port
that way ("Address already in use"). So the port is drawn at random from below the ephemeral range (the
rule of the port-for library), where only another explicit bind can take it, and binding port 0 is the
fallback when no candidate there is free. Every caller still waits for the child's readiness (and fails
with the child's log) rather than assuming it bound.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

__all__ = ["free_port"]

_LOWEST = 10000  # above the well-known and most registered service ports
_TRIES = 32
_draw = random.SystemRandom()  # not the global generator, which tests seed


def _ephemeral_low(path: Path = Path("/proc/sys/net/ipv4/ip_local_port_range")) -> int:
    """The lowest port the kernel hands out on its own (32768 where the system does not say)."""
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _bindable(family: socket.AddressFamily, host: str, port: int) -> bool:
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` now, below the ephemeral range where one is (IPv6 when ``host``
    contains a colon)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    high = _ephemeral_low()
    if high - _LOWEST >= 1000:
        for _ in range(_TRIES):
            port = _draw.randrange(_LOWEST, high)
            if _bindable(family, host, port):
                return port
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
