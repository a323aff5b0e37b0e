"""A lane: one model deployment measured on its own ladder, as every floor names it.

``Lane`` holds what every part needs to talk to the deployment and to label what it measured: the name
(the ``lane`` label of every series and the key of every answer), the API flavour, the model name sent in
requests, the environment variable that holds the API key (never the key), and the slot count when the
operator states it. The load generator's lane (``loadgen.config.LaneConfig``) adds the URL it sends to;
the session's lane (``satbench.session.config.LaneRuntime``) adds where the runtime comes from. Both
extend this model, so a field is declared once and the session hands the load generator its lane with
``Lane.fields_of``.

A lane lives on a node (one runtime host, ``node``); lane names are unique per node, not across a fleet, so
the one identity every floor keys a lane by is its *key* (``lane_key``): the bare name for a lane that names
no node (a session without nodes is keyed as it always was), ``<node>/<lane>`` otherwise. Prometheus series
never carry the key: they carry ``lane`` and, where there is one, ``node`` (``key_labels``), so an operator's
queries read the names they configured. Lanes that name no node are on ``LOCAL_NODE`` in the answer.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from satbench.core.api import ApiFlavour
from satbench.core.config_files import MAX_CONCURRENCY

__all__ = ["LOCAL_NODE", "NAME_PATTERN", "Lane", "duplicate_names", "key_labels", "lane_key", "lane_named", "split_key"]

NAME_PATTERN = r"^[A-Za-z0-9_.-]+$"
LOCAL_NODE = "local"  # the node of lanes that name none (the session's own host); reserved


def lane_key(node: str | None, name: str) -> str:
    """The key of lane ``name`` on ``node``: the bare name without a node, else ``node/name``."""
    return name if node is None else f"{node}/{name}"


def split_key(key: str) -> tuple[str | None, str]:
    """``(node, lane)`` of a lane key (``node`` None for a bare name)."""
    node, sep, name = key.rpartition("/")
    return (node, name) if sep else (None, key)


def key_labels(key: str) -> dict[str, str]:
    """The Prometheus labels that select lane ``key``'s series: ``lane``, and ``node`` where it names one."""
    node, name = split_key(key)
    return {"lane": name} if node is None else {"node": node, "lane": name}


class Lane(BaseModel):
    """One model deployment to measure (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=NAME_PATTERN, min_length=1, max_length=64)
    api: ApiFlavour = "llamacpp"
    model: str = ""
    api_key_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    slots: int | None = Field(default=None, gt=0, le=MAX_CONCURRENCY)  # a slot per concurrent request at most
    # The runtime host this lane is on (module docstring); None: the session's own host (LOCAL_NODE).
    node: str | None = Field(default=None, pattern=NAME_PATTERN, min_length=1, max_length=64)

    @property
    def key(self) -> str:
        """The lane's identity in records, step windows, the manifest and the answer (``lane_key``)."""
        return lane_key(self.node, self.name)

    @property
    def node_name(self) -> str:
        """The node the answer files this lane under: its ``node``, else ``LOCAL_NODE``."""
        return self.node or LOCAL_NODE

    def api_key(self) -> str | None:
        """The API key from the named environment variable (read now, never stored)."""
        return os.environ.get(self.api_key_env) if self.api_key_env else None

    def fields_of(self) -> dict[str, Any]:
        """This lane's ``Lane`` fields, to build another kind of lane for the same deployment."""
        return {name: getattr(self, name) for name in Lane.model_fields}


class _Named(Protocol):
    @property
    def name(self) -> str: ...


L = TypeVar("L", bound=_Named)


def duplicate_names(lanes: Sequence[_Named]) -> list[str]:
    """The lane keys (names, node-qualified where a lane names a node) that appear more than once, sorted."""
    names = [getattr(lane, "key", lane.name) for lane in lanes]
    return sorted({n for n in names if names.count(n) > 1})


def lane_named(lanes: Sequence[L], name: str) -> L:
    """The lane whose key (or, failing that, name) is ``name``; ``KeyError`` when there is none."""
    for lane in lanes:
        if getattr(lane, "key", lane.name) == name:
            return lane
    for lane in lanes:
        if lane.name == name:
            return lane
    raise KeyError(name)
