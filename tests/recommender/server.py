"""Runs an ASGI app on a real uvicorn server on loopback, in a thread, for wire tests and the bench."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import uvicorn

from testkit.net import free_port, wait_http

__all__ = ["serve"]


@contextlib.contextmanager
def serve(app: Any, ready_path: str = "/healthz") -> Iterator[str]:
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False,
                            lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="uvicorn-test", daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(url + ready_path, timeout_s=30)
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=10)
