"""The runtimes behind a session's lanes: a real ``llama-server`` started here
(:mod:`satbench.runtimes.llamacpp`), the embedded simulator (:mod:`satbench.runtimes.simulator`), or an
external endpoint that is only checked to answer (:mod:`satbench.runtimes.external`). Each hands the session
the same small view, :class:`RunningRuntime`, so the session and the run manifest never care which one is
behind a lane. Which runtimes there are, and what the session, the exporter and the client do with each, is
declared once in :mod:`satbench.runtimes.registry`.

This module stays import-light (no httpx, no subprocess): the launchers live in submodules, and the child
processes they and the session start in :mod:`satbench.runtimes.processes`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

__all__ = ["RunningRuntime"]


@runtime_checkable
class RunningRuntime(Protocol):
    """A runtime process that is up and answering: where it listens, which process, how it was started.

    ``url`` is the base URL (``http://127.0.0.1:PORT``, no trailing slash); ``pid`` the process id (``None``
    for an in-process runtime); ``command`` the exact argv it was started with; ``props`` the runtime's
    build information (llama.cpp's ``GET /props`` body, or the simulator's equivalent); ``evidence()`` what
    the run manifest records of it (its ``runtime`` key names the kind: ``llamacpp``, ``simulator``,
    ``external``).
    """

    @property
    def url(self) -> str: ...

    @property
    def pid(self) -> int | None: ...

    @property
    def command(self) -> Sequence[str]: ...

    @property
    def props(self) -> Mapping[str, Any]: ...

    def evidence(self) -> dict[str, Any]: ...
