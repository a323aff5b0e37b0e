"""A lane: one model deployment measured on its own ladder, as every floor names it.

``Lane`` holds what every part needs to talk to the deployment and to label what it measured: the name
(the ``lane`` label of every series and the key of every answer), the API flavour, the model name sent in
requests, the environment variable that holds the API key (never the key), and the slot count when the
operator states it. The load generator's lane (``loadgen.config.LaneConfig``) adds the URL it sends to;
the session's lane (``satbench.session.config.LaneRuntime``) adds where the runtime comes from. Both
extend this model, so a field is declared once and the session hands the load generator its lane with
``Lane.fields_of``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from core.api import ApiFlavour

__all__ = ["Lane", "duplicate_names", "lane_named"]


class Lane(BaseModel):
    """One model deployment to measure (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$", min_length=1, max_length=64)
    api: ApiFlavour = "llamacpp"
    model: str = ""
    api_key_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    slots: int | None = Field(default=None, gt=0)

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
    """The lane names that appear more than once, sorted."""
    names = [lane.name for lane in lanes]
    return sorted({n for n in names if names.count(n) > 1})


def lane_named(lanes: Sequence[L], name: str) -> L:
    """The lane called ``name``; ``KeyError`` when there is none."""
    for lane in lanes:
        if lane.name == name:
            return lane
    raise KeyError(name)
