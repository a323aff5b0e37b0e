"""The recommender's HTTP server: uvicorn, with a deadline on half-sent requests and a bound on connections.

uvicorn times out only idle keep-alive connections, after a response: a connection that opens and sends
nothing, or half a request head, or a head and then half its body, is held until the client leaves. About
1,100 of them exhausted the default 1,024 open files and took the service offline (nothing more accepted,
nor could the analysis open a socket or the store a file). Three guards:

- ``DeadlineHttpToolsProtocol`` and ``DeadlineH11Protocol`` (uvicorn's two HTTP/1.1 protocols, subclassed: the
  deadline needs the parser's events; httptools by default, as uvicorn's ``auto`` picks) close a
  connection that has not sent a whole request, head and body, within ``request_timeout_s`` of its first byte
  (or of opening, or of the end of its last response). More bytes do not extend it, so a trickle cannot hold
  a connection; a request the application is working on (every byte received) is never cut.
- It closes a connection on arrival while ``max_connections`` are open, so the open files stay below the
  process' limit (less ``RESERVE`` for the runs folder, Prometheus' sockets and the logs). uvicorn's own
  ``limit_concurrency`` is not used: it answers 503 to *every* request while that many connections are open,
  so 2,000 half-open connections would stop the polls, the very failure this module is for.
- ``raise_open_files_limit`` lifts the soft ``RLIMIT_NOFILE`` to the hard limit at start (1,024 is a soft
  default; the hard limit is commonly 524,288 or more), as servers that expect many clients do.

``bench/service_load.py`` measures the whole against a bare server answering the same bytes.
"""

from __future__ import annotations

import asyncio
import resource
from typing import Any, Literal, cast

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from satbench.recommender.settings import RecommenderSettings

__all__ = ["RESERVE", "DeadlineH11Protocol", "DeadlineHttpToolsProtocol", "deadline_protocol",
           "raise_open_files_limit", "serve", "uvicorn_config"]

RESERVE = 128  # open files kept for everything but client connections


class _Bounds:
    """What both protocols share: the deadline timer and the connection bound (module docstring). The
    bounds are class attributes, set per server by ``deadline_protocol``."""

    request_timeout_s: float = 10.0
    max_connections: int = 8192
    connections: set[Any]
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    _deadline: asyncio.TimerHandle | None = None
    _refused: bool = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self._refuse(cast(asyncio.Transport, transport)):
            return
        super().connection_made(transport)  # type: ignore[misc]
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)  # type: ignore[misc]

    def _refuse(self, transport: asyncio.Transport) -> bool:
        """Closes ``transport`` at once when ``max_connections`` are open (True)."""
        if len(self.connections) < self.max_connections:
            return False
        self._refused = True
        self.transport = transport
        transport.close()
        return True

    def _arm(self) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(self.request_timeout_s, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            self.transport.close()


class DeadlineH11Protocol(_Bounds, H11Protocol):
    """uvicorn's h11 protocol (pure Python, always installed with uvicorn) with the deadline and the bound."""

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        idle = self.conn.their_state is h11.IDLE and not self.conn.trailing_data[0]
        super().data_received(data)
        self._watch(fresh=idle)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._watch(fresh=True)

    def _watch(self, *, fresh: bool) -> None:
        """Armed while a request is awaited or arriving; cleared once it is whole; re-armed from now when
        ``fresh`` (a response ended, or the first byte of a request came)."""
        if self.conn.their_state not in (h11.IDLE, h11.SEND_BODY):
            self._disarm()
        elif fresh or self._deadline is None:
            self._arm()


class DeadlineHttpToolsProtocol(_Bounds, HttpToolsProtocol):
    """uvicorn's httptools protocol (what ``auto`` takes where httptools is installed, as with satbench) with
    the deadline and the bound: armed when the connection opens, re-armed at a request's first byte
    (``on_message_begin``) and after each response, cleared when the request is whole
    (``on_message_complete``)."""

    _receiving = False

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        super().data_received(data)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._receiving = True
        self._arm()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._receiving = False
        self._disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and not self._receiving:
            self._arm()


def deadline_protocol(request_timeout_s: float, max_connections: int, *,
                      parser: Literal["httptools", "h11"] = "httptools") -> type[asyncio.Protocol]:
    """The bounded protocol class with these bounds (uvicorn takes a class, not an instance): httptools (a
    dependency of satbench, what uvicorn's ``auto`` picks) or h11."""
    base: type[_Bounds] = DeadlineHttpToolsProtocol if parser == "httptools" else DeadlineH11Protocol
    bounded: type[asyncio.Protocol] = type(f"Bounded{base.__name__}", (base,),
                                           {"request_timeout_s": request_timeout_s,
                                            "max_connections": max_connections})
    return bounded


def raise_open_files_limit() -> int:
    """Lifts the soft open-files limit to the hard one; returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft


def uvicorn_config(app: Any, settings: RecommenderSettings, *, open_files: int | None = None) -> uvicorn.Config:
    """uvicorn's config for ``app`` under ``settings``: the bounded protocol, at
    most ``max_connections`` and never past ``open_files`` less ``RESERVE``."""
    limit = open_files if open_files is not None else resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    connections = max(1, min(settings.max_connections, limit - RESERVE))
    return uvicorn.Config(app, host=settings.host, port=settings.port, log_level="warning", access_log=False,
                          http=deadline_protocol(settings.request_timeout_s, connections),
                          backlog=min(2048, connections))


def serve(app: Any, settings: RecommenderSettings) -> None:
    """Runs ``app`` until stopped: the open-files limit raised first, then the bounded server."""
    uvicorn.Server(uvicorn_config(app, settings, open_files=raise_open_files_limit())).run()
