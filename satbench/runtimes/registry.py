"""The runtimes a lane may name, declared once: what the session starts, which exporter flavour reads it, which
client APIs load it.

A lane's ``runtime`` (``SessionConfig``) is a key of :data:`RUNTIMES`, read when it is validated
(:func:`check_name`: one line that lists the names, as a literal's would); the session's say-lines, which
lanes share a router node or may be tuned (:attr:`RuntimeKind.started`: the session starts their server, so
it can restart it), and the exporter the session starts for a lane (its ``--flavour``) all read the entry. The
launcher that starts a kind, which takes the session's lane, is the session's ``parts.LAUNCHERS`` entry of
the same name (a test holds the two tables' keys equal).

Adding a runtime (vLLM, SGLang): its launcher module here in ``satbench/runtimes``, one entry below, its
launcher in ``session.parts.LAUNCHERS``, and, where it is read by another API than llama.cpp's, its
exporter adapter (``exporter.flavours.ADAPTERS``).

This module stays import-light: the config reads it on every validation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic_core import PydanticCustomError

from satbench.core.api import API_FLAVOURS, ApiFlavour

__all__ = ["RUNTIMES", "RuntimeKind", "check_name", "kind_of"]


@dataclass(frozen=True, slots=True)
class RuntimeKind:
    """One runtime: its name (a lane's ``runtime``), the server the session starts for it (``None``: one
    already running, which the session only checks answers), the exporter flavour that reads it
    (``exporter.flavours.ADAPTERS``), the client APIs a lane of it may load it through, and the lane setting
    that names what it serves (``profile``, ``model_file``; ``None``: what the external server holds).
    ``modelled``: a simulated node, whose GPUs and host are not this host's (its exporter reads neither NVML
    nor the host's CPU energy)."""

    name: str
    server: str | None
    exporter_flavour: str
    apis: tuple[ApiFlavour, ...]
    model_setting: str | None = None
    modelled: bool = False

    @property
    def started(self) -> bool:
        """Whether the session starts (and so may restart) this runtime's server."""
        return self.server is not None


RUNTIMES: dict[str, RuntimeKind] = {kind.name: kind for kind in (
    RuntimeKind("simulator", server="simulator", exporter_flavour="llamacpp", apis=API_FLAVOURS,
                model_setting="profile", modelled=True),
    RuntimeKind("llamacpp", server="llama-server", exporter_flavour="llamacpp", apis=API_FLAVOURS,
                model_setting="model_file"),
    RuntimeKind("external", server=None, exporter_flavour="llamacpp", apis=API_FLAVOURS),
)}


def check_name(value: Any) -> str:
    """``value`` if it names a runtime of :data:`RUNTIMES`, else pydantic's literal error listing them
    (``Input should be 'simulator', 'llamacpp' or 'external'``), so a config's one line stays as it was."""
    if isinstance(value, str) and value in RUNTIMES:
        return value
    names = [repr(name) for name in RUNTIMES]
    listed = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
    raise PydanticCustomError("literal_error", "Input should be {expected}", {"expected": listed})


def kind_of(name: str) -> RuntimeKind:
    """The entry of a validated lane's ``runtime``."""
    return RUNTIMES[name]
