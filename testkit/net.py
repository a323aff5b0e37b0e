"""Loopback helpers for wire tests: free ports (``core.net``), reading a request, waiting for a server."""

from __future__ import annotations

import socket
import time

import httpx

from satbench.core.net import free_port

__all__ = ["free_port", "read_http_request", "wait_http"]


def read_http_request(sock: socket.socket, buffer: bytes = b"") -> tuple[bytes, bytes] | None:
    """Reads one HTTP/1.1 request (head and Content-Length body) from ``sock`` after the bytes already in
    ``buffer``; returns (request, bytes past it), or None when the peer closed first."""
    while b"\r\n\r\n" not in buffer:
        data = sock.recv(65536)
        if not data:
            return None
        buffer += data
    head, _, buffer = buffer.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(buffer) < length:
        data = sock.recv(65536)
        if not data:
            return None
        buffer += data
    return head + b"\r\n\r\n" + buffer[:length], buffer[length:]


def wait_http(url: str, timeout_s: float = 15.0, ok_statuses: tuple[int, ...] = (200,)) -> None:
    """Polls ``url`` until it answers one of ``ok_statuses`` or ``timeout_s`` passes (then raises)."""
    deadline = time.monotonic() + timeout_s
    last: object = None
    while time.monotonic() < deadline:
        try:
            resp = httpx.get(url, timeout=1.0)
            if resp.status_code in ok_statuses:
                return
            last = resp.status_code
        except httpx.HTTPError as exc:
            last = exc
        time.sleep(0.05)
    raise TimeoutError(f"{url} did not answer in {timeout_s}s (last: {last!r})")
